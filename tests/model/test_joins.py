"""A join's stages from the Node and Lease as the API has them, the stage histograms and the
join SLO's judgements, as tables."""

from __future__ import annotations

from dataclasses import replace

import pytest

from exporter.model.joins import (
    HELD,
    LEFT,
    OUTCOME_NOT_READY,
    OUTCOME_READY,
    STAGE_BUCKETS,
    Histogram,
    JoinPolicy,
    JoinStages,
    JoinTracker,
    next_stages,
    readiness_gates,
    readiness_hold,
)
from exporter.model.kube import LEASE_NAMESPACE, LeaseInfo, NodeCondition, Taint
from exporter.settings.declare import model_of
from exporter.settings.joins import JoinSettings
from tests.controller.builders import T0, node

CILIUM = "node.cilium.io/agent-not-ready"
GATE = "readiness.k8s.io/network-ready"
POLICY = JoinPolicy()  # window 30m, objective 5m, Cilium's taint


def ready(status: str, at: float | None) -> NodeCondition:
    return NodeCondition("Ready", status, last_transition=at)


def network(status: str, at: float) -> NodeCondition:
    return NodeCondition("NetworkUnavailable", status, last_transition=at)


def lease_of(name: str, created: float | None) -> LeaseInfo:
    return LeaseInfo(name, LEASE_NAMESPACE, renew_time=created, created_at=created)


@pytest.mark.parametrize(
    ("taints", "configured", "expected"),
    [
        pytest.param((), (CILIUM,), (), id="none"),
        pytest.param((Taint(GATE, "NoSchedule"),), (), (GATE,), id="node-readiness-controller"),
        pytest.param((Taint(CILIUM, "NoExecute"),), (CILIUM,), (CILIUM,), id="configured-cni"),
        pytest.param((Taint(CILIUM, "NoExecute"),), (), (), id="cni-not-configured"),
        pytest.param(
            (Taint("node.kubernetes.io/not-ready", "NoSchedule"),), (CILIUM,), (), id="lifecycle"
        ),
        pytest.param(
            (Taint(GATE, "NoSchedule"), Taint(GATE, "NoExecute"), Taint(CILIUM, "NoSchedule")),
            (CILIUM,),
            (CILIUM, GATE),
            id="several-each-once-sorted",
        ),
        pytest.param(
            (Taint("readiness.k8s.io", "NoSchedule"),), (), (), id="prefix-needs-the-slash"
        ),
    ],
)
def test_readiness_gates(
    taints: tuple[Taint, ...], configured: tuple[str, ...], expected: tuple[str, ...]
) -> None:
    assert readiness_gates(taints, configured) == expected


# (conditions, taints, lease created, first seen) -> the stages at T0 + 100, from nothing
STAGE_CASES = [
    pytest.param(
        (ready("False", T0 + 5),),
        (),
        None,
        True,
        JoinStages(T0, gates_cleared=T0),
        id="registered-not-ready-no-lease",
    ),
    pytest.param(
        (ready("True", T0 + 40),),
        (),
        T0 + 3,
        True,
        JoinStages(T0, lease=T0 + 3, ready=T0 + 40, network_ready=T0 + 40, gates_cleared=T0),
        id="ready-network-from-ready",
    ),
    pytest.param(
        (ready("True", T0 + 40), network("False", T0 + 30)),
        (),
        T0 + 3,
        True,
        JoinStages(T0, lease=T0 + 3, ready=T0 + 40, network_ready=T0 + 30, gates_cleared=T0),
        id="network-from-its-condition",
    ),
    pytest.param(
        (ready("True", T0 + 40), network("True", T0 + 30)),
        (),
        None,
        True,
        JoinStages(T0, ready=T0 + 40, gates_cleared=T0),
        id="network-unavailable-holds-network-ready",
    ),
    pytest.param(
        (ready("True", T0 + 40),),
        (Taint(GATE, "NoSchedule"),),
        None,
        True,
        JoinStages(T0, ready=T0 + 40, network_ready=T0 + 40, gates=(GATE,)),
        id="held-by-a-gate",
    ),
    pytest.param(
        (ready("True", None),),
        (),
        None,
        False,
        JoinStages(T0, ready=T0 + 100, network_ready=T0 + 100, gates_cleared=T0 + 100),
        id="no-transition-time-and-gates-seen-gone-take-now",
    ),
    pytest.param(
        (ready("Unknown", T0 + 60),),
        (),
        None,
        True,
        JoinStages(T0, gates_cleared=T0),
        id="unknown-is-not-ready",
    ),
]


@pytest.mark.parametrize(("conditions", "taints", "lease", "first_seen", "expected"), STAGE_CASES)
def test_stages_from_the_objects(
    conditions: tuple[NodeCondition, ...],
    taints: tuple[Taint, ...],
    lease: float | None,
    first_seen: bool,
    expected: JoinStages,
) -> None:
    n = node("n", T0, conditions=conditions, taints=taints)
    leased = lease_of("n", lease) if lease is not None else None
    got = next_stages(JoinStages(T0), n, leased, T0 + 100, (CILIUM,), first_seen=first_seen)
    assert got == expected


def test_a_stage_keeps_its_first_time() -> None:
    first = JoinStages(T0, lease=T0 + 3, ready=T0 + 40, network_ready=T0 + 40, gates_cleared=T0)
    flapped = node("n", T0, conditions=(ready("True", T0 + 900),))
    later = next_stages(first, flapped, lease_of("n", T0 + 800), T0 + 1000, (), first_seen=False)
    assert later == first


# ---------------------------------------------------------------- the tracker

# (what happens, as (time, event) pairs) -> (ready, not_ready) judged. Events: "seen:<ready at>"
# ("-": not Ready), "delete", "advance". The tracker started at T0 - 1 unless the case says.
JUDGE_CASES = [
    pytest.param([(T0 + 10, "seen:-"), (T0 + 60, "seen:50")], (1, 0), id="ready-in-time"),
    pytest.param([(T0 + 10, "seen:-"), (T0 + 299, "advance")], (0, 0), id="not-yet-judged"),
    pytest.param([(T0 + 10, "seen:-"), (T0 + 300, "advance")], (0, 1), id="objective-ran-out"),
    pytest.param(
        [(T0 + 10, "seen:-"), (T0 + 300, "advance"), (T0 + 400, "seen:390")],
        (0, 1),
        id="ready-late-judged-once",
    ),
    pytest.param(
        [(T0 + 10, "seen:-"), (T0 + 400, "seen:390")], (0, 1), id="ready-late-seen-before-advance"
    ),
    pytest.param([(T0 + 10, "seen:-"), (T0 + 250, "seen:290")], (1, 0), id="ready-exactly-in-time"),
    pytest.param([(T0 + 10, "seen:-"), (T0 + 100, "delete")], (0, 1), id="deleted-before-ready"),
    pytest.param(
        [(T0 + 10, "seen:-"), (T0 + 60, "seen:50"), (T0 + 100, "delete")],
        (1, 0),
        id="deleted-after-ready",
    ),
    pytest.param(
        [(T0 + 2000, "seen:-"), (T0 + 3000, "advance")], (0, 0), id="older-than-the-window"
    ),
]


def _run(events: list[tuple[float, str]], since: float = T0 - 1) -> JoinTracker:
    tracker = JoinTracker(POLICY, since=since)
    for at, event in events:
        if event == "advance":
            tracker.advance(at)
        elif event == "delete":
            tracker.remove("n", at)
        else:
            ready_at = event.removeprefix("seen:")
            conditions = () if ready_at == "-" else (ready("True", T0 + float(ready_at)),)
            tracker.update(node("n", T0, conditions=conditions), None, "w", at)
    return tracker


@pytest.mark.parametrize(("events", "expected"), JUDGE_CASES)
def test_the_join_slo_judges_each_node_once(
    events: list[tuple[float, str]], expected: tuple[int, int]
) -> None:
    tracker = _run(events)
    assert (tracker.outcomes[OUTCOME_READY], tracker.outcomes[OUTCOME_NOT_READY]) == expected


@pytest.mark.parametrize(
    ("since", "events", "expected"),
    [
        pytest.param(
            T0 + 100, [(T0 + 100, "seen:50")], (0, 0), id="ready-before-the-start-not-counted"
        ),
        pytest.param(
            T0 + 100,
            [(T0 + 100, "seen:-"), (T0 + 300, "advance")],
            (0, 1),
            id="judged-after-the-start-counted",
        ),
        pytest.param(
            T0 + 400,
            [(T0 + 400, "seen:-"), (T0 + 401, "advance")],
            (0, 0),
            id="ran-out-before-the-start-not-counted",
        ),
    ],
)
def test_a_started_controller_counts_only_what_falls_after_its_start(
    since: float, events: list[tuple[float, str]], expected: tuple[int, int]
) -> None:
    tracker = _run(events, since=since)
    assert (tracker.outcomes[OUTCOME_READY], tracker.outcomes[OUTCOME_NOT_READY]) == expected


def test_each_stage_is_observed_once_in_its_waves_histogram() -> None:
    tracker = JoinTracker(POLICY, since=T0 - 1)
    gated = node("a", T0, conditions=(ready("False", T0),), taints=(Taint(GATE, "NoSchedule"),))
    tracker.update(gated, lease_of("a", T0 + 4), "w1", T0 + 5)
    became_ready = replace(gated, conditions=(ready("True", T0 + 42),))
    tracker.update(became_ready, lease_of("a", T0 + 4), "w1", T0 + 43)
    tracker.update(became_ready, lease_of("a", T0 + 4), "w1", T0 + 50)  # nothing new
    tracker.update(replace(became_ready, taints=()), lease_of("a", T0 + 4), "w1", T0 + 95)
    assert tracker.pod_running("a", T0 + 130) is not None
    assert tracker.pod_running("a", T0 + 99) is None  # the first one stays
    tracker.update(node("b", T0 + 1), None, "w2", T0 + 6)
    seen = {key: (h.count, h.sum) for key, h in tracker.histograms().items()}
    assert seen == {
        ("w1", "lease"): (1, 4.0),
        ("w1", "ready"): (1, 42.0),
        ("w1", "network_ready"): (1, 42.0),
        ("w1", "gates_cleared"): (1, 95.0),
        ("w1", "pod_running"): (1, 130.0),
        ("w2", "gates_cleared"): (1, 0.0),
    }
    tracker.keep_waves(["w2"])
    assert set(tracker.histograms()) == {("w2", "gates_cleared")}


def test_a_node_seen_at_the_start_observes_only_later_stages() -> None:
    tracker = JoinTracker(POLICY, since=T0 + 100)
    n = node("a", T0, conditions=(ready("True", T0 + 40),))
    tracker.update(n, lease_of("a", T0 + 4), "w", T0 + 100)
    assert tracker.histograms() == {}
    tracker.pod_running("a", T0 + 120)
    assert {k: h.count for k, h in tracker.histograms().items()} == {("w", "pod_running"): 1}


def test_the_window_ends_a_join_and_a_new_node_of_the_same_name_starts_one() -> None:
    tracker = JoinTracker(POLICY, since=T0 - 1)
    tracker.update(node("a", T0, uid="u1"), None, "w", T0 + 1)
    assert tracker.advance(T0 + 1799) == []
    assert tracker.advance(T0 + 1800) == ["a"]
    assert tracker.stages("a") is None
    assert len(tracker) == 0
    assert tracker.update(node("a", T0, uid="u1"), None, "w", T0 + 1801) is None
    again = tracker.update(node("a", T0 + 1800, uid="u2"), None, "w2", T0 + 1801)
    assert again is not None
    assert again.created_at == T0 + 1800
    # u1 was judged not_ready at its objective; u2's own deadlines are its own
    assert tracker.outcomes[OUTCOME_NOT_READY] == 1
    assert tracker.advance(T0 + 2100) == []
    assert tracker.outcomes[OUTCOME_NOT_READY] == 2


@pytest.mark.parametrize(
    ("seconds", "bucket"),
    [(0.0, 0), (5.0, 0), (5.5, 1), (300.0, STAGE_BUCKETS.index(300.0)), (1800.0, 14), (1801, 15)],
)
def test_a_duration_falls_in_the_bucket_of_its_upper_bound(seconds: float, bucket: int) -> None:
    histogram = Histogram()
    histogram.observe(seconds)
    assert histogram.counts[bucket] == 1
    assert sum(histogram.counts) == 1
    cumulative = histogram.cumulative()
    assert cumulative[-1] == 1
    assert cumulative[bucket] == 1
    assert all(n == 0 for n in cumulative[:bucket])


def test_the_models_defaults_are_the_flags_defaults() -> None:
    assert model_of(JoinSettings(), JoinPolicy) == JoinPolicy()


def test_the_objective_must_fit_in_the_window() -> None:
    with pytest.raises(ValueError, match=r"--join\.ready-objective"):
        JoinPolicy(join_window=60.0, ready_objective=120.0)


def test_the_hold_limit_must_fit_in_the_window() -> None:
    with pytest.raises(ValueError, match=r"--join\.readiness-hold-limit"):
        JoinPolicy(join_window=600.0, ready_objective=300.0, readiness_hold_limit=900.0)


LIMIT = POLICY.readiness_hold_limit  # 20 minutes


# (gates, Ready, seconds since the creation) -> the hold
@pytest.mark.parametrize(
    ("gates", "is_ready", "age", "expected"),
    [
        pytest.param((), False, 60, None, id="no-gate-not-ready-is-no-hold"),
        pytest.param((), True, LIMIT + 60, None, id="no-gate-ready-late-is-nothing"),
        pytest.param((CILIUM,), False, 0, HELD, id="at-creation-held"),
        pytest.param((CILIUM,), False, 90, HELD, id="not-ready-behind-its-gate-starting"),
        pytest.param((GATE,), True, 90, HELD, id="ready-with-a-gate-still-starting"),
        pytest.param((CILIUM,), False, LIMIT - 0.001, HELD, id="just-within-the-limit"),
        pytest.param((CILIUM,), False, LIMIT, None, id="at-the-limit-a-failed-join"),
        pytest.param((CILIUM, GATE), False, LIMIT + 600, None, id="never-cleared-failed"),
        pytest.param((GATE,), True, LIMIT, LEFT, id="ready-at-the-limit-left"),
        pytest.param((CILIUM, GATE), True, 86400, LEFT, id="left-on-an-old-node"),
    ],
)
def test_a_readiness_hold(
    gates: tuple[str, ...], is_ready: bool, age: float, expected: str | None
) -> None:
    got = readiness_hold(gates, ready=is_ready, created_at=T0, now=T0 + age, hold_limit=LIMIT)
    assert got == expected


def test_the_tracker_names_a_held_node_when_its_hold_limit_ends() -> None:
    tracker = JoinTracker(POLICY, since=T0 - 1)
    held = node("held", T0, taints=(Taint(CILIUM, "NoSchedule"),))
    tracker.update(held, None, "w", T0 + 1)
    tracker.update(node("free", T0), None, "w", T0 + 1)
    tracker.update(held, None, "w", T0 + 2)  # seen again: its hold's end is queued once
    assert tracker.advance(T0 + LIMIT - 1) == []
    assert tracker.advance(T0 + LIMIT) == ["held"]
    assert tracker.advance(T0 + LIMIT + 1) == []


def test_a_gate_first_seen_past_the_limit_queues_nothing() -> None:
    tracker = JoinTracker(POLICY, since=T0 - 1)
    tracker.update(node("late", T0, taints=(Taint(GATE, "NoSchedule"),)), None, "w", T0 + LIMIT)
    assert tracker.advance(T0 + LIMIT + 1) == []
