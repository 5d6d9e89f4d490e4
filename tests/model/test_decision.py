"""What the hook decides about one alert: a new rollback, a join, an escalation, a refusal, a
wait — the same function for the controller and ``nodesync plan``."""

from __future__ import annotations

from dataclasses import replace

import pytest

from exporter.model.alerts import Alert
from exporter.model.decision import (
    ESCALATE,
    JOIN,
    PLAN,
    REFUSED,
    WAITS,
    cleanups_to_repeat,
    decide,
    new_rollback,
)
from exporter.model.guards import GuardState
from exporter.model.rollback import (
    NODE_GONE,
    Action,
    NodeRollback,
    Phase,
    RollbackSpec,
    RollbackStatus,
    StepKind,
    StepState,
    Trigger,
    Verdicts,
    rollback_name,
)
from exporter.settings.policy import default_policy
from tests.model.test_guards import NOW, cluster, new_node, view_of

POLICY = default_policy()


def alert(node: str, action: str = "rollback_node", fp: str = "a1", pod: str = "p") -> Alert:
    labels = {
        "alertname": "NodesyncNewNodeNotReady",
        "nodesync_action": action,
        "node": node,
        "namespace": "ns",
        "pod": pod,
    }
    return Alert(fp, "firing", labels, starts_at=NOW - 60)


def test_alerts_about_one_node_make_one_rollback() -> None:
    view = view_of([new_node(f"n{i}") for i in range(10)])
    state = GuardState()
    first = decide(alert("n0", fp="a1"), view, state, POLICY, NOW)
    assert first.verdict == PLAN
    rollback = new_rollback(first.plan, view, state, POLICY, NOW)  # type: ignore[arg-type]
    state.accept(rollback.name, first.plan, NOW)  # type: ignore[arg-type]
    for fp, action in (("a2", "rollback_node"), ("a3", "evict_pod"), ("a4", "cleanup_orphans")):
        later = decide(alert("n0", action, fp), view, state, POLICY, NOW)
        assert (later.verdict, later.rollback) == (JOIN, rollback.name), action
    # The blast radius counts the node once: another node of the wave is over the cap.
    assert decide(alert("n1", fp="b1"), view, state, POLICY, NOW).verdict == REFUSED


def test_a_stronger_alert_escalates_and_is_judged_by_the_guards() -> None:
    view = view_of([new_node(f"n{i}") for i in range(10)])
    state = GuardState()
    cleanup = decide(alert("n0", "cleanup_orphans", "c1"), view, state, POLICY, NOW)
    assert cleanup.verdict == PLAN
    state.accept("cleanup-n0", cleanup.plan, NOW)  # type: ignore[arg-type]
    escalated = decide(alert("n0", "rollback_node", "r1"), view, state, POLICY, NOW)
    assert (escalated.verdict, escalated.rollback) == (ESCALATE, "cleanup-n0")
    # Refused by a guard: the weaker rollback goes on, the alert is refused.
    state.accept("other", decide(alert("n1", fp="x"), view, state, POLICY, NOW).plan, NOW)  # type: ignore[arg-type]
    again = decide(alert("n2", "cleanup_orphans", "c2"), view, state, POLICY, NOW)
    state.accept("cleanup-n2", again.plan, NOW)  # type: ignore[arg-type]
    refused = decide(alert("n2", "rollback_node", "r2"), view, state, POLICY, NOW)
    assert refused.verdict == REFUSED
    assert refused.refusal is not None
    assert refused.refusal.reason == "blast_radius_fraction"


def test_an_alert_about_a_rollback_found_ended_is_a_new_rollback() -> None:
    """The watch still showed the cleanup active; the server has it ended: it takes no more
    alerts, and the stronger alert (or a join) is judged as a rollback of its own."""
    view = view_of([new_node("n0")])
    state = GuardState()
    cleanup = decide(alert("n0", "cleanup_orphans", "c1"), view, state, POLICY, NOW)
    state.accept("cleanup-n0", cleanup.plan, NOW)  # type: ignore[arg-type]
    assert decide(alert("n0", "rollback_node", "r1"), view, state, POLICY, NOW).verdict == ESCALATE
    assert decide(alert("n0", "cleanup_orphans", "c2"), view, state, POLICY, NOW).verdict == JOIN
    state.ended("cleanup-n0")
    state.ended("never-decided")  # nothing to end: no effect
    assert decide(alert("n0", "rollback_node", "r1"), view, state, POLICY, NOW).verdict == PLAN
    assert decide(alert("n0", "cleanup_orphans", "c2"), view, state, POLICY, NOW).verdict == PLAN


def _saw_its_node_go(rollback: NodeRollback, how: str) -> NodeRollback:
    """``rollback`` succeeded having deleted its node, or having found it gone at its first
    step."""
    steps = rollback.status.steps
    if how == "deleted":
        steps = tuple(replace(s, state=StepState.DONE, attempts=1) for s in steps)
    else:
        gone = replace(steps[0], state=StepState.SKIPPED, reason=NODE_GONE, attempts=1)
        steps = (gone, *steps[1:])
    return replace(rollback, status=replace(rollback.status, phase=Phase.SUCCEEDED, steps=steps))


@pytest.mark.parametrize("how", ["deleted", "found-gone"])
def test_an_alert_about_a_node_a_rollback_saw_go_is_refused_though_the_view_has_it(
    how: str,
) -> None:
    """The watch of NodeRollbacks shows a rollback's end before the watch of Nodes shows its
    node gone: an alert decided in between is about a node that exists no more, not a new
    rollback of it. Whether the rollback was seen ended by the watch (``of``) or by a join that
    found it so (``ended``)."""
    view = view_of([new_node("n0")])
    policy = replace(POLICY, delete_nodes=True)
    first = decide(alert("n0", fp="a1"), view, GuardState(), policy, NOW)
    assert first.plan is not None
    went = _saw_its_node_go(new_rollback(first.plan, view, GuardState(), policy, NOW), how)
    assert went.node_gone
    assert not went.active
    running = GuardState()
    running.accept(went.name, first.plan, NOW)
    assert decide(alert("n0", fp="a2"), view, running, policy, NOW).verdict == JOIN
    running.ended(went.name, went)
    for state in (GuardState.of([went]), running):
        later = decide(alert("n0", fp="a2"), view, state, policy, NOW)
        assert later.refusal is not None
        assert (later.verdict, later.refusal.reason) == (REFUSED, "unknown_node")
        assert went.name in later.refusal.detail
        # A node made again under the name (another uid) is judged as ever.
        remade = view_of([new_node("n0", uid="uid-n0-again")])
        assert decide(alert("n0", fp="a2"), remade, state, policy, NOW).verdict == PLAN


def test_a_rollback_that_left_its_node_in_place_is_judged_again_as_ever() -> None:
    """Negative case: a rollback that ended without deleting its node (no --rollback.delete-
    nodes) takes no more alerts, and an alert about the node is a rollback of its own."""
    view = view_of([new_node("n0")])
    first = decide(alert("n0", fp="a1"), view, GuardState(), POLICY, NOW)
    assert first.plan is not None
    ended = _saw_its_node_go(new_rollback(first.plan, view, GuardState(), POLICY, NOW), "deleted")
    assert StepKind.DELETE_NODE not in {s.kind for s in ended.status.steps}
    assert not ended.node_gone
    state = GuardState.of([ended])
    assert decide(alert("n0", fp="a2"), view, state, POLICY, NOW).verdict == PLAN


def _cleanup(
    name: str, phase: Phase, finished: float | None, *triggers: Trigger, node: str = "n0"
) -> NodeRollback:
    spec = RollbackSpec(node, f"uid-{node}", Action.CLEANUP_ORPHANS, triggers[0], Verdicts(NOW))
    status = RollbackStatus(phase=phase, triggers=triggers, finished_at=finished)
    return NodeRollback(name, spec, status, created_at=finished or NOW)


D1 = Trigger("NodesyncNewNodeDrift", "d1", NOW - 3600)
D2 = Trigger("NodesyncNewNodeDrift", "d2", NOW - 3600)
AFTER = 600.0
OK, FAILED, RUNNING = Phase.SUCCEEDED, Phase.FAILED, Phase.RUNNING


@pytest.mark.parametrize(
    ("rollbacks", "repeats"),
    [
        pytest.param([_cleanup("a", OK, NOW - AFTER, D1)], [("a", D1, 2)], id="succeeded-long-ago"),
        pytest.param([_cleanup("a", OK, NOW - AFTER + 1, D1)], [], id="succeeded-just-now"),
        pytest.param([_cleanup("a", FAILED, NOW - 2 * AFTER, D1)], [], id="failed-asks-a-person"),
        pytest.param([_cleanup("a", RUNNING, None, D1)], [], id="still-running"),
        pytest.param(
            [_cleanup("a", OK, NOW - 2 * AFTER, D1), _cleanup("b", OK, NOW - AFTER, D1)],
            [("b", D1, 3)],
            id="the-last-of-the-episode",
        ),
        pytest.param(
            [_cleanup("a", OK, NOW - 2 * AFTER, D1), _cleanup("b", RUNNING, None, D1)],
            [],
            id="one-active-already",
        ),
        pytest.param(
            [_cleanup("a", OK, NOW - AFTER, D1, D2)],
            [("a", D1, 2), ("a", D2, 1)],
            id="a-joined-episode-has-had-none-of-its-own",
        ),
        pytest.param(
            [_cleanup("a", OK, NOW - 2 * AFTER, D1, D2), _cleanup("b", OK, NOW - 1, D1)],
            [],
            id="the-node-was-cleaned-just-now-for-another-episode",
        ),
        pytest.param(
            [_cleanup("a", OK, NOW - AFTER, D1), _cleanup("b", OK, NOW - 1, D2, node="n1")],
            [("a", D1, 2)],
            id="each-node-on-its-own",
        ),
    ],
)
def test_a_succeeded_cleanup_is_repeated_for_an_episode_that_may_still_fire(
    rollbacks: list[NodeRollback], repeats: list[tuple[str, Trigger, int]]
) -> None:
    """Which cleanups of orphans an alert still firing asks for again (the journal says
    whether it fired since): the last of its episode, succeeded at least AFTER ago, none of
    that episode active; and which cleanup of the episode the new one is."""
    found = cleanups_to_repeat(rollbacks, NOW, AFTER)
    assert [(r.last.name, r.trigger, r.attempt) for r in found] == repeats
    for r in found:  # since the node's last cleanup, of any episode
        of_node = [c for c in rollbacks if c.spec.node == r.last.spec.node]
        assert r.since == max(c.status.finished_at or 0 for c in of_node)


def test_a_repeated_cleanup_has_a_name_of_its_own() -> None:
    view = view_of([new_node("n0")])
    plan = decide(alert("n0", "cleanup_orphans", "d1"), view, GuardState(), POLICY, NOW).plan
    assert plan is not None
    names = {new_rollback(plan, view, GuardState(), POLICY, NOW, attempt=n).name for n in (1, 2, 3)}
    assert len(names) == 3
    assert new_rollback(plan, view, GuardState(), POLICY, NOW).name == rollback_name(
        "n0", plan.node_uid, Action.CLEANUP_ORPHANS, "d1", NOW - 60
    )  # the first keeps the name it always had


def test_evictions_of_different_pods_are_rollbacks_of_their_own() -> None:
    view = view_of([new_node("n0")])
    state = GuardState()
    one = decide(alert("n0", "evict_pod", "e1", pod="p1"), view, state, POLICY, NOW)
    state.accept("evict-p1", one.plan, NOW)  # type: ignore[arg-type]
    same = decide(alert("n0", "evict_pod", "e2", pod="p1"), view, state, POLICY, NOW)
    other = decide(alert("n0", "evict_pod", "e3", pod="p2"), view, state, POLICY, NOW)
    assert (one.verdict, same.verdict, same.rollback, other.verdict) == (
        PLAN,
        JOIN,
        "evict-p1",
        PLAN,
    )


def test_a_correlated_failure_makes_new_alerts_wait() -> None:
    view = cluster(old_failing=40, old_ok=60, new=3)
    decision = decide(alert("new-000"), view, GuardState(), POLICY, NOW)
    assert decision.verdict == WAITS
    assert decision.refusal is not None
    assert decision.refusal.reason == "correlated_failure"


def test_the_new_rollback_records_the_decision_and_is_named_by_it() -> None:
    view = view_of([new_node(f"n{i}") for i in range(10)])
    state = GuardState()
    decision = decide(alert("n3"), view, state, replace(POLICY, delete_nodes=True), NOW)
    plan = decision.plan
    assert plan is not None
    rollback = new_rollback(plan, view, state, POLICY, NOW, decided_by="controller-0")
    again = new_rollback(plan, view, state, POLICY, NOW + 5)
    assert rollback.name == again.name  # the same decision, the same name
    assert rollback.name.startswith("n3-")
    spec = rollback.spec
    assert (spec.node, spec.action, spec.delete_node) == ("n3", Action.ROLLBACK_NODE, True)
    assert spec.node_uid == view.node("n3").uid  # type: ignore[union-attr]
    assert spec.trigger.fingerprint == "a1"
    d = spec.decision
    assert (d.decided_at, d.decided_by, d.wave_size, d.wave_limit, d.wave_used) == (
        NOW,
        "controller-0",
        10,
        1,
        0,
    )
    assert rollback.status.steps[-1].kind is StepKind.DELETE_NODE
    other = new_rollback(
        decide(alert("n3", fp="zz"), view, state, POLICY, NOW).plan,  # type: ignore[arg-type]
        view,
        state,
        POLICY,
        NOW,
    )
    assert other.name != rollback.name  # another episode, another rollback
