"""A node's containerd freezes (SIGSTOP) while its kubelet lives: the kubelet keeps renewing the
Lease and keeps the Node Ready until its own runtime request times out (``runtimeRequestTimeout``,
2 minutes by default, left as shipped here); the agent sees the runtime down at its next sync,
the shipped rule fires and nodesync rolls the node back long before. The test measures that lead:
from nodesync's first step to kubelet's ``NodeNotReady``."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from exporter.model.rfc3339 import parse_time
from nodesync_sim.real.cluster import condition
from nodesync_sim.real.node import RealNode
from tests.realcluster.helpers import (
    DONE_WITHOUT_CLEANUP,
    audited_effects,
    broken_node,
    done_steps,
    follow_rollback,
    namespace,
    node_rollback_events,
    running_pods,
    steps,
    value,
    wait_firing,
)
from tests.support.realcluster import RealChain
from tests.support.wait import until

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(480)]

LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
ALERT = "NodesyncNewNodeCRIDown"
#: kubelet's NotReady comes once its runtime request (2 min) timed out, after the fault.
KUBELET_VERDICT_TIMEOUT = 180.0
#: kubelet renews its Lease every 10 s (a quarter of its 40 s duration); the slack is a busy
#: machine's.
LEASE_RENEW_INTERVAL = 10.0
LEASE_RENEW_SLACK = 5.0


def test_a_frozen_containerd_is_rolled_back_while_kubelet_still_says_ready(
    realchain: RealChain,
) -> None:
    with broken_node(realchain) as (node, mark):
        _frozen_runtime(realchain, node, mark)


def _ready(realchain: RealChain, name: str) -> str | None:
    found = realchain.cluster.node_object(name)
    return None if found is None else str(condition(found, "Ready").get("status"))


def _became_not_ready(node: RealNode, after: float) -> float | None:
    """When kubelet logged "Node became not ready" (klog: ``I1205 05:38:07.151039 ...``)."""
    assert node.kubelet is not None
    day = datetime.fromtimestamp(after, UTC).date()
    for line in node.kubelet.log_path.read_text(errors="replace").splitlines():
        if "Node became not ready" in line and "container runtime is down" in line:
            clock = datetime.strptime(line.split()[1], "%H:%M:%S.%f").time()
            return datetime.combine(day, clock, UTC).timestamp()
    return None


def _frozen_runtime(realchain: RealChain, node: RealNode, mark: int) -> None:
    api = realchain.api
    name = node.name
    sel = f'node="{name}"'
    with namespace(api) as ns:
        pods = running_pods(api, ns, node)

        fault = time.time()
        node.containerd.freeze()

        until(
            lambda: value(realchain, f"nodesync_cri_up{{{sel}}}") == 0, timeout=60, what="cri_up 0"
        )
        cri_down_at = time.time()
        alert_at = wait_firing(realchain, ALERT, sel)
        at_first_step: list[tuple[str | None, float | None]] = []

        def first_step() -> None:
            lease = api.ok("GET", f"{LEASES}/{name}")
            at_first_step.append((_ready(realchain, name), parse_time(lease["spec"]["renewTime"])))

        rollback, first_step_at, done_at = follow_rollback(api, name, 120, first_step)
        # nodesync acted while the control plane still had the node Ready: kubelet renews the
        # Lease on its schedule, and has not said anything about its runtime yet. (The first
        # step may come before the first renewal after the fault: nodesync is that quick.)
        [(ready, renewed)] = at_first_step
        assert ready == "True"
        assert renewed is not None
        assert first_step_at - renewed < LEASE_RENEW_INTERVAL + LEASE_RENEW_SLACK, (
            f"the Lease, renewed {first_step_at - renewed:.1f} s before the first step, is late"
        )
        # ... and keeps renewing it while containerd stays frozen (the Node is deleted by then:
        # kubelet re-creates its Lease, without an owner).
        until(
            lambda: (
                (a := api.request("GET", f"{LEASES}/{name}")).status == 200
                and (parse_time(a.body["spec"]["renewTime"]) or 0.0) > fault
            ),
            timeout=LEASE_RENEW_INTERVAL + 2 * LEASE_RENEW_SLACK,
            what="the Lease renewed while containerd is frozen",
        )
        status = rollback["status"]
        assert status["phase"] == "Succeeded", status
        done = steps(rollback)
        assert done_steps(rollback) == DONE_WITHOUT_CLEANUP, done
        assert done["cleanup_runtime"]["state"] == "skipped", done
        assert done["cleanup_runtime"]["reason"] == "runtime_unavailable", done
        api.wait_gone(f"/api/v1/nodes/{name}", timeout=60)

        # kubelet's own verdict, from the same node: once its runtime request timed out it
        # sets Ready False ("container runtime is down"). The Node is gone by then, so that
        # status is refused, and its NodeNotReady Event is dropped by kubelet's own spam filter
        # (the kernel log's SystemOOM Events of the machine used its burst): its log says when.
        not_ready_at = until(
            lambda: _became_not_ready(node, fault),
            timeout=KUBELET_VERDICT_TIMEOUT,
            what="kubelet's NotReady",
        )
        print(
            f"frozen containerd {name}: cri_up 0 +{cri_down_at - fault:.0f} s, {ALERT} firing "
            f"+{alert_at - fault:.0f} s, first step +{first_step_at - fault:.0f} s, rollback "
            f"Succeeded +{done_at - fault:.0f} s, kubelet NodeNotReady "
            f"+{not_ready_at - fault:.0f} s: nodesync's lead {not_ready_at - first_step_at:.0f} s"
        )

        # Every effect exactly once, nothing refused; each step's Event once on the Node.
        _, effects = audited_effects(api, mark, name)
        assert effects[("delete", "nodes", None)] == 1, effects
        assert effects[("create", "pods", "eviction")] == 2, effects
        node_rollback_events(realchain, name)

        # containerd resumed: the kubelet, which still runs, stops the evicted pods and
        # confirms their deletion.
        node.containerd.thaw()
        for p in pods:
            api.wait_gone(f"/api/v1/namespaces/{ns}/pods/{p['metadata']['name']}", timeout=90)
