"""A kubelet goes silent (SIGSTOP) while its containerd and the agent live on: the
controller-manager marks the node Unknown and taints it, the shipped rule fires, nodesync
rolls the node back, and the containers of the evicted pods (which no kubelet will stop) are
removed from the node's containerd before the rollback is Succeeded. The kubelet, resumed and
restarted, registers a new Node that is judged afresh.

The same with the node's agent dead too (stopped by its PID): nobody takes the cleanup request
up, so once ``--cleanup.ack-timeout`` (the shipped 1 minute) has passed on the unreachable node
(no fresh Lease) the cleanup is skipped (``agent_unreachable``, as designed: the node is going
away, its runtime with it), the Node is deleted, and the NodeRollback, the Events and the
controller's metrics say so. The evicted pods' containers keep running: no kubelet stops them
and no agent removes them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from exporter.model.rfc3339 import parse_time
from exporter.model.rollback import CLEANUP_REQUEST_ANNOTATION, CLEANUP_STATUS_ANNOTATION
from nodesync_sim.real.cluster import condition
from nodesync_sim.real.kube_apiserver import AGENT, LocalKubeAPIServer
from nodesync_sim.real.node import RealNode
from tests.realcluster.helpers import (
    DONE_WITHOUT_CLEANUP,
    audited_effects,
    broken_node,
    containers_of,
    done_steps,
    follow_rollback,
    namespace,
    node_rollback_events,
    rollbacks_of,
    running_pods,
    steps,
    value,
    wait_firing,
)
from tests.support.realcluster import RealChain
from tests.support.wait import until

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(480)]

UNREACHABLE = "node.kubernetes.io/unreachable"
#: The runtime cleanup's Event when the agent removed what was left.
CLEANED_UP_RUNTIME = "NodesyncCleanupRuntime"


def test_a_silent_kubelet_is_rolled_back_and_its_pods_containers_removed(
    realchain: RealChain,
) -> None:
    with broken_node(realchain) as (node, mark), _two_pods(realchain, node) as uids:
        _silent_kubelet(realchain, node, mark, uids)


@contextmanager
def _two_pods(realchain: RealChain, node: RealNode) -> Iterator[set[str]]:
    """Two pods Running on ``node`` (their containers there), in a namespace of their own;
    their uids."""
    api = realchain.api
    with namespace(api) as ns:
        uids = {p["metadata"]["uid"] for p in running_pods(api, ns, node)}
        assert len(containers_of(node.cri_endpoint, uids)) == 2
        yield uids


def _silent_kubelet(realchain: RealChain, node: RealNode, mark: int, uids: set[str]) -> None:
    api = realchain.api
    name = node.name
    first_uid = api.ok("GET", f"/api/v1/nodes/{name}")["metadata"]["uid"]

    fault = time.time()
    node.freeze_kubelet()
    _until_alert(realchain, name, fault, "silent kubelet")

    rollback, first_step_at, done_at = follow_rollback(api, name, 180)
    print(
        f"first step +{first_step_at - fault:.0f} s, rollback "
        f"{rollback['status']['phase']} +{done_at - fault:.0f} s"
    )
    assert rollback["status"]["phase"] == "Succeeded", rollback["status"]
    # The correct outcome: nothing of the evicted pods runs on the node when it ends.
    assert containers_of(node.cri_endpoint, uids) == [], "containers left"
    api.wait_gone(f"/api/v1/nodes/{name}", timeout=60)

    # Every effect exactly once, nothing refused; on the Node, as kubectl lists its Events, the
    # decision and each step's Event once, the cleanup's as done, and no other of nodesync.
    _, effects = audited_effects(api, mark, name)
    assert effects[("delete", "nodes", None)] == 1, effects
    assert effects[("create", "pods", "eviction")] == 2, effects
    node_rollback_events(realchain, name, cleanup=CLEANED_UP_RUNTIME)

    # The kubelet, resumed and restarted, registers a new Node.
    node.restart_kubelet()
    again = realchain.cluster.wait_ready(name, timeout=120)
    assert again["metadata"]["uid"] != first_uid


def _until_alert(realchain: RealChain, name: str, fault: float, what: str) -> None:
    """Waits for the controller-manager's verdict (Ready Unknown, the unreachable taint) and
    the shipped rule firing; prints when each came after the fault."""

    def unknown() -> bool:
        found = realchain.cluster.node_object(name) or {}
        return condition(found, "Ready").get("status") == "Unknown"

    until(unknown, timeout=120, what="the controller-manager to mark the node Unknown")
    unknown_at = time.time()
    until(
        lambda: any(
            t["key"] == UNREACHABLE
            for t in (realchain.cluster.node_object(name) or {}).get("spec", {}).get("taints", ())
        ),
        timeout=60,
        what="the unreachable taint",
    )
    tainted_at = time.time()
    alert_at = wait_firing(realchain, "NodesyncNewNodeNotReady", f'node="{name}"')
    print(
        f"{what} {name}: Unknown +{unknown_at - fault:.0f} s, unreachable taint "
        f"+{tainted_at - fault:.0f} s, alert +{alert_at - fault:.0f} s"
    )


#: The controller's count of runtime cleanups it skipped (docs/metrics.md).
SKIPPED_CLEANUPS = (
    'sum(nodesync_actions_total{job="nodesync-controller",action="cleanup_runtime",'
    'result="skipped"})'
)
#: The controller's NodeRollbacks waiting for an agent to take a cleanup up.
WAITING_FOR_AGENT = (
    'sum(nodesync_rollbacks_by_reason{job="nodesync-controller",phase="Waiting",'
    'reason="waiting_for_agent"})'
)
#: The shipped --cleanup.ack-timeout (the chain's controller leaves it as shipped).
ACK_TIMEOUT = 60.0


def test_a_silent_kubelet_with_its_agent_dead_is_rolled_back_without_the_cleanup(
    realchain: RealChain,
) -> None:
    with broken_node(realchain) as (node, mark), _two_pods(realchain, node) as uids:
        _agent_dead_too(realchain, node, mark, uids)


def _agent_dead_too(realchain: RealChain, node: RealNode, mark: int, uids: set[str]) -> None:
    api = realchain.api
    name = node.name
    skipped_before = value(realchain, SKIPPED_CLEANUPS) or 0.0

    fault = time.time()
    agent = realchain.agents[name].process
    agent.kill()  # by its PID (SIGKILL): it answers nothing from now on
    assert not agent.running
    node.freeze_kubelet()
    _until_alert(realchain, name, fault, "silent kubelet, agent dead")

    # The cleanup asks, and nobody answers: the rollback waits for the agent.
    waiting = until(
        lambda: _waiting_for_agent(api, name),
        timeout=120,
        interval=0.5,
        what="the rollback to wait for the agent to take up its cleanup",
    )
    waiting_at = time.time()
    annotations = (realchain.cluster.node_object(name) or {})["metadata"]["annotations"]
    assert annotations.get(CLEANUP_REQUEST_ANNOTATION) == waiting["metadata"]["uid"]
    assert CLEANUP_STATUS_ANNOTATION not in annotations, annotations
    until(
        lambda: (value(realchain, WAITING_FOR_AGENT) or 0) >= 1,
        timeout=30,
        interval=0.5,
        what="nodesync_rollbacks_by_reason to count the wait",
    )

    rollback, _, done_at = follow_rollback(api, name, 240)
    assert rollback["metadata"]["uid"] == waiting["metadata"]["uid"]
    status = rollback["status"]
    done = steps(rollback)
    cleanup = done["cleanup_runtime"]
    requested, gave_up = _at(cleanup, "startedAt"), _at(cleanup, "finishedAt")
    print(
        f"cordon +{_at(done['cordon'], 'startedAt') - fault:.0f} s, cleanup requested "
        f"+{requested - fault:.0f} s (seen waiting +{waiting_at - fault:.0f} s), skipped "
        f"+{gave_up - fault:.0f} s, Node deleted "
        f"+{_at(done['delete_node'], 'finishedAt') - fault:.0f} s, rollback "
        f"{status['phase']} (seen +{done_at - fault:.0f} s)"
    )
    assert status["phase"] == "Succeeded", status
    assert done_steps(rollback) == DONE_WITHOUT_CLEANUP, done
    # The status says the cleanup was skipped, why, and after how long.
    assert cleanup["state"] == "skipped", cleanup
    assert cleanup["reason"] == "agent_unreachable", cleanup
    assert "is unreachable (no fresh Lease)" in cleanup["message"], cleanup
    request = rollback["metadata"]["uid"]
    assert f"did not take up cleanup {request} within 60 s" in cleanup["message"], cleanup
    assert gave_up - requested >= ACK_TIMEOUT, cleanup
    assert "not cleaned up (agent_unreachable)" in done["verify"]["message"], done["verify"]
    assert "actionRequired" not in status, status  # the Node is deleted: nothing left
    api.wait_gone(f"/api/v1/nodes/{name}", timeout=60)
    until(
        lambda: value(realchain, SKIPPED_CLEANUPS) == skipped_before + 1,
        timeout=30,
        interval=0.5,
        what="nodesync_actions_total to count the skipped cleanup",
    )

    # Nobody removed the evicted pods' containers: the kubelet that would stop them is
    # silent and the agent that would remove them is dead. They go with the machine.
    assert len(containers_of(node.cri_endpoint, uids)) == 2

    # Every effect exactly once, nothing refused, no write by the dead agent; each step's
    # Event once on the Node, the cleanup's as skipped.
    events, effects = audited_effects(api, mark, name)
    agent_user = api.identities[AGENT].user
    assert [e["requestURI"] for e in events if e["user"]["username"] == agent_user
            and e["verb"] not in ("get", "list", "watch")] == []  # fmt: skip
    # cordon, taint, the cleanup request; each pod's eviction; the Node's deletion.
    assert effects == {
        ("patch", "nodes", None): 3,
        ("create", "pods", "eviction"): 2,
        ("delete", "nodes", None): 1,
    }, effects
    about_node = node_rollback_events(realchain, name)
    reasons = [e["reason"] for e in about_node]
    assert "NodesyncActionRequired" not in reasons, reasons
    [skipped] = [e for e in about_node if e["reason"] == "NodesyncCleanupRuntimeSkipped"]
    assert "did not take up cleanup" in skipped["message"], skipped


def _waiting_for_agent(api: LocalKubeAPIServer, name: str) -> dict[str, Any] | None:
    """The node's NodeRollback while it waits at its cleanup for the agent to take it up."""
    for rollback in rollbacks_of(api, name):
        status = rollback.get("status", {})
        cleanup = steps(rollback).get("cleanup_runtime", {})
        if status.get("phase") == "Waiting" and cleanup.get("reason") == "waiting_for_agent":
            assert "waiting for the agent to take up" in cleanup["message"], cleanup
            return rollback
    return None


def _at(step: dict[str, Any], key: str) -> float:
    when = parse_time(step[key])
    assert when is not None, step
    return when
