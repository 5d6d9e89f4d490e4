"""Issue 12's stale-answer acceptance on the real kube-apiserver: a ``nodesync.io/cleanup-status``
an earlier rollback left on a node is never taken as the answer to a new one. With no agent
answering and the node reachable (its Lease fresh), the new rollback fails on cleanup
(``cleanup_timeout``) and the node is not deleted, though ``--rollback.delete-nodes`` is on.
"""

from __future__ import annotations

import json
import uuid

import pytest

from tests.support.acceptance import CLEANUP_REQUEST, CLEANUP_STATUS, ROLLBACK_ARGS
from tests.support.rollback_requests import alert, steps
from tests.support.scene import Scene

pytestmark = [pytest.mark.kubeapi, pytest.mark.timeout(120)]


def answer(request: str) -> str:
    """An agent's answer ``done`` to ``request``, as an earlier rollback left it."""
    return json.dumps(
        {
            "id": request,
            "state": "done",
            "removedSandboxes": 1,
            "removedContainers": 1,
            "skipped": 0,
            "finishedAt": "2026-01-01T00:00:00Z",
            "error": "",
        }
    )


def test_a_cleanup_answer_left_by_an_earlier_rollback_never_answers_a_new_one(
    scene: Scene,
) -> None:
    # Two nodes with an earlier rollback's request and its answer: the id issue 12 saw collide
    # (each journal numbered its plans from 1), and an earlier NodeRollback's uid.
    stale = {
        scene.add_node(suffix, annotations={CLEANUP_REQUEST: old, CLEANUP_STATUS: answer(old)}): old
        for suffix, old in (("plan-1", "nodesync-plan-1"), ("uid", str(uuid.uuid4())))
    }
    scene.agent_answers = False  # no agent answers; the nodes' Leases are fresh: reachable
    only = scene.controller("only", *ROLLBACK_ARGS, "--cleanup.timeout=3s", leader_elect=False)
    scene.deliver([only], *(alert(node) for node in stale))
    scene.until(
        lambda: scene.phases() == ["Failed", "Failed"], "both rollbacks to fail on their cleanup"
    )

    for node, old in stale.items():
        [rollback] = [r for r in scene.rollbacks() if r["spec"]["nodeName"] == node]
        status = rollback["status"]
        uid = rollback["metadata"]["uid"]
        assert status["reason"] == "cleanup_timeout"
        assert [(s["name"], s["state"]) for s in status["steps"]] == [
            ("cordon", "done"),
            ("taint", "done"),
            ("drain", "done"),
            ("cleanup_runtime", "failed"),
            ("verify", "skipped"),
            ("delete_node", "skipped"),
        ]
        assert steps(rollback)["cleanup_runtime"]["reason"] == "cleanup_timeout"
        assert steps(rollback)["cleanup_runtime"]["request"] == uid != old
        assert status["actionRequired"]
        kept = scene.node(node)  # not deleted
        assert kept["spec"]["unschedulable"] is True  # left cordoned, for a person
        annotations = kept["metadata"]["annotations"]
        assert annotations[CLEANUP_REQUEST] == uid  # the new request, never answered
        assert annotations[CLEANUP_STATUS] == answer(old)
        effects = scene.effects()
        assert effects[("delete_node", node)] == 0
        assert effects[("cleanup_request", node)] == 1
        assert "NodesyncDeleteNode" not in scene.event_reasons(node)

    def failures_recorded() -> bool:
        wanted = {"NodesyncCleanupRuntimeFailed", "NodesyncActionRequired"}
        return all(wanted <= set(scene.event_reasons(node)) for node in stale)

    scene.until(failures_recorded, "the Events of both failures")
