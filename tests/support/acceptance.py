"""The names, flags and timings the acceptance tests' controllers and scenes share
(tests/support/controllers.py)."""

from __future__ import annotations

import secrets

from tests.support.kubeapi import REPO_ROOT

RBAC_FILES = (
    REPO_ROOT / "deploy" / "base" / "controller-rbac.yaml",
    REPO_ROOT / "deploy" / "components" / "delete-nodes" / "rbac.yaml",
)
LEADER_ELECTION_RBAC = REPO_ROOT / "deploy" / "overlays" / "ha" / "leader-election-rbac.yaml"
LEADER_LEASE = "nodesync-controller"  # the only name the shipped Role lets the controller write
NODE_LEASES = "kube-node-lease"
NODEROLLBACKS = "/apis/nodesync.io/v1alpha1/noderollbacks"
CASE_LABEL = "nodesync.test/case"
WAVE_LABEL = "nodesync.test/wave"
CLEANUP_REQUEST = "nodesync.io/cleanup-request"
CLEANUP_STATUS = "nodesync.io/cleanup-status"
ROLLBACK_TAINT = "nodesync.io/rollback"

#: How long a controller may take to start and list the cluster (both cores may be busy).
START_TIMEOUT = 60.0
#: The default deadline of :meth:`Scene.until`: generous, as nothing here is timing-based.
DEADLINE = 60.0
POLL = 0.05
#: What tests/support/warm_start.py prints once its imports are done (not imported from there:
#: importing it is what makes a process warm).
WARM = "warm: waiting for SIGUSR1"
WEBHOOK_TOKEN = "acceptance-" + secrets.token_hex(8)

#: Leader election short enough for a test, long enough for two busy cores.
LEADER_ELECTION = (
    "--leader-election.enabled=true",
    "--leader-election.lease-duration=3s",
    "--leader-election.renew-deadline=2s",
    "--leader-election.retry-period=0.5s",
)

#: Flags of every controller here: node rollbacks end with the deletion, the budget lets each
#: test's nodes be rolled back, and API writes are not throttled to a crawl.
ROLLBACK_ARGS = (
    "--rollback.delete-nodes=true",
    "--guard.max-rollback-fraction=1",
    "--apiserver.qps=100",
    "--apiserver.burst=100",
)
#: The Events of a node rollback that ran every step, each once.
NODE_ROLLBACK_EVENTS = (
    "NodesyncRollback",
    "NodesyncCordon",
    "NodesyncTaint",
    "NodesyncDrain",
    "NodesyncCleanupRuntime",
    "NodesyncVerify",
    "NodesyncDeleteNode",
)
