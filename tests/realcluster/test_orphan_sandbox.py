"""A sandbox the node's containerd holds and its kubelet does not know (made over the node's CRI
socket, as another CRI client or a lost pod would leave it), on a node whose kubelet runs.

kubelet 1.20 stops it (its housekeeping kills running pods it does not want) but keeps the
stopped sandbox (not removed within 150 s in a run that watched). The agent reports it as
orphan drift, the shipped rule fires and nodesync asks the node's agent for a
cleanup: the agent removes the sandbox, verify finds the runtime clean, and the node stays in
service.

It runs on each containerd release a node of kubelet 1.20 can use (1.6 and 1.7): what is tested
is the runtime's own state (a sandbox made over CRI v1 beside kubelet's v1alpha2, what kubelet's
housekeeping leaves of it, the agent's removal and verify reading the runtime), which is what a
release changes. The silent kubelet and the frozen containerd are about kubelet and the
controller-manager; they stay on the machine's release."""

from __future__ import annotations

import asyncio
import time
import uuid

import grpc
import pytest

from exporter.cri.pb import api_pb2, api_pb2_grpc
from nodesync_sim.real.node import RealNode
from nodesync_sim.real.runtime_pods import run_pod
from tests.realcluster.helpers import (
    CLEANED_UP,
    audit_mark,
    audited_effects,
    follow_rollback,
    in_service,
    nodesync_on_node,
    steps,
    value,
    wait_firing,
)
from tests.support.containerd import Release
from tests.support.realcluster import RealChain
from tests.support.wait import until

pytestmark = [
    pytest.mark.realcluster,
    pytest.mark.node_containerd_releases,
    pytest.mark.timeout(300),
]

ALERT = "NodesyncNewNodeDrift"


def _sandbox_state(endpoint: str, sandbox_id: str) -> str:
    """READY, NOTREADY, or gone."""
    with grpc.insecure_channel(endpoint) as channel:
        stub = api_pb2_grpc.RuntimeServiceStub(channel)
        items = stub.ListPodSandbox(api_pb2.ListPodSandboxRequest(), timeout=5.0).items
    for item in items:
        if item.id == sandbox_id:
            return "READY" if item.state == api_pb2.SANDBOX_READY else "NOTREADY"
    return "gone"


def test_an_orphan_sandbox_is_cleaned_up_by_the_agent_and_the_node_stays(
    realchain: RealChain, containerd_release: Release
) -> None:
    # its own node: no drift of an earlier test's pods
    node = realchain.join(containerd_bin_dir=containerd_release.bin_dir)
    try:
        _orphan(realchain, node)
    finally:
        realchain.leave(node)


def _orphan(realchain: RealChain, node: RealNode) -> None:
    api = realchain.api
    name = node.name
    sel = f'node="{name}"'
    mark = audit_mark(api)
    start = time.time()
    # A sandbox alone: kubelet's housekeeping may stop it (killing its pause process) any
    # moment after it runs, and a container created in it after that fails to join its
    # namespaces (seen with both cores busy: "lstat /proc/<pid>/ns/ipc: no such file").
    orphan = asyncio.run(
        run_pod(
            node.cri_endpoint,
            "orphan",
            "default",
            str(uuid.uuid4()),
            [],
            cgroup_root=node.cgroup_root,
        )
    )
    until(
        lambda: value(realchain, f'nodesync_drift_pods{{{sel},kind="orphan_sandbox"}}') == 1,
        timeout=60,
        what="the agent to report the orphan sandbox",
    )
    drift_at = time.time()
    alert_at = wait_firing(realchain, ALERT, sel)
    # kubelet's housekeeping stops a running pod it does not want, but its garbage collection
    # has not removed the sandbox: the runtime still holds it.
    held = _sandbox_state(node.cri_endpoint, orphan.sandbox_id)
    assert held != "gone"
    rollback, first_step_at, done_at = follow_rollback(api, name, 120, action="cleanup_orphans")
    print(
        f"orphan sandbox on {name}: drift +{drift_at - start:.0f} s, {ALERT} firing "
        f"+{alert_at - start:.0f} s (sandbox {held}), first step "
        f"+{first_step_at - start:.0f} s, rollback {rollback['status']['phase']} "
        f"+{done_at - start:.0f} s"
    )
    assert rollback["spec"]["action"] == "cleanup_orphans", rollback["spec"]
    assert rollback["status"]["phase"] == "Succeeded", rollback["status"]
    done = steps(rollback)
    assert {s: st["state"] for s, st in done.items()} == dict.fromkeys(done, "done"), done
    assert "cleanup_runtime" in done
    assert _sandbox_state(node.cri_endpoint, orphan.sandbox_id) == "gone"
    until(
        lambda: value(realchain, f"sum(nodesync_drift_pods{{{sel}}})") == 0,
        timeout=30,
        what="the agent to see no drift",
    )

    # One cleanup request, nothing refused, the node left in service.
    _, effects = audited_effects(api, mark, name)
    assert effects == {("patch", "nodes", None): 1}, effects  # the cleanup request
    in_service(api, name)
    assert nodesync_on_node(realchain, name) == CLEANED_UP
