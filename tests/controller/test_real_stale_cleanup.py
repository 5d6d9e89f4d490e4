"""Issue 12's stale-answer acceptance on the real kube-apiserver: a ``nodesync.io/cleanup-status``
an earlier rollback left on a node is never taken as the answer to a new one. With no agent
answering and the node reachable (its Lease fresh), the new rollback fails on cleanup
(``cleanup_timeout``) and the node is not deleted, though ``--delete-nodes`` is on.
"""

from __future__ import annotations

import json
import uuid

import pytest

from tests.support.controllers import (
    CLEANUP_REQUEST,
    CLEANUP_STATUS,
    ROLLBACK_ARGS,
    Scene,
    alert,
    steps,
)

pytestmark = [pytest.mark.kubeapi, pytest.mark.timeout(120)]

#: The id issue 12 saw collide (journals numbered their plans from 1), and an earlier
#: NodeRollback's uid.
STALE_IDS = ["nodesync-plan-1", str(uuid.uuid4())]


@pytest.mark.parametrize("stale_id", STALE_IDS, ids=["plan-number", "earlier-uid"])
def test_a_cleanup_answer_left_by_an_earlier_rollback_never_answers_a_new_one(
    scene: Scene, stale_id: str
) -> None:
    stale = json.dumps(
        {
            "id": stale_id,
            "state": "done",
            "removedSandboxes": 1,
            "removedContainers": 1,
            "skipped": 0,
            "finishedAt": "2026-01-01T00:00:00Z",
            "error": "",
        }
    )
    node = scene.add_node("1", annotations={CLEANUP_REQUEST: stale_id, CLEANUP_STATUS: stale})
    scene.agent_answers = False  # no agent answers; the node's Lease is fresh: it is reachable
    only = scene.controller("only", *ROLLBACK_ARGS, "--cleanup-timeout=3s", leader_elect=False)
    scene.deliver([only], alert(node))
    scene.until(
        lambda: scene.phases() == ["Failed"],
        "the rollback to fail on its cleanup",
    )

    [rollback] = scene.rollbacks()
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
    assert steps(rollback)["cleanup_runtime"]["request"] == uid != stale_id
    assert status["actionRequired"]
    kept = scene.get_node(node)
    assert kept is not None  # not deleted
    assert kept["spec"]["unschedulable"] is True  # left cordoned, for a person
    annotations = kept["metadata"]["annotations"]
    assert annotations[CLEANUP_REQUEST] == uid  # the new request, never answered
    assert annotations[CLEANUP_STATUS] == stale
    effects = scene.effects()
    assert effects[("delete_node", node)] == 0
    assert effects[("cleanup_request", node)] == 1
    scene.until(
        lambda: (
            {"NodesyncCleanupRuntimeFailed", "NodesyncActionRequired"}
            <= set(scene.event_reasons(node))
        ),
        "the failure's Events",
    )
    assert "NodesyncDeleteNode" not in scene.event_reasons(node)
