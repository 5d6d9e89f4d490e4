"""A kubelet goes silent (SIGSTOP) while its containerd and the agent live on: the
controller-manager marks the node Unknown and taints it, the shipped rule fires, nodesync
rolls the node back, and the containers of the evicted pods (which no kubelet will stop) are
removed from the node's containerd before the rollback is Succeeded. The kubelet, resumed and
restarted, registers a new Node that is judged afresh."""

from __future__ import annotations

import time

import pytest

from nodesync_sim.real.cluster import condition
from nodesync_sim.real.node import RealNode
from tests.realcluster.helpers import (
    audit_mark,
    containers_of,
    controller_effects,
    create_pod,
    follow_rollback,
    namespace,
    pod,
    product_events,
    refused,
    wait_phase,
)
from tests.support.realcluster import RealChain
from tests.support.wait import until

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(420)]

UNREACHABLE = "node.kubernetes.io/unreachable"


def test_a_silent_kubelet_is_rolled_back_and_its_pods_containers_removed(
    realchain: RealChain,
) -> None:
    api = realchain.api
    realchain.healthy_node()  # not every node breaks: the controller-manager stays per-node
    node = realchain.join()
    mark = audit_mark(api)
    try:
        _silent_kubelet(realchain, node, mark)
    finally:
        realchain.leave(node)  # broken: never reused


def _silent_kubelet(realchain: RealChain, node: RealNode, mark: int) -> None:
    api = realchain.api
    name = node.name
    with namespace(api) as ns:
        pods = []
        for i in range(2):
            create_pod(api, ns, pod(f"app-{i}", node))
            pods.append(wait_phase(api, ns, f"app-{i}", "Running"))
        uids = {p["metadata"]["uid"] for p in pods}
        first_uid = api.ok("GET", f"/api/v1/nodes/{name}")["metadata"]["uid"]
        assert len(containers_of(node.cri_endpoint, uids)) == 2

        fault = time.time()
        node.freeze_kubelet()

        def unknown() -> bool:
            found = realchain.cluster.node_object(name) or {}
            return condition(found, "Ready").get("status") == "Unknown"

        until(unknown, timeout=120, what="the controller-manager to mark the node Unknown")
        unknown_at = time.time()
        until(
            lambda: any(
                t["key"] == UNREACHABLE
                for t in (realchain.cluster.node_object(name) or {})
                .get("spec", {})
                .get("taints", ())
            ),
            timeout=60,
            what="the unreachable taint",
        )
        tainted_at = time.time()
        until(
            lambda: realchain.prom.query(
                f'ALERTS{{alertname="NodesyncNewNodeNotReady",node="{name}",alertstate="firing"}}'
            ),
            timeout=90,
            what="the shipped rule to fire",
        )
        alert_at = time.time()
        print(
            f"silent kubelet {name}: Unknown +{unknown_at - fault:.0f} s, unreachable taint "
            f"+{tainted_at - fault:.0f} s, alert +{alert_at - fault:.0f} s"
        )

        rollback, first_step_at, done_at = follow_rollback(api, name, 180)
        print(
            f"first step +{first_step_at - fault:.0f} s, rollback "
            f"{rollback['status']['phase']} +{done_at - fault:.0f} s"
        )
        assert rollback["status"]["phase"] == "Succeeded", rollback["status"]
        # The correct outcome: nothing of the evicted pods runs on the node when it ends.
        assert containers_of(node.cri_endpoint, uids) == [], "containers left"
        api.wait_gone(f"/api/v1/nodes/{name}", timeout=60)

        # Every effect exactly once, nothing refused.
        events = product_events(api, mark)
        assert refused(events) == []
        effects = controller_effects(api, events)
        assert effects[("delete", "nodes", None)] == 1, effects
        assert effects[("create", "pods", "eviction")] == 2, effects

        # The kubelet, resumed and restarted, registers a new Node.
        node.restart_kubelet()
        again = realchain.cluster.wait_ready(name, timeout=120)
        assert again["metadata"]["uid"] != first_uid
