"""Issue 12's failover acceptance on the real kube-apiserver: two ``nodesync controller``
processes with their own journals and leader election; the leader is SIGKILLed right after its
cordon, the other one finishes the rollback from the NodeRollback. The API server's audit log
counts every effect: each was made exactly once. The NodeRollback's status and the Events tell
the whole story.

The kill is exact, not timed: the first controller talks to the API server through a test proxy
that forwards its cordon and holds everything it sends after it (tests/support/kubeproxy.py).
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.support.acceptance import DEADLINE, NODE_ROLLBACK_EVENTS, ROLLBACK_ARGS
from tests.support.rollback_requests import alert, cordon_of, payload, rollback_created, steps
from tests.support.scene import Scene
from tests.support.wait import until

pytestmark = [pytest.mark.kubeapi, pytest.mark.timeout(180)]


def test_a_leader_killed_after_the_cordon_the_other_controller_finishes_the_rollback(
    scene: Scene,
) -> None:
    node = scene.add_node("1")
    node_uid = scene.node(node)["metadata"]["uid"]
    pods = [f"{node}-a", f"{node}-b"]
    for pod in pods:
        scene.add_pod(pod, node)
    proxy = scene.proxy("first")
    proxy.trap(cordon_of(node))
    second = scene.controller("second", *ROLLBACK_ARGS, start=False)  # its imports meanwhile
    first = scene.controller("first", *ROLLBACK_ARGS, proxy=proxy)
    scene.until(lambda: scene.leader() == first.identity, "the first controller to lead")
    second.start()
    assert second.post_alerts(payload(alert(node))) == 503  # a follower sends Alertmanager on

    assert scene.deliver([second, first], alert(node)) is first
    until(proxy.sprung.is_set, timeout=DEADLINE, what="the first controller to cordon the node")
    first.kill()  # right after the cordon: its record of the cordon never reached the server
    [started] = scene.rollbacks()
    assert steps(started)["cordon"]["state"] == "running"  # the intent, and no outcome
    assert scene.node(node)["spec"]["unschedulable"] is True

    # Alertmanager sends the group again at its next interval; the new leader takes it.
    assert scene.deliver([first, second], alert(node)) is second
    scene.until(
        lambda: scene.phases() == ["Succeeded"],
        "the second controller to finish the rollback",
    )

    [rollback] = scene.rollbacks()  # the re-sent alert joined it, nothing new was decided
    status = rollback["status"]
    assert [(s["name"], s["state"]) for s in status["steps"]] == [
        ("cordon", "done"),
        ("taint", "done"),
        ("drain", "done"),
        ("cleanup_runtime", "done"),
        ("verify", "done"),
        ("delete_node", "done"),
    ]
    assert all(s["startedAt"] and s["finishedAt"] for s in status["steps"])
    # The cordon was the first leader's: its intent says the node was not cordoned before.
    assert steps(rollback)["cordon"]["madeChange"] is True
    assert steps(rollback)["cordon"]["observed"] == {"before": "absent"}
    assert "before a restart" in steps(rollback)["cordon"]["message"]
    assert steps(rollback)["cordon"]["attempts"] == 1  # resumed, not started again
    assert "evicted 2 pods" in steps(rollback)["drain"]["message"]
    assert steps(rollback)["taint"]["madeChange"] is True
    assert steps(rollback)["cleanup_runtime"]["request"] == rollback["metadata"]["uid"]
    assert scene.answered == [(node, rollback["metadata"]["uid"])]
    assert len(status["triggers"]) == 1
    assert rollback["spec"]["decision"]["decidedBy"] == first.identity
    assert rollback["spec"]["nodeUID"] == node_uid
    assert scene.get_node(node) is None

    # Each effect exactly once, as the API server's audit log counts them.
    scene.wait_audited("delete_node", node)
    assert scene.effects() == Counter(
        {
            ("cordon", node): 1,
            ("taint", node): 1,
            ("eviction", pods[0]): 1,
            ("eviction", pods[1]): 1,
            ("cleanup_request", node): 1,
            ("delete_node", node): 1,
        }
    )
    scene.check_the_record_came_first()
    # One Event per step, each about this node (its uid, so kubectl describe shows it).
    scene.until(
        lambda: scene.event_reasons(node) == Counter(NODE_ROLLBACK_EVENTS),
        "one Event per step of the rollback",
    )
    assert {e["involvedObject"]["uid"] for e in scene.events(node)} == {node_uid}
    assert all(rollback["metadata"]["name"] in e["message"] for e in scene.events(node))


def test_the_blast_radius_holds_across_a_failover(scene: Scene) -> None:
    """--guard.max-rollbacks=2, five failing nodes of one wave in one notification. The first leader
    dies right after creating its first NodeRollback; the second gets every alert again and
    counts that NodeRollback in the budget: two in total, three refused."""
    nodes = [scene.add_node(str(i)) for i in range(5)]
    args = (*ROLLBACK_ARGS, "--guard.max-rollbacks=2")
    proxy = scene.proxy("first")
    proxy.trap(rollback_created())
    second = scene.controller("second", *args, start=False)
    first = scene.controller("first", *args, proxy=proxy)
    scene.until(lambda: scene.leader() == first.identity, "the first controller to lead")
    second.start()
    alerts = [alert(n) for n in nodes]

    assert scene.deliver([first, second], *alerts) is first
    until(
        proxy.sprung.is_set, timeout=DEADLINE, what="the first controller to create a NodeRollback"
    )
    first.kill()
    [decided] = scene.rollbacks()  # created; its first status never written
    # The second controller's watch holds it (a follower watches too) before it may lead.
    scene.until(
        lambda: (second.metric("nodesync_rollbacks", phase="Pending") or 0) >= 1,
        "the second controller to see the NodeRollback",
    )

    assert scene.deliver([first, second], *alerts) is second

    def refused(node: str) -> bool:
        return any(
            e["reason"] == "NodesyncRefused" and "blast_radius_absolute" in e["message"]
            for e in scene.events(node)
        )

    scene.until(
        lambda: len(scene.rollbacks()) == 2 and sum(map(refused, nodes)) == 3,
        "the second leader to decide every alert",
    )
    rollbacks = scene.rollbacks()
    assert rollbacks[0]["metadata"]["uid"] == decided["metadata"]["uid"]
    rolled = {r["spec"]["nodeName"] for r in rollbacks}
    assert {n for n in nodes if refused(n)} == set(nodes) - rolled
    assert rollbacks[1]["spec"]["decision"]["blastRadius"]["absoluteUsed"] == 1
    # The one the first leader decided is driven by the second, the budget is spent.
    scene.until(
        lambda: scene.phases() == ["Succeeded", "Succeeded"],
        "both rollbacks to finish",
    )
    assert len(scene.rollbacks()) == 2
    # Each decision has its Event, also the one whose decider died right after creating it.
    for node in rolled:
        assert scene.event_reasons(node)["NodesyncRollback"] == 1, node
