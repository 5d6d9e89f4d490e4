"""The cluster watch follows a join from the API's own objects: the Node's conditions and taints,
its Lease's creation, and the first workload pod that starts running (from the watch of running
pods, which caches nothing); and judges the join SLO as time passes."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from exporter.controller.cluster import ClusterWatch
from exporter.kube.api import KubeAPI
from exporter.metrics.kube_requests import KubeRequestMetrics
from exporter.metrics.nodes import NodeCollectors
from exporter.model.joins import JoinPolicy
from exporter.model.rfc3339 import format_micro_time, format_time
from nodesync_sim.fake.apiserver import APIServer
from tests.controller.builders import T0
from tests.controller.conftest import LEASES, SimClock
from tests.metrics.exposition import render, series
from tests.support.wait import until_async

GATE = "readiness.k8s.io/network-ready"


def node_object(name: str, *, ready: str, at: float, taints: list[str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"taints": [{"key": k, "effect": "NoSchedule"} for k in taints]},
        "status": {
            "conditions": [
                {"type": "Ready", "status": ready, "lastTransitionTime": format_time(at)}
            ]
        },
    }


def set_status(server: APIServer, name: str, *, ready: str, at: float, taints: list[str]) -> None:
    body = node_object(name, ready=ready, at=at, taints=taints)
    current = server.store.get("nodes", name)
    current["spec"] = body["spec"]
    stored = server.store.replace("nodes", current)
    stored["status"] = body["status"]
    server.store.replace("nodes", stored, subresource="status")


def pod_object(name: str, node: str, owner: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": owner,
                    "name": "o",
                    "uid": "u",
                    "controller": True,
                }
            ],
        },
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Pending"},
    }


def run_pod(server: APIServer, name: str, started: float) -> None:
    pod = server.store.get("pods", name, namespace="default")
    pod["status"] = {
        "phase": "Running",
        "containerStatuses": [
            {"name": "c", "state": {"running": {"startedAt": format_time(started)}}}
        ],
    }
    server.store.replace("pods", pod, namespace="default", subresource="status")


def stage_lines(cluster: ClusterWatch) -> dict[tuple[str, str], float]:
    text = b"".join(cluster.exposition()).decode()
    return {
        (dict(labels)["node"], dict(labels)["stage"]): value
        for labels, value in series(text, "nodesync_node_join_stage_timestamp_seconds").items()
    }


def judged(cluster: ClusterWatch) -> dict[str, float]:
    text = render(cluster.join_families())
    return {
        dict(labels)["outcome"]: v for labels, v in series(text, "nodesync_joins_total").items()
    }


async def test_a_join_followed_stage_by_stage_from_the_api_objects(
    server: APIServer, clock: SimClock
) -> None:
    registry = CollectorRegistry()
    async with KubeAPI(server.aio_configuration(), observer=KubeRequestMetrics(registry)) as api:
        cluster = ClusterWatch(
            api,
            wave_label=None,
            wave_gap=120.0,
            collectors=NodeCollectors(),
            join=JoinPolicy(),
            clock=clock,
        )
        cluster.start()
        try:
            await cluster.wait_synced()
            server.store.create("nodes", node_object("a", ready="False", at=T0, taints=[GATE]))
            await until_async(
                lambda: cluster.node_lines("a") is not None,
                timeout=15.0,
                what="node a",
                interval=0.01,
            )
            assert ("a", "gates_cleared") not in stage_lines(cluster)  # held by its gate
            clock.now = T0 + 4
            server.store.create(
                "leases",
                {"metadata": {"name": "a"}, "spec": {"renewTime": format_micro_time(T0 + 4)}},
                namespace=LEASES,
            )
            await until_async(
                lambda: ("a", "lease") in stage_lines(cluster),
                timeout=15.0,
                what="the Lease",
                interval=0.01,
            )
            assert stage_lines(cluster)[("a", "lease")] == T0 + 4

            clock.now = T0 + 40
            set_status(server, "a", ready="True", at=T0 + 38, taints=[GATE])
            await until_async(
                lambda: ("a", "ready") in stage_lines(cluster),
                timeout=15.0,
                what="Ready",
                interval=0.01,
            )
            clock.now = T0 + 90
            set_status(server, "a", ready="True", at=T0 + 38, taints=[])
            await until_async(
                lambda: ("a", "gates_cleared") in stage_lines(cluster),
                timeout=15.0,
                what="the gate",
                interval=0.01,
            )

            # A DaemonSet's pod runs first: it is not the node's workload.
            server.store.create("pods", pod_object("ds", "a", "DaemonSet"), namespace="default")
            server.store.create("pods", pod_object("web", "a", "ReplicaSet"), namespace="default")
            run_pod(server, "ds", T0 + 95)
            run_pod(server, "web", T0 + 99)
            await until_async(
                lambda: ("a", "pod_running") in stage_lines(cluster),
                timeout=15.0,
                what="the pod",
                interval=0.01,
            )

            assert stage_lines(cluster) == {
                ("a", "lease"): T0 + 4,
                ("a", "ready"): T0 + 38,
                ("a", "network_ready"): T0 + 38,
                ("a", "gates_cleared"): T0 + 90,
                ("a", "pod_running"): T0 + 99,
            }
            assert judged(cluster) == {"ready": 1.0, "not_ready": 0.0}

            # A node that never gets Ready is judged when the objective runs out.
            clock.now = T0 + 100
            server.store.create("nodes", node_object("b", ready="False", at=T0 + 100, taints=[]))
            await until_async(
                lambda: cluster.node_lines("b") is not None,
                timeout=15.0,
                what="node b",
                interval=0.01,
            )
            assert judged(cluster) == {"ready": 1.0, "not_ready": 0.0}
            clock.now = T0 + 400
            assert judged(cluster) == {"ready": 1.0, "not_ready": 1.0}
            # and the join series go when the window ends
            clock.now = T0 + 1899
            assert stage_lines(cluster) == {("b", "gates_cleared"): T0 + 100}
            clock.now = T0 + 1900
            assert stage_lines(cluster) == {}
        finally:
            await cluster.stop()


def holds(cluster: ClusterWatch) -> dict[str, tuple[str, float]]:
    text = b"".join(cluster.exposition()).decode()
    found: dict[str, tuple[str, float]] = {}
    for family, state in (
        ("nodesync_node_readiness_held", "held"),
        ("nodesync_node_readiness_taints_left", "left"),
    ):
        for labels, value in series(text, family).items():
            found[dict(labels)["node"]] = (state, value)
    return found


async def test_a_readiness_hold_ends_at_its_limit_without_an_event(
    server: APIServer, clock: SimClock
) -> None:
    registry = CollectorRegistry()
    async with KubeAPI(server.aio_configuration(), observer=KubeRequestMetrics(registry)) as api:
        cluster = ClusterWatch(
            api,
            wave_label=None,
            wave_gap=120.0,
            join=JoinPolicy(readiness_hold_limit=600.0),
            clock=clock,
        )
        cluster.start()
        try:
            await cluster.wait_synced()
            # stuck: NotReady behind its gate; left: Ready with its gate; free: no gate
            server.store.create("nodes", node_object("stuck", ready="False", at=T0, taints=[GATE]))
            server.store.create("nodes", node_object("left", ready="True", at=T0, taints=[GATE]))
            server.store.create("nodes", node_object("free", ready="False", at=T0, taints=[]))
            await until_async(
                lambda: cluster.node_lines("free") is not None,
                timeout=15.0,
                what="the nodes",
                interval=0.01,
            )
            await until_async(
                lambda: len(holds(cluster)) == 2, timeout=15.0, what="the holds", interval=0.01
            )
            assert holds(cluster) == {"stuck": ("held", 1.0), "left": ("held", 1.0)}
            clock.now = T0 + 599
            assert holds(cluster) == {"stuck": ("held", 1.0), "left": ("held", 1.0)}
            # No event of the nodes: the limit alone ends the holds.
            clock.now = T0 + 600
            assert holds(cluster) == {"left": ("left", 1.0)}
            # The gate removed: nothing left to report.
            set_status(server, "left", ready="True", at=T0, taints=[])
            await until_async(
                lambda: holds(cluster) == {}, timeout=15.0, what="the gate removed", interval=0.01
            )
        finally:
            await cluster.stop()
