"""The rollback guards as tables: which plan may run, which is refused and why, and the budget."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from exporter.model.alerts import Alert
from exporter.model.clusterview import ClusterView, build_view
from exporter.model.guards import (
    DEFERRING,
    REASONS,
    GuardState,
    budget,
    correlated_failure,
    evaluate,
    never_touch,
    wave_limit,
)
from exporter.model.health import failing_since, is_recovered
from exporter.model.kube import LeaseInfo, NodeCondition, NodeInfo, Taint
from exporter.model.planner import plan_alert
from exporter.model.rollback import Phase, Plan
from exporter.model.waves import WaveTracker
from exporter.settings.policy import default_policy
from tests.controller.builders import T0, lease, node
from tests.model.rollbacks import node_rollback

POLICY = default_policy()
MIN = 60.0
NOW = T0 + 10 * MIN


def ready(status: str = "True", since: float = T0) -> tuple[NodeCondition, ...]:
    return (NodeCondition("Ready", status, last_transition=since),)


def new_node(name: str, created: float = T0, **kw: object) -> NodeInfo:
    conditions = kw.pop("conditions", ready("False", created + 30))
    return node(name, created, conditions=conditions, **kw)  # type: ignore[arg-type]


def old_node(name: str, status: str = "True", since: float = T0 - 86_400) -> NodeInfo:
    return node(name, T0 - 86_400, conditions=ready(status, since))


def view_of(
    nodes: Sequence[NodeInfo], leases: Sequence[LeaseInfo] = (), now: float = NOW
) -> ClusterView:
    return build_view(nodes, leases, wave_label=None, now=now)


def plan_for(
    view: ClusterView, name: str, action: str = "rollback_node", starts: float = NOW
) -> Plan:
    labels = {"nodesync_action": action, "node": name, "namespace": "ns", "pod": "p"}
    result = plan_alert(
        Alert(f"fp-{name}-{action}", "firing", labels, starts_at=starts), view, delete_nodes=False
    )
    assert isinstance(result, Plan), result
    return result


def reason(view: ClusterView, plan: Plan, state: GuardState | None = None, **policy: Any) -> str:
    p = replace(POLICY, **policy)
    refusal = evaluate(plan, view, state or GuardState(), p, NOW)
    return "" if refusal is None else refusal.reason


# ---------------------------------------------------------------- nodes never touched


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        pytest.param(new_node("w"), "", id="new-failing-worker"),
        pytest.param(
            new_node("cp", labels={"node-role.kubernetes.io/control-plane": ""}),
            "control_plane",
            id="control-plane",
        ),
        pytest.param(
            new_node("m", labels={"node-role.kubernetes.io/master": ""}),
            "control_plane",
            id="master",
        ),
        pytest.param(
            new_node("p", labels={"nodesync.io/protected": "true"}), "protected", id="protected"
        ),
        pytest.param(
            new_node("ca", taints=(Taint("ToBeDeletedByClusterAutoscaler", "NoSchedule"),)),
            "other_remediator",
            id="cluster-autoscaler",
        ),
        pytest.param(
            new_node("k", taints=(Taint("karpenter.sh/disrupted", "NoSchedule"),)),
            "other_remediator",
            id="karpenter",
        ),
        pytest.param(
            new_node("both", labels={"nodesync.io/protected": "true"}, taints=(
                Taint("ToBeDeletedByClusterAutoscaler", "NoSchedule"),
            )),
            "protected",
            id="protected-and-owned",
        ),
    ],
)  # fmt: skip
@pytest.mark.parametrize("action", ["rollback_node", "evict_pod", "cleanup_orphans"])
def test_nodes_never_touched(n: NodeInfo, expected: str, action: str) -> None:
    view = view_of([n])
    assert reason(view, plan_for(view, n.name, action)) == expected


# ---------------------------------------------------------------- scale-out window


@pytest.mark.parametrize(
    ("created", "conditions", "renew", "starts", "expected"),
    [
        pytest.param(NOW - 5 * MIN, ready("False", NOW - 4 * MIN), NOW, NOW, "", id="young"),
        pytest.param(
            NOW - 40 * MIN, ready("False", NOW - 15 * MIN), NOW, NOW, "",
            id="failure-began-inside-the-window",
        ),
        pytest.param(
            NOW - 40 * MIN, ready("False", NOW - 5 * MIN), NOW, NOW, "scale_out_window",
            id="failure-began-after-the-window",
        ),
        pytest.param(
            NOW - 40 * MIN, ready("True", NOW - 39 * MIN), NOW - 20 * MIN, NOW, "",
            id="lease-stale-since-inside-the-window",
        ),
        pytest.param(
            NOW - 40 * MIN, ready("True", NOW - 39 * MIN), NOW, NOW, "scale_out_window",
            id="healthy-node-alert-now",
        ),
        pytest.param(
            NOW - 40 * MIN, ready("True", NOW - 39 * MIN), NOW, NOW - 20 * MIN, "",
            id="healthy-node-alert-began-inside",
        ),
        pytest.param(
            NOW - 40 * MIN, ready("True", NOW - 39 * MIN), NOW, NOW - 50 * MIN,
            "scale_out_window", id="alert-older-than-the-node-is-judged-now",
        ),
        pytest.param(
            NOW - 40 * MIN, (), None, NOW, "", id="never-reported-ready-since-creation",
        ),
        pytest.param(
            NOW - 86_400, ready("Unknown", NOW - 2 * MIN), NOW - 3 * MIN, NOW,
            "scale_out_window", id="old-node",
        ),
    ],
)  # fmt: skip
def test_scale_out_window_is_judged_when_the_trouble_began(
    created: float,
    conditions: tuple[NodeCondition, ...],
    renew: float | None,
    starts: float,
    expected: str,
) -> None:
    n = node("n", created, conditions=conditions)
    view = view_of([n], [lease("n", renew)])
    for action in ("rollback_node", "evict_pod", "cleanup_orphans"):
        assert reason(view, plan_for(view, "n", action, starts)) == expected, action


def test_window_length_is_the_policy() -> None:
    n = node("n", NOW - 20 * MIN, conditions=ready("False", NOW - 5 * MIN))
    view = view_of([n])
    plan = plan_for(view, "n")
    assert reason(view, plan) == ""
    assert reason(view, plan, scaleout_window=10 * MIN) == "scale_out_window"


# ---------------------------------------------------------------- health


@pytest.mark.parametrize(
    ("conditions", "renew", "since", "recovered"),
    [
        pytest.param(ready("True"), NOW - 10, None, True, id="healthy"),
        pytest.param(ready("True"), NOW - 50, None, True, id="lease-at-the-grace-period"),
        pytest.param(ready("True"), NOW - 51, NOW - 51, False, id="lease-stale"),
        pytest.param(ready("True"), None, None, False, id="no-lease-not-failing-not-recovered"),
        pytest.param(ready("False", NOW - 99), NOW, NOW - 99, False, id="not-ready"),
        pytest.param(ready("Unknown", NOW - 99), NOW - 200, NOW - 200, False, id="both"),
        pytest.param((), NOW, T0 - MIN, False, id="no-ready-condition-since-creation"),
    ],
)
def test_health(
    conditions: tuple[NodeCondition, ...], renew: float | None, since: float | None, recovered: bool
) -> None:
    n = node("n", T0 - MIN, conditions=conditions)
    view = view_of([n], [lease("n", renew)])
    assert failing_since(view.nodes[0].health, NOW, 50.0) == since
    # A node rolled back while it was failing: healthy again is recovered.
    recovery = is_recovered(
        conditions, renew, NOW, 50.0, failing_when_decided=True, alert_started_at=NOW - MIN
    )
    assert recovery is recovered


@pytest.mark.parametrize(
    ("ready_since", "recovered"),
    [
        pytest.param(T0, False, id="ready-since-before-the-alert"),
        pytest.param(NOW - 5, True, id="ready-again-after-the-alert-started"),
    ],
)
def test_a_node_the_api_server_showed_healthy_when_decided_recovers_only_by_turning_ready(
    ready_since: float, recovered: bool
) -> None:
    """A frozen runtime: kubelet keeps the node Ready and renews the Lease for minutes, the
    agent's alert rolls it back. Ready and a fresh Lease then are no recovery; Ready again
    after the alert started (kubelet said NotReady, then Ready) is."""
    recovery = is_recovered(
        ready("True", ready_since),
        NOW - 1,
        NOW,
        50.0,
        failing_when_decided=False,
        alert_started_at=NOW - MIN,
    )
    assert recovery is recovered


# ---------------------------------------------------------------- correlated failure


def cluster(old_failing: int, old_ok: int, new: int, lease_stale: int = 0) -> ClusterView:
    nodes = [old_node(f"old-bad-{i}", "False", NOW - 2 * MIN) for i in range(old_failing)]
    nodes += [old_node(f"old-ok-{i}") for i in range(old_ok)]
    nodes += [new_node(f"new-{i:03}", NOW - 8 * MIN) for i in range(new)]
    leases = [
        lease(f"old-ok-{i}", NOW - (5 * MIN if i < lease_stale else 5)) for i in range(old_ok)
    ]
    return view_of(nodes, leases)


@pytest.mark.parametrize(
    ("old_failing", "old_ok", "lease_stale", "paused"),
    [
        pytest.param(0, 10, 0, False, id="all-old-healthy"),
        pytest.param(2, 8, 0, False, id="20-percent"),
        pytest.param(3, 7, 0, True, id="30-percent"),
        pytest.param(0, 10, 3, True, id="30-percent-leases-stale"),
        pytest.param(1, 9, 2, True, id="mixed"),
        pytest.param(1, 1, 0, False, id="one-node-is-below-the-minimum"),
        pytest.param(2, 0, 0, True, id="all-old-failing"),
        pytest.param(0, 0, 0, False, id="no-old-nodes-cannot-judge"),
    ],
)
def test_correlated_failure(old_failing: int, old_ok: int, lease_stale: int, paused: bool) -> None:
    view = cluster(old_failing, old_ok, new=5, lease_stale=lease_stale)
    status = correlated_failure(view, POLICY, NOW)
    assert status.established == old_failing + old_ok
    assert status.failing == old_failing + lease_stale
    assert status.paused is paused
    expected = "correlated_failure" if paused else ""
    for action in ("rollback_node", "evict_pod", "cleanup_orphans"):
        assert reason(view, plan_for(view, "new-000", action)) == expected


def test_a_failed_join_stays_a_failed_join_after_its_window() -> None:
    # Three nodes that never became Ready, 40 minutes old: not established, so they do not
    # trip the guard for the node that fails now.
    stuck = [node(f"stuck-{i}", NOW - 40 * MIN, conditions=ready("False", NOW - 39 * MIN))
             for i in range(3)]  # fmt: skip
    view = view_of([*stuck, *(old_node(f"old-{i}") for i in range(5)), new_node("n", NOW - MIN)])
    status = correlated_failure(view, POLICY, NOW)
    assert (status.established, status.failing, status.paused) == (5, 0, False)


def test_old_nodes_failing_together_refuse_every_plan() -> None:
    view = cluster(old_failing=40, old_ok=60, new=30)
    state = GuardState()
    refusals = Counter(
        reason(view, plan_for(view, f"new-{i:03}", action), state)
        for i in range(30)
        for action in ("rollback_node", "evict_pod", "cleanup_orphans")
    )
    assert refusals == {"correlated_failure": 90}
    assert "correlated_failure" in DEFERRING


# ---------------------------------------------------------------- blast radius


def test_thirty_alerts_for_thirty_of_a_hundred_new_nodes() -> None:
    view = view_of([new_node(f"new-{i:03}", T0 + i) for i in range(100)])
    assert [w.size for w in view.waves] == [100]
    state = GuardState()
    outcome: Counter[str] = Counter()
    for i in range(30):
        plan = plan_for(view, f"new-{i:03}")
        refusal = evaluate(plan, view, state, POLICY, NOW)
        if refusal is None:
            state.accept(f"plan-{i}", plan, NOW)
        outcome[refusal.reason if refusal else "accepted"] += 1
    assert outcome == {"accepted": 10, "blast_radius_fraction": 20}
    b = budget(view, state, POLICY, NOW)
    assert (b.absolute_used, b.absolute_remaining) == (10, 0)
    assert [(w.size, w.limit, w.used, w.remaining) for w in b.waves] == [(100, 10, 10, 0)]
    assert b.wave_remaining == 0


@pytest.mark.parametrize(
    ("size", "fraction", "limit"),
    [(100, 0.1, 10), (99, 0.1, 9), (5, 0.1, 1), (0, 0.1, 1), (100, 0.29, 29), (10, 0.7, 7),
     (3, 1.0, 3), (7, 0.0, 1)],
)  # fmt: skip
def test_wave_limit(size: int, fraction: float, limit: int) -> None:
    assert wave_limit(size, fraction) == limit


def test_the_wave_size_stays_frozen_while_its_nodes_are_deleted() -> None:
    tracker = WaveTracker()
    nodes = [new_node(f"n{i}", T0 + i) for i in range(20)]
    tracker.observe(nodes, now=T0 + 20)
    first = build_view(nodes, [], wave_label=None, now=NOW, tracker=tracker)
    assert first.waves[0].closed
    state = GuardState()
    plan = plan_for(first, "n0")
    state.accept("p0", plan, NOW)
    # the first rolled-back node is deleted: the wave is still 20 nodes, the cap still 2
    later = build_view(nodes[1:], [], wave_label=None, now=NOW + 1, tracker=tracker)
    assert later.waves[0].size == 20
    assert evaluate(plan_for(later, "n1"), later, state, POLICY, NOW + 1) is None
    state.accept("p1", plan_for(later, "n1"), NOW + 1)
    refusal = evaluate(plan_for(later, "n2"), later, state, POLICY, NOW + 1)
    assert refusal is not None
    assert refusal.reason == "blast_radius_fraction"
    assert "2 of 20 nodes" in refusal.detail


def test_waves_have_their_own_budget() -> None:
    label = "example.com/scale-out"
    nodes = [new_node(f"a{i}", labels={label: "a"}) for i in range(10)]
    nodes += [new_node(f"b{i}", labels={label: "b"}) for i in range(10)]
    view = build_view(nodes, [], wave_label=label, now=NOW)
    state = GuardState()
    state.accept("pa", plan_for(view, "a0"), NOW)
    assert reason(view, plan_for(view, "a1"), state) == "blast_radius_fraction"
    assert reason(view, plan_for(view, "b0"), state) == ""


def test_absolute_cap_over_a_sliding_window() -> None:
    view = view_of([new_node(f"n{i:02}", T0 + i) for i in range(50)])
    policy = replace(
        POLICY, max_rollbacks=3, max_rollbacks_window=600, max_rollback_fraction=1.0,
        max_concurrent_rollbacks=100,
    )  # fmt: skip
    state = GuardState()
    for i, t in enumerate((NOW - 700, NOW - 500, NOW - 10, NOW - 5)):
        state.accept(f"p{i}", plan_for(view, f"n{i:02}"), t)
    # n00 was accepted 700 s ago: outside the window; three nodes inside it
    refusal = evaluate(plan_for(view, "n10"), view, state, policy, NOW)
    assert refusal is not None
    assert refusal.reason == "blast_radius_absolute"
    assert evaluate(plan_for(view, "n10"), view, state, policy, NOW + 101) is None
    assert budget(view, state, policy, NOW).absolute_remaining == 0
    assert budget(view, state, policy, NOW + 101).absolute_remaining == 1


def test_a_node_rolled_back_again_does_not_use_more_budget() -> None:
    view = view_of([new_node(f"n{i}") for i in range(10)])
    state = GuardState()
    state.accept("p0", plan_for(view, "n0"), NOW, active=False)  # finished
    assert reason(view, plan_for(view, "n1"), state) == "blast_radius_fraction"
    assert reason(view, plan_for(view, "n0"), state) == ""


@pytest.mark.parametrize(
    ("phase", "attempted", "counts"),
    [
        pytest.param(Phase.PENDING, False, True, id="pending"),
        pytest.param(Phase.RUNNING, True, True, id="running"),
        pytest.param(Phase.SUCCEEDED, True, True, id="succeeded"),
        pytest.param(Phase.FAILED, True, True, id="failed"),
        pytest.param(Phase.CANCELLED, True, True, id="cancelled-after-a-step"),
        pytest.param(Phase.CANCELLED, False, False, id="cancelled-before-any-step"),
    ],
)
def test_the_budget_counts_the_rollbacks_in_the_cluster(
    phase: Phase, attempted: bool, counts: bool
) -> None:
    view = view_of([new_node(f"n{i}") for i in range(10)])
    state = GuardState.of([node_rollback(plan_for(view, "n0"), NOW, phase, attempted=attempted)])
    expected = "blast_radius_fraction" if counts else ""
    assert reason(view, plan_for(view, "n1"), state) == expected
    assert budget(view, state, POLICY, NOW).absolute_used == (1 if counts else 0)


def test_evictions_and_cleanups_use_no_rollback_budget() -> None:
    view = view_of([new_node(f"n{i}") for i in range(10)])
    state = GuardState()
    for i in range(5):
        for action in ("evict_pod", "cleanup_orphans"):
            plan = plan_for(view, f"n{i}", action)
            assert evaluate(plan, view, state, POLICY, NOW) is None
            state.accept(f"p{i}{action}", plan, NOW)
    assert budget(view, state, POLICY, NOW).absolute_used == 0
    assert reason(view, plan_for(view, "n9"), state) == ""


# ---------------------------------------------------------------- what an alert would join


def test_an_active_rollback_is_found_for_the_alerts_that_would_join_it() -> None:
    view = view_of([new_node(f"n{i}") for i in range(3)])
    state = GuardState()
    state.accept("r0", plan_for(view, "n0"), NOW)
    state.accept("c1", plan_for(view, "n1", "cleanup_orphans"), NOW)
    state.accept("e2", plan_for(view, "n2", "evict_pod"), NOW)
    assert state.running() == 1
    assert state.active_on("n0", node_level=True) is not None
    assert state.active_on("n0", node_level=False, pod=("ns", "p"))[0] == "r0"  # type: ignore[index]
    assert state.active_on("n1", node_level=True)[0] == "c1"  # type: ignore[index]
    assert state.active_on("n1", node_level=False, pod=("ns", "p")) is None
    assert state.active_on("n2", node_level=False, pod=("ns", "p"))[0] == "e2"  # type: ignore[index]
    assert state.active_on("n2", node_level=False, pod=("ns", "other")) is None
    assert state.active_on("n2", node_level=True) is None
    state.accept("r0", plan_for(view, "n0"), NOW, active=False)
    assert state.active_on("n0", node_level=True) is None
    assert state.running() == 0


# ---------------------------------------------------------------- reasons


def test_every_reason_is_a_short_label_value() -> None:
    assert len(set(REASONS)) == len(REASONS)
    assert set(REASONS) >= DEFERRING
    assert all(r.isidentifier() and r.islower() and len(r) < 32 for r in REASONS)


def test_unknown_node() -> None:
    view = view_of([new_node("n0")])
    plan = plan_for(view, "n0")
    assert reason(view_of([new_node("other")]), plan) == "unknown_node"


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        pytest.param(node("w"), None, id="worker"),
        pytest.param(node("cp", labels={"node-role.kubernetes.io/master": ""}), "control_plane"),
        pytest.param(node("p", labels={"nodesync.io/protected": "true"}), "protected"),
        pytest.param(node("p", labels={"nodesync.io/protected": "True"}), None, id="not-true"),
        pytest.param(
            node("o", taints=(Taint("node.kubernetes.io/out-of-service", "NoExecute"),)),
            "other_remediator",
        ),
        pytest.param(
            node("d", taints=(Taint("DeletionCandidateOfClusterAutoscaler", "PreferNoSchedule"),)),
            None,
            id="autoscaler-candidate-only",
        ),
    ],
)
def test_never_touch_a_live_node(n: NodeInfo, expected: str | None) -> None:
    refusal = never_touch(n)
    assert (refusal.reason if refusal else None) == expected
    # the same answer as the view's flags
    view = view_of([n])
    by_view = evaluate(plan_for(view, n.name), view, GuardState(), POLICY, NOW)
    assert (by_view.reason if by_view and by_view.reason in REASONS[1:4] else None) == expected


def test_a_bad_image_cohort_waits_while_other_cohorts_go_on() -> None:
    good = ("v1.30.2", "containerd://1.7.20", "good image", "6.1")
    bad = ("v1.30.2", "containerd://1.7.20", "bad image", "6.1")
    failing = ready("False", NOW - 8 * MIN)
    nodes = [replace(new_node(f"good-{i:03}", conditions=ready()), build=good) for i in range(177)]
    nodes += [replace(new_node(f"sick-{i}", conditions=failing), build=good) for i in range(3)]
    nodes += [
        replace(new_node(f"bad-{i:02}", conditions=failing if i < 18 else ready()), build=bad)
        for i in range(20)
    ]
    view = build_view(nodes, (), wave_label=None, now=NOW, cohort_keys=("os_image",))
    state = GuardState()
    outcome: Counter[str] = Counter()
    for name in [*(f"bad-{i:02}" for i in range(18)), *(f"sick-{i}" for i in range(3))]:
        plan = plan_for(view, name)
        refusal = evaluate(plan, view, state, POLICY, NOW)
        if refusal is None:
            state.accept(name, plan, NOW)
        outcome[f"{name[:3]}:{refusal.reason if refusal else 'accepted'}"] += 1
    assert outcome == {"bad:cohort": 18, "sic:accepted": 3}
    assert "cohort" in DEFERRING
    refusal = evaluate(plan_for(view, "bad-00"), view, state, POLICY, NOW)
    assert refusal is not None
    assert refusal.detail.startswith("18 of 20 nodes of cohort os_image=bad image in wave ")
    # A pod's eviction is not a node rollback: the breaker does not hold it.
    assert reason(view, plan_for(view, "bad-01", "evict_pod")) == ""
