"""The cluster watch keeps each node's metric lines, its view and the guards' counts current from
the watch events: an event changes exactly the node it is about, a deleted node's lines go, a
relist replaces everything, and after any sequence of events the text equals a from-scratch
rendering of what the API server holds."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import random
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from exporter.controller.cluster import ClusterWatch
from exporter.controller.exposition import node_exposition
from exporter.kube.api import KubeAPI
from exporter.kube.convert import lease_info, node_summary
from exporter.metrics.kube_requests import KubeRequestMetrics
from exporter.metrics.nodes import NodeCollectors
from exporter.model.clusterview import KUBELET_CONDITIONS, VIEW_TAINTS, build_view, view_labels
from exporter.model.guards import correlated_failure
from exporter.model.health import counts
from exporter.model.rfc3339 import format_micro_time, format_time
from exporter.settings.policy import default_policy
from nodesync_sim.fake.apiserver import APIServer
from nodesync_sim.fake.apiserver.store import Store
from tests.controller.builders import T0
from tests.controller.conftest import LEASES, SimClock
from tests.metrics.node_reference import reference_text
from tests.support.wait import until_async

LABEL = "example.com/scale-out"
# Every series but the joining nodes' stages, which a from-scratch view does not have (their
# own tests: tests/controller/test_cluster_joins.py).
EVERYTHING = dataclasses.replace(NodeCollectors.everything(), joins=False)
DEFAULTS = dataclasses.replace(NodeCollectors(), joins=False)


@contextlib.asynccontextmanager
async def watching(
    server: APIServer,
    collectors: NodeCollectors = EVERYTHING,
    clock: Callable[[], float] | None = None,
    registry: CollectorRegistry | None = None,
) -> AsyncIterator[ClusterWatch]:
    observer = KubeRequestMetrics(registry if registry is not None else CollectorRegistry())
    async with KubeAPI(server.aio_configuration(), observer=observer) as api:
        cluster = ClusterWatch(
            api,
            wave_label=LABEL,
            wave_gap=120.0,
            collectors=collectors,
            clock=clock or SimClock(),
        )
        cluster.start()
        try:
            async with asyncio.timeout(10):
                await cluster.wait_synced()
            yield cluster
        finally:
            await cluster.stop()


def node_object(
    name: str,
    *,
    ready: str = "True",
    transition: float = T0,
    wave: str = "w1",
    unschedulable: bool = False,
    taints: tuple[tuple[str, str], ...] = (),
    labels: dict[str, str] | None = None,
    disk: str = "False",
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {LABEL: wave, **(labels or {})}},
        "spec": {
            "unschedulable": unschedulable,
            "taints": [{"key": k, "effect": e} for k, e in taints],
        },
        "status": {
            "conditions": [
                {"type": "Ready", "status": ready, "lastTransitionTime": format_time(transition)},
                {"type": "DiskPressure", "status": disk, "lastTransitionTime": format_time(T0)},
                {"type": "KernelDeadlock", "status": "False"},  # not kubelet's: dropped
            ]
        },
    }


def lease_object(name: str, renew: float) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"holderIdentity": name, "renewTime": format_micro_time(renew)},
    }


def rewrite_node(server: APIServer, body: dict[str, Any]) -> None:
    """Replace a Node's labels and spec, then its status (a status subresource, as on a real
    server)."""
    current = server.store.get("nodes", body["metadata"]["name"])
    current["metadata"]["labels"] = body["metadata"]["labels"]
    current["spec"] = body["spec"]
    stored = server.store.replace("nodes", current)
    stored["status"] = body["status"]
    server.store.replace("nodes", stored, subresource="status")


def expected_text(server: APIServer, collectors: NodeCollectors = EVERYTHING) -> bytes:
    """What the API server holds, converted and rendered from scratch."""
    nodes = [
        node_summary(
            o, labels=view_labels(LABEL), conditions=KUBELET_CONDITIONS, taints=VIEW_TAINTS
        )
        for o in server.store.list("nodes")
    ]
    leases = [lease_info(o) for o in server.store.list("leases", namespace=LEASES)]
    view = build_view(nodes, leases, wave_label=LABEL, gap_seconds=120.0, now=T0)
    text = node_exposition(view, collectors)
    assert text.decode() == reference_text(view, collectors)
    return text


def served(cluster: ClusterWatch) -> bytes:
    return b"".join(cluster.exposition())


@pytest.fixture
def clock() -> SimClock:
    return SimClock()


@pytest.fixture
async def server(clock: SimClock) -> AsyncIterator[APIServer]:
    async with APIServer(store=Store(clock=clock), bookmark_interval=0.2) as srv:
        yield srv


async def test_a_lease_renewal_changes_only_that_nodes_lease_line(server: APIServer) -> None:
    for name in ("a", "b", "c"):
        server.store.create("nodes", node_object(name))
        server.store.create("leases", lease_object(name, T0 + 1), namespace=LEASES)
    async with watching(server) as cluster:
        await until_async(
            lambda: served(cluster) == expected_text(server),
            timeout=15.0,
            what="the first list",
            interval=0.01,
        )
        before = {n: cluster.node_lines(n) for n in ("a", "b", "c")}
        lease = server.store.get("leases", "b", namespace=LEASES)
        lease["spec"]["renewTime"] = format_micro_time(T0 + 11.5)
        server.store.replace("leases", lease, namespace=LEASES)
        await until_async(
            lambda: cluster.node_lines("b") != before["b"],
            timeout=15.0,
            what="b's renewal",
            interval=0.01,
        )
        after = {n: cluster.node_lines(n) for n in ("a", "b", "c")}
        assert after["a"] == before["a"]
        assert after["c"] == before["c"]
        families = [f.name for f in cluster.families]
        pairs = zip(families, before["b"] or (), after["b"] or (), strict=True)
        changed = [f for f, old, new in pairs if old != new]
        assert changed == ["nodesync_node_lease_renew_timestamp_seconds"]
        assert served(cluster) == expected_text(server)


async def test_a_node_change_rerenders_that_node_and_a_deleted_node_goes(
    server: APIServer,
) -> None:
    for name in ("a", "b"):
        server.store.create("nodes", node_object(name))
    async with watching(server) as cluster:
        await until_async(
            lambda: served(cluster) == expected_text(server),
            timeout=15.0,
            what="the first list",
            interval=0.01,
        )
        a_before = cluster.node_lines("a")
        rewrite_node(
            server, node_object("b", ready="False", transition=T0 + 40, unschedulable=True)
        )
        await until_async(
            lambda: served(cluster) == expected_text(server),
            timeout=15.0,
            what="b NotReady",
            interval=0.01,
        )
        assert cluster.node_lines("a") == a_before
        assert b'node="b",status="false"} 1.0' in served(cluster)
        assert b'nodesync_node_unschedulable{node="b"} 1.0' in served(cluster)

        server.store.delete("nodes", "b")
        await until_async(
            lambda: cluster.node_lines("b") is None, timeout=15.0, what="b deleted", interval=0.01
        )
        assert b'node="b"' not in served(cluster)
        assert served(cluster) == expected_text(server)
        assert cluster.view().node("b") is None
        assert [n.name for n in cluster.view().nodes] == ["a"]


async def test_a_relist_replaces_everything(server: APIServer) -> None:
    for name in ("a", "b", "c"):
        server.store.create("nodes", node_object(name))
        server.store.create("leases", lease_object(name, T0), namespace=LEASES)
    registry = CollectorRegistry()
    async with watching(server, registry=registry) as cluster:
        await until_async(
            lambda: served(cluster) == expected_text(server),
            timeout=15.0,
            what="the first list",
            interval=0.01,
        )
        relists = _relists(registry)
        # Without yielding to the loop: the open watches cannot see these before the
        # compaction; the informers get 410 and learn everything from new lists.
        server.store.delete("nodes", "a")
        server.store.patch(
            "nodes", "b", {"metadata": {"labels": {"nodesync.io/protected": "true"}}}
        )
        server.store.create("nodes", node_object("d", ready="Unknown", wave="w2"))
        server.store.delete("leases", "c", namespace=LEASES)
        server.store.create("leases", lease_object("d", T0 + 5), namespace=LEASES)
        server.compact()
        await until_async(
            lambda: served(cluster) == expected_text(server),
            timeout=15.0,
            what="after the relist",
            interval=0.01,
        )
        assert _relists(registry) == relists + 2  # Nodes and Leases
        text = served(cluster)
        assert b'node="a"' not in text
        assert b'nodesync_node_rollback_exempt{node="b",reason="protected"} 1.0' in text
        assert b'nodesync_node_lease_renew_timestamp_seconds{node="c"}' not in text
        assert b'nodesync_node_wave{node="d",wave="w2"} 1.0' in text


def _relists(registry: CollectorRegistry) -> float:
    return sum(
        registry.get_sample_value("nodesync_informer_relists_total", {"resource": r}) or 0.0
        for r in ("nodes", "leases")
    )


@pytest.mark.parametrize("seed", range(3))
async def test_incremental_text_equals_a_from_scratch_render(server: APIServer, seed: int) -> None:
    """Random creations, changes and deletions of Nodes and Leases, and compactions that force
    relists in between: at each checkpoint the text kept node by node is the text rendered from
    scratch from what the API server holds, with every switch on and with the defaults."""
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(12)]
    taints = [
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/not-ready", "NoSchedule"),
        ("nodesync.io/rollback", "NoSchedule"),
        ("ToBeDeletedByClusterAutoscaler", "NoSchedule"),
        ("karpenter.sh/disrupted", "NoSchedule"),
        ("dedicated", "NoSchedule"),
    ]

    def random_node(name: str) -> dict[str, Any]:
        return node_object(
            name,
            ready=rng.choice(["True", "False", "Unknown"]),
            transition=T0 + rng.randrange(100),
            # a node keeps its wave whatever its label later says: one label per name
            wave=f"w{int(name[1:]) % 3}",
            unschedulable=rng.random() < 0.3,
            taints=tuple(rng.sample(taints, rng.randrange(3))),
            labels=rng.choice(
                [
                    {},
                    {"nodesync.io/protected": "true"},
                    {"node-role.kubernetes.io/control-plane": ""},
                ]
            ),
            disk=rng.choice(["True", "False"]),
        )

    def step() -> None:
        name = rng.choice(names)
        node = server.store.try_get("nodes", name)
        lease = server.store.try_get("leases", name, namespace=LEASES)
        roll = rng.random()
        if roll < 0.35:
            if node is None:
                server.store.create("nodes", random_node(name))
            else:
                rewrite_node(server, random_node(name))
        elif roll < 0.45:
            if node is not None:
                server.store.delete("nodes", name)
        elif roll < 0.85:
            renew = T0 + rng.uniform(0, 1000)
            if lease is None:
                server.store.create("leases", lease_object(name, renew), namespace=LEASES)
            else:
                lease["spec"]["renewTime"] = format_micro_time(renew)
                server.store.replace("leases", lease, namespace=LEASES)
        elif lease is not None:
            server.store.delete("leases", name, namespace=LEASES)

    for switches in (EVERYTHING, DEFAULTS):
        async with watching(server, switches) as cluster:
            for checkpoint in range(6):
                for _ in range(rng.randrange(5, 40)):
                    step()
                    if rng.random() < 0.3:
                        await asyncio.sleep(0)  # some events one by one, some in bursts
                if checkpoint % 3 == 2:
                    server.compact()
                await until_async(
                    functools.partial(_caught_up, cluster, server, switches),
                    timeout=15.0,
                    what=f"checkpoint {checkpoint}",
                    interval=0.01,
                )
                view = cluster.view()
                policy = dataclasses.replace(default_policy(), scaleout_window=300.0)
                scanned = counts(
                    (n.health for n in view.nodes),
                    T0 + 500,
                    policy.scaleout_window,
                    policy.node_monitor_grace_period,
                )
                result = correlated_failure(view, policy, T0 + 500)
                assert (result.established, result.failing) == scanned


def _caught_up(cluster: ClusterWatch, server: APIServer, switches: NodeCollectors) -> bool:
    return served(cluster) == expected_text(server, switches)


async def test_a_view_handed_out_stays_as_it_was(server: APIServer) -> None:
    server.store.create("nodes", node_object("a"))
    async with watching(server) as cluster:
        await until_async(
            lambda: cluster.view().node("a") is not None, timeout=15.0, what="a", interval=0.01
        )
        first = cluster.view()
        server.store.create("nodes", node_object("b"))
        server.store.delete("nodes", "a")
        await until_async(
            lambda: cluster.view().node("b") is not None, timeout=15.0, what="b", interval=0.01
        )
        await until_async(
            lambda: cluster.view().node("a") is None, timeout=15.0, what="a deleted", interval=0.01
        )
        assert [n.name for n in first.nodes] == ["a"]
        assert [n.name for n in cluster.view().nodes] == ["b"]


async def test_nodes_listed_together_join_their_waves_in_creation_order(
    server: APIServer, clock: SimClock
) -> None:
    """A list hands its nodes over in name order; waves are judged in creation order all the
    same: c (created between a and b) keeps them in one time wave."""
    for name, offset in (("a", 0.0), ("b", 200.0), ("c", 100.0)):
        clock.now = T0 + offset
        body = node_object(name)
        body["metadata"]["labels"] = {}
        server.store.create("nodes", body)
    async with watching(server, clock=lambda: T0 + 300) as cluster:
        view = cluster.view()
        assert {n.name: n.wave_id for n in view.nodes} == {
            "a": "2026-11-30T01:02:03Z",
            "b": "2026-11-30T01:02:03Z",
            "c": "2026-11-30T01:02:03Z",
        }
        assert [w.size for w in view.waves] == [3]
