"""Issue 12's crash acceptance on the real kube-apiserver: a controller SIGKILLed between an
effect and its record, at every kind of step, leaves a record that matches the cluster once it
restarts, and the effect is not repeated.

Deterministic, not timed: the controller talks to the API server through a test proxy that lets
the step's effect through (the cordon patch, the taint patch, an eviction, the cleanup request,
the node's deletion; for verify, which changes nothing, the write of its intent) and holds every
request after it, so neither its outcome nor its Event reaches the server; then the test kills
it. The same controller restarts (its journal, no leader election) and finishes the rollback.
The API server's audit log counts the effects.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from tests.support.acceptance import NODE_ROLLBACK_EVENTS, ROLLBACK_ARGS
from tests.support.kubeproxy import Predicate
from tests.support.rollback_requests import (
    alert,
    cleanup_request_on,
    cordon_of,
    delete_of,
    eviction_in,
    step_recorded,
    steps,
    taint_of,
    uncordon_of,
)
from tests.support.scene import Scene

pytestmark = [pytest.mark.kubeapi, pytest.mark.timeout(120)]

NODE_STEPS = ("cordon", "taint", "drain", "cleanup_runtime", "verify", "delete_node")


@dataclass(frozen=True)
class Crash:
    """Where the first controller dies: the request it makes last, for a node and a namespace."""

    step: str
    trap: Callable[[str, str], Predicate]


CRASHES = [
    Crash("cordon", lambda node, ns: cordon_of(node)),
    Crash("taint", lambda node, ns: taint_of(node)),
    Crash("drain", lambda node, ns: eviction_in(ns)),
    Crash("evict_pod", lambda node, ns: eviction_in(ns)),
    Crash("cleanup_runtime", lambda node, ns: cleanup_request_on(node)),
    Crash("verify", lambda node, ns: step_recorded("verify", "running")),
    Crash("delete_node", lambda node, ns: delete_of(node)),
]


@pytest.mark.parametrize("crash", CRASHES, ids=[c.step for c in CRASHES])
def test_killed_between_an_effect_and_its_record_the_restart_records_the_truth(
    scene: Scene, crash: Crash
) -> None:
    node = scene.add_node("1")
    node_uid = scene.node(node)["metadata"]["uid"]
    pods = [f"{node}-a", f"{node}-b"]
    for pod in pods:
        scene.add_pod(pod, node)
    evict_one = crash.step == "evict_pod"
    sent = (
        alert(node, "evict_pod", namespace=scene.namespace, pod=pods[0])
        if evict_one
        else alert(node)
    )
    proxy = scene.proxy("first")
    proxy.trap(crash.trap(node, scene.namespace))
    first = scene.controller("first", *ROLLBACK_ARGS, proxy=proxy, leader_elect=False)
    # The same replica once it comes back (its journal); its interpreter starts now.
    again = scene.controller(
        "again", *ROLLBACK_ARGS, leader_elect=False, journal=first.journal, start=False
    )
    scene.deliver([first], sent)
    scene.until(proxy.sprung.is_set, f"the controller's {crash.step} effect")
    first.kill()

    [crashed] = scene.rollbacks()
    assert steps(crashed)[crash.step]["state"] == "running"  # the intent, no outcome
    again.start()
    scene.deliver([again], sent)  # Alertmanager sends the alert again
    scene.until(
        lambda: scene.phases() == ["Succeeded"],
        "the restarted controller to finish the rollback",
    )

    [rollback] = scene.rollbacks()
    if evict_one:
        eviction_recorded(scene, rollback, pods[0])
    else:
        node_rollback_recorded(scene, rollback, node, node_uid, pods)


def node_rollback_recorded(
    scene: Scene, rollback: dict[str, Any], node: str, node_uid: str, pods: list[str]
) -> None:
    """Every step done, each effect once, one Event per step: as without the crash."""
    uid = rollback["metadata"]["uid"]
    assert [(s["name"], s["state"]) for s in rollback["status"]["steps"]] == [
        (step, "done") for step in NODE_STEPS
    ]
    assert steps(rollback)["cordon"]["madeChange"] is True
    assert steps(rollback)["taint"]["madeChange"] is True
    assert steps(rollback)["cleanup_runtime"]["request"] == uid
    # The node is gone because nodesync deleted it: done, not node_gone.
    assert "node_gone" not in json.dumps(rollback["status"])
    assert steps(rollback)["delete_node"]["message"] == f"deleted node {node}"
    assert scene.get_node(node) is None
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
    assert scene.answered == [(node, uid)]
    scene.check_the_record_came_first()
    scene.until(
        lambda: scene.event_reasons(node) == Counter(NODE_ROLLBACK_EVENTS),
        "one Event per step, NodesyncDeleteNode included",
    )
    assert {e["involvedObject"]["uid"] for e in scene.events(node)} == {node_uid}


def eviction_recorded(scene: Scene, rollback: dict[str, Any], pod: str) -> None:
    """The pod evicted once, its Events on the pod, the node untouched."""
    assert [(s["name"], s["state"]) for s in rollback["status"]["steps"]] == [("evict_pod", "done")]
    scene.wait_audited("eviction", pod)
    assert scene.effects() == Counter({("eviction", pod): 1})  # the other pod stays
    scene.check_the_record_came_first()
    assert scene.node(rollback["spec"]["nodeName"])["spec"].get("unschedulable") is None
    # The decision on the pod; the step's Event too while the pod is there, on the node when
    # the restarted controller found it gone already. Each with its object's uid.
    node = rollback["spec"]["nodeName"]

    def events() -> list[tuple[str, str, bool]]:
        found = [*scene.pod_events(pod), *scene.events(node)]
        return sorted(
            (e["reason"], e["involvedObject"]["kind"], bool(e["involvedObject"]["uid"]))
            for e in found
            if e["reason"] in ("NodesyncRollback", "NodesyncEvictPod")
        )

    scene.until(
        lambda: (
            events()
            in [
                [("NodesyncEvictPod", kind, True), ("NodesyncRollback", "Pod", True)]
                for kind in ("Pod", "Node")
            ]
        ),
        "the eviction's Events: its decision on the pod, its step's",
    )


# ---------------------------------------------------------------- a crash, then the node recovers


@pytest.mark.parametrize("crash", CRASHES[:2], ids=[c.step for c in CRASHES[:2]])
def test_a_rollback_cancelled_after_a_crash_gives_back_the_cordon_it_made(
    scene: Scene, crash: Crash
) -> None:
    """Killed right after its cordon (or its taint), before recording it; the node recovers
    before the controller is back: the rollback is cancelled and the node given back, exactly
    as without the crash."""
    node = scene.add_node("1")
    proxy = scene.proxy("first")
    proxy.trap(crash.trap(node, scene.namespace))
    first = scene.controller("first", *ROLLBACK_ARGS, proxy=proxy, leader_elect=False)
    again = scene.controller(
        "again", *ROLLBACK_ARGS, leader_elect=False, journal=first.journal, start=False
    )
    scene.deliver([first], alert(node))
    scene.until(proxy.sprung.is_set, f"the controller's {crash.step}")
    first.kill()
    assert steps(scene.rollbacks()[0])[crash.step]["state"] == "running"
    assert scene.node(node)["spec"]["unschedulable"] is True

    scene.recover(node)  # Ready again, its Lease renewed, before the controller is back
    again.start()
    scene.until(
        lambda: scene.phases() == ["Cancelled"],
        "the restarted controller to cancel the rollback",
    )
    assert again.running
    [rollback] = scene.rollbacks()
    assert rollback["status"]["reason"] == "recovered"
    given_back = scene.node(node)
    assert not given_back["spec"].get("unschedulable")
    assert "nodesync.io/rollback" not in {t["key"] for t in given_back["spec"].get("taints") or ()}
    undone = Counter({("uncordon", node): 1})
    made = Counter({("cordon", node): 1})
    if crash.step == "taint":
        undone[("untaint", node)] = 1
        made[("taint", node)] = 1
    scene.until(lambda: scene.effects() == made + undone, "the node to be given back, once")
    scene.until(
        lambda: scene.event_reasons(node)["NodesyncUndone"] == 1,
        "the NodesyncUndone Event",
    )


def test_killed_while_giving_a_recovered_node_back_the_restart_finishes_it(scene: Scene) -> None:
    """The node recovers while its rollback waits for the agent; the controller removes its
    taint, lifts its cordon, and dies before recording it. After the restart the record says
    the node was given back, as it was."""
    node = scene.add_node("1")
    scene.agent_answers = False  # the rollback waits for the agent
    proxy = scene.proxy("first")
    proxy.trap(uncordon_of(node))
    first = scene.controller("first", *ROLLBACK_ARGS, proxy=proxy, leader_elect=False)
    again = scene.controller(
        "again", *ROLLBACK_ARGS, leader_elect=False, journal=first.journal, start=False
    )
    scene.deliver([first], alert(node))
    scene.until(
        lambda: (
            [steps(r).get("cleanup_runtime", {}).get("state") for r in scene.rollbacks()]
            == ["running"]
        ),
        "the rollback to wait for the agent",
    )
    scene.recover(node)
    scene.until(proxy.sprung.is_set, "the controller to lift the cordon")
    first.kill()
    assert scene.phases() == ["Waiting"]  # given back, and not recorded

    again.start()
    scene.until(lambda: scene.phases() == ["Cancelled"], "the restart to cancel the rollback")
    [rollback] = scene.rollbacks()
    assert rollback["status"]["reason"] == "recovered"
    assert not scene.node(node)["spec"].get("unschedulable")
    assert scene.effects() == Counter(
        {
            ("cordon", node): 1,
            ("taint", node): 1,
            ("cleanup_request", node): 1,
            ("untaint", node): 1,
            ("uncordon", node): 1,
        }
    )
    scene.until(
        lambda: scene.event_reasons(node)["NodesyncUndone"] == 1,
        "the NodesyncUndone Event, once",
    )
