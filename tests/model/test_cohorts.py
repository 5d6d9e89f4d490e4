"""Cohorts and the cohort breaker as tables: which cohorts a node is in, how it fails, when a
cohort's breaker holds its node rollbacks, and the bound on cohorts."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace

import pytest

from exporter.model.clusterview import ClusterView, build_view
from exporter.model.cohorts import (
    DEFAULT_KEYS,
    LEASE_LOST,
    NOT_READY,
    Cohort,
    CohortHold,
    CohortPolicy,
    CohortTable,
    Member,
    cohorts,
    failure_mode,
    node_cohorts,
)
from exporter.model.guards import cohort_table, wave_cohorts
from exporter.model.health import NodeHealth
from exporter.model.kube import NodeCondition, NodeInfo
from exporter.settings.policy import default_policy
from tests.controller.builders import T0, lease, node

POLICY = CohortPolicy()
GRACE = 50.0
MIN = 60.0
NOW = T0 + 20 * MIN
GOOD = ("v1.30.2", "containerd://1.7.20", "Ubuntu 22.04.4 LTS", "5.15.0-1057-aws")
BAD = ("v1.30.2", "containerd://1.7.20", "Ubuntu 22.04.5 LTS", "5.15.0-1057-aws")
ZONE = "topology.kubernetes.io/zone"


@pytest.mark.parametrize(
    ("build", "labels", "keys", "expected"),
    [
        pytest.param(GOOD, {}, ("os_image",), (("os_image", GOOD[2]),), id="one-build-key"),
        pytest.param(
            GOOD,
            {ZONE: "eu-1a", "other": "x"},
            (ZONE, "kernel_version"),
            ((ZONE, "eu-1a"), ("kernel_version", GOOD[3])),
            id="keys-in-their-order",
        ),
        pytest.param(("", "", "", ""), {}, DEFAULT_KEYS, (), id="nothing-reported"),
        pytest.param(GOOD, {ZONE: ""}, (ZONE,), (), id="empty-label"),
        pytest.param(GOOD, {ZONE: "a"}, (), (), id="no-keys"),
    ],
)
def test_a_node_is_in_one_cohort_per_key_it_has_a_value_for(
    build: tuple[str, str, str, str],
    labels: dict[str, str],
    keys: tuple[str, ...],
    expected: tuple[tuple[str, str], ...],
) -> None:
    assert node_cohorts(build, labels, keys) == expected


@pytest.mark.parametrize(
    ("health", "expected"),
    [
        pytest.param(NodeHealth(T0, None, NOW - 5), None, id="healthy"),
        pytest.param(NodeHealth(T0, T0 + 30, NOW - 5), (NOT_READY, T0 + 30), id="not-ready"),
        pytest.param(NodeHealth(T0, None, NOW - 120), (LEASE_LOST, NOW - 120), id="silent"),
        pytest.param(
            NodeHealth(T0, NOW - 60, NOW - 120), (LEASE_LOST, NOW - 120), id="silent-then-unknown"
        ),
        pytest.param(NodeHealth(T0, T0 + 30, None), (NOT_READY, T0 + 30), id="no-lease"),
    ],
)
def test_how_a_node_fails(health: NodeHealth, expected: tuple[str, float] | None) -> None:
    assert failure_mode(health, NOW, GRACE) == expected


def member(
    name: str,
    build: tuple[str, str, str, str] = GOOD,
    *,
    failing_since: float | None = None,
    created: float = T0,
    zone: str = "a",
) -> NodeInfo:
    status = "True" if failing_since is None else "False"
    since = failing_since if failing_since is not None else created + 30
    info = node(
        name,
        created,
        labels={ZONE: zone},
        conditions=(NodeCondition("Ready", status, last_transition=since),),
    )
    return replace(info, build=build)


def view_of(nodes: list[NodeInfo], silent: dict[str, float] | None = None) -> ClusterView:
    silent = silent or {}
    leases = [lease(n.name, silent.get(n.name, NOW - 5)) for n in nodes]
    return build_view(nodes, leases, wave_label=None, now=NOW, cohort_keys=DEFAULT_KEYS)


def wave(bad_failing: int, bad: int = 20, good: int = 180, **failing: float) -> list[NodeInfo]:
    """A wave of ``good`` nodes of one image and ``bad`` of another, the first
    ``bad_failing`` of those NotReady since ``failing.get("since", 10 minutes ago)``."""
    since = failing.get("since", NOW - 10 * MIN)
    out = [member(f"good-{i:03}") for i in range(good)]
    out += [
        member(f"bad-{i:03}", BAD, failing_since=since if i < bad_failing else None)
        for i in range(bad)
    ]
    return out


def held(view: ClusterView, name: str, policy: CohortPolicy = POLICY) -> str:
    n = view.node(name)
    assert n is not None
    hold = CohortTable(view.nodes, policy, NOW, GRACE).breaker(n)
    if hold is None:
        return ""
    c = hold.cohort
    return f"{c.key}={c.value} {c.failing.get(hold.mode, 0)}/{c.nodes} {hold.mode}"


@pytest.mark.parametrize(
    ("nodes", "name", "expected"),
    [
        pytest.param(
            wave(18), "bad-000", f"os_image={BAD[2]} 18/20 not_ready", id="18-of-20-bad-image"
        ),
        pytest.param(wave(10), "bad-000", f"os_image={BAD[2]} 10/20 not_ready", id="exactly-half"),
        pytest.param(wave(9), "bad-000", "", id="under-half"),
        pytest.param(wave(4, bad=5), "bad-000", "", id="under-min-nodes"),
        pytest.param(wave(5, bad=5), "bad-000", f"os_image={BAD[2]} 5/5 not_ready", id="min-nodes"),
        pytest.param(wave(18, since=NOW - 2 * MIN), "bad-000", "", id="still-starting"),
        pytest.param(
            [*wave(18), member("good-failing", failing_since=NOW - 10 * MIN)],
            "good-failing",
            "",
            id="a-failing-node-of-a-good-cohort",
        ),
        pytest.param(
            [
                *[member(f"z-{i}", zone="b", failing_since=NOW - 10 * MIN) for i in range(6)],
                *[member(f"ok-{i}", zone="a") for i in range(100)],
            ],
            "z-0",
            f"{ZONE}=b 6/6 not_ready",
            id="a-failing-zone",
        ),
    ],
)
def test_the_breaker_holds_the_rollbacks_of_a_cohort_that_fails_together(
    nodes: list[NodeInfo], name: str, expected: str
) -> None:
    assert held(view_of(nodes), name) == expected


def test_only_the_same_way_of_failing_counts() -> None:
    nodes = [member(f"n-{i}", BAD, failing_since=NOW - 10 * MIN) for i in range(20)]
    silent = {f"n-{i}": NOW - 10 * MIN for i in range(12)}  # 12 silent, 8 only NotReady
    view = view_of(nodes, silent)
    assert held(view, "n-0").endswith("12/20 lease_lost")
    assert held(view, "n-19") == ""  # 8 of 20 NotReady with a live Lease: under half


def test_other_waves_and_policies() -> None:
    later = [member(f"late-{i}", BAD, created=T0 + 5 * MIN) for i in range(20)]
    view = build_view(
        [*wave(10, good=0), *later],
        [],
        wave_label=None,
        gap_seconds=60,
        now=NOW,
        cohort_keys=DEFAULT_KEYS,
    )
    assert len(view.waves) == 2
    assert held(view, "bad-000").endswith("10/20 not_ready")  # its own wave's 20, not 40
    assert held(view, "bad-000", replace(POLICY, cohort_fraction=0.6)) == ""
    assert held(view, "bad-000", replace(POLICY, cohort_keys=())) == ""


def test_cohorts_are_bounded_per_wave_and_key() -> None:
    nodes = [
        member(f"n-{v:02}-{i}", zone=f"z{v:02}", failing_since=NOW - 10 * MIN)
        for v in range(12)
        for i in range(v + 1)  # zone zNN has NN + 1 nodes
    ]
    view = view_of(nodes)
    policy = replace(POLICY, cohort_keys=(ZONE,), cohort_min_nodes=1)
    found = cohorts(view.nodes, policy, NOW, GRACE)
    assert [c.value for c in found] == [f"z{v:02}" for v in range(2, 12)]  # the 10 largest
    assert held(view, "n-00-0", policy) == ""  # its zone is no cohort
    assert held(view, "n-11-0", policy) == f"{ZONE}=z11 12/12 not_ready"


def test_at_most_twelve_keys() -> None:
    with pytest.raises(ValueError, match="at most 12"):
        CohortPolicy(cohort_keys=tuple(f"k{i}" for i in range(13)))


def breaker_per_alert(
    node: Member, members: Iterable[Member], policy: CohortPolicy, now: float, grace: float
) -> CohortHold | None:
    """The breaker as it was judged before the table: every cohort of the node's wave computed
    again from all the members, for each alert (the reference the table must agree with)."""
    mode = failure_mode(node.health, now, grace)
    if mode is None or not node.cohorts:
        return None
    mine = frozenset(node.cohorts)
    for cohort in cohorts((m for m in members if m.wave_id == node.wave_id), policy, now, grace):
        if (cohort.key, cohort.value) in mine and cohort.open(mode[0], policy):
            return CohortHold(cohort, mode[0])
    return None


def two_waves() -> ClusterView:
    later = [member(f"late-{i}", BAD, created=T0 + 5 * MIN) for i in range(20)]
    nodes = [*wave(10, good=30), *later, member("bare", ("", "", "", ""), failing_since=T0)]
    return build_view(nodes, [], wave_label=None, gap_seconds=60, now=NOW, cohort_keys=DEFAULT_KEYS)


@pytest.mark.parametrize(
    ("view", "policy"),
    [
        pytest.param(view_of(wave(18)), POLICY, id="18-of-20-bad-image"),
        pytest.param(view_of(wave(9)), POLICY, id="under-half"),
        pytest.param(view_of(wave(18, since=NOW - 2 * MIN)), POLICY, id="still-starting"),
        pytest.param(
            view_of(
                [member(f"n-{i}", BAD, failing_since=NOW - 10 * MIN) for i in range(20)],
                {f"n-{i}": NOW - 10 * MIN for i in range(12)},
            ),
            POLICY,
            id="two-ways-of-failing",
        ),
        pytest.param(two_waves(), POLICY, id="two-waves-and-a-node-without-a-build"),
        pytest.param(two_waves(), replace(POLICY, cohort_keys=()), id="no-keys"),
        pytest.param(
            view_of(
                [
                    member(f"n-{v:02}-{i}", zone=f"z{v:02}", failing_since=NOW - 10 * MIN)
                    for v in range(12)
                    for i in range(v + 1)
                ]
            ),
            replace(POLICY, cohort_keys=(ZONE,), cohort_min_nodes=1),
            id="bounded-values",
        ),
        pytest.param(view_of([]), POLICY, id="no-nodes"),
    ],
)
def test_one_table_per_pass_holds_exactly_what_each_alert_judged_alone_held(
    view: ClusterView, policy: CohortPolicy
) -> None:
    table = CohortTable(view.nodes, policy, NOW, GRACE)
    for n in view.nodes:
        assert table.breaker(n) == breaker_per_alert(n, view.nodes, policy, NOW, GRACE), n.name


class Walks:
    """Members that count how often they are walked."""

    def __init__(self, members: Iterable[Member]) -> None:
        self.members = list(members)
        self.walks = 0

    def __iter__(self) -> Iterator[Member]:
        self.walks += 1
        return iter(self.members)


def test_a_table_walks_the_nodes_once_however_many_breakers_are_asked_for() -> None:
    view = two_waves()
    walks = Walks(view.nodes)
    table = CohortTable(walks, POLICY, NOW, GRACE)
    assert walks.walks == 0  # nothing is walked until a breaker is asked for
    held_nodes = [n.name for n in view.nodes if table.breaker(n) is not None]
    assert held_nodes == [f"bad-{i:03}" for i in range(10)]
    assert walks.walks == 1
    assert all(isinstance(c, Cohort) for c in table.of_wave(view.nodes[0].wave_id))
    assert walks.walks == 1


@pytest.mark.parametrize(
    "window",
    [
        pytest.param(30 * MIN, id="both-waves-at-risk"),
        pytest.param(17 * MIN, id="the-later-wave-at-risk"),
        pytest.param(10 * MIN, id="no-wave-at-risk"),
    ],
)
def test_the_metrics_read_the_same_cohorts_from_a_pass_table(window: float) -> None:
    view = two_waves()
    policy = replace(default_policy(), scaleout_window=window, node_monitor_grace_period=GRACE)
    table = cohort_table(view, policy, NOW)
    expected = wave_cohorts(view, policy, NOW)
    assert wave_cohorts(view, policy, NOW, table) == expected
    assert {c.wave for c in expected} == {
        w.id for w in view.waves if w.newest_created is not None and NOW - w.newest_created < window
    }
