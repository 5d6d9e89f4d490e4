"""Which guard holds a firing action alert (exporter.model.holds), as tables: each guard's
refusal decided as the controller decides it, the hold reason reported for it, the figure and
what would release it; and the alerts that are not held."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from exporter.model import guards, planner
from exporter.model.alerts import Alert
from exporter.model.clusterview import ClusterView, build_view
from exporter.model.decision import PLAN, Decision, decide
from exporter.model.guards import GuardPolicy, GuardState, cohort_table
from exporter.model.holds import (
    BUDGET,
    COHORT,
    DRY_RUN,
    EXEMPTION,
    GUARD_HOLDS,
    HOLD_REASONS,
    PAUSE,
    WINDOW,
    Hold,
    hold_of,
    hold_reason,
    holds,
)
from exporter.model.kube import NodeCondition, NodeInfo, Taint
from exporter.model.rfc3339 import format_time
from exporter.model.rollback import Action
from exporter.settings.policy import default_policy
from tests.controller.builders import T0, lease, node

MIN = 60.0
NOW = T0 + 10 * MIN
POLICY = default_policy()
OLD = T0 - 86_400


def failing(name: str, created: float = T0, since: float | None = None, **kw: object) -> NodeInfo:
    """A node NotReady since ``since`` (30 s after its creation unless told)."""
    since = created + 30 if since is None else since
    return node(
        name,
        created,
        conditions=(NodeCondition("Ready", "False", last_transition=since),),
        **kw,  # type: ignore[arg-type]
    )


def healthy_old(name: str) -> NodeInfo:
    return node(name, OLD, conditions=(NodeCondition("Ready", "True", last_transition=OLD),))


def alert(name: str = "new-1", action: str = "rollback_node", status: str = "firing") -> Alert:
    labels = {"alertname": "NodesyncNewNodeNotReady", "nodesync_action": action, "node": name}
    return Alert(f"fp-{name}", status, labels, starts_at=NOW - 2 * MIN)


@dataclass(frozen=True)
class Case:
    nodes: tuple[NodeInfo, ...]
    policy: GuardPolicy = POLICY
    rolled_back: tuple[str, ...] = ()  # nodes of the wave rolled back a minute ago
    dry_run: bool = False
    cohort_keys: tuple[str, ...] = ()  # the view groups the nodes by these


WAVE = tuple(failing(f"new-{i}") for i in range(1, 11))
OLD_NODES = tuple(healthy_old(f"old-{i}") for i in range(1, 5))
#: The wave built from one bad image (every node of it failing for 9.5 minutes).
BAD_IMAGE = tuple(replace(n, build=("v1.30.2", "containerd://1.7.20", "bad", "6.1")) for n in WAVE)
#: Three of the four established nodes started failing 3 minutes ago: a control-plane blip.
BLIP = (*OLD_NODES[:1], *(failing(f"old-{i}", OLD, since=NOW - 3 * MIN) for i in (2, 3, 4)))


def _view(case: Case) -> ClusterView:
    names = [n.name for n in case.nodes]
    leases = [lease(n, NOW) for n in names]
    return build_view(case.nodes, leases, wave_label=None, now=NOW, cohort_keys=case.cohort_keys)


def _state(case: Case, view: ClusterView) -> GuardState:
    state = GuardState()
    for name in case.rolled_back:
        seen = view.node(name)
        assert seen is not None
        state.accept_decided(f"r-{name}", name, Action.ROLLBACK_NODE, seen.wave_id, NOW - MIN)
    return state


def hold_for(case: Case, about: Alert | None = None) -> Hold | None:
    """The alert decided as the controller decides it, then its hold."""
    about = about or alert()
    view = _view(case)
    state = _state(case, view)
    decision = decide(about, view, state, case.policy, NOW)
    if decision.refusal is not None:
        guard = decision.refusal.reason
    elif case.dry_run:
        guard = DRY_RUN
    else:
        return None
    [found] = holds([(about, guard)], view, state, case.policy, NOW) or [None]
    return found


@pytest.mark.parametrize(
    ("case", "reason", "guard"),
    [
        pytest.param(Case((*WAVE, *OLD_NODES)), None, None, id="allowed: nothing holds it"),
        pytest.param(
            Case((failing("new-1", labels={"nodesync.io/protected": "true"}), *OLD_NODES)),
            EXEMPTION, "protected", id="protected",
        ),
        pytest.param(
            Case((failing("new-1", labels={"node-role.kubernetes.io/control-plane": ""}),)),
            EXEMPTION, "control_plane", id="control-plane",
        ),
        pytest.param(
            Case((failing("new-1", taints=(Taint("karpenter.sh/disrupted", "NoSchedule"),)),)),
            EXEMPTION, "other_remediator", id="another-remediator",
        ),
        pytest.param(
            Case((failing("new-1", created=OLD, since=NOW - 5 * MIN), *OLD_NODES)),
            WINDOW, "scale_out_window", id="an-old-node",
        ),
        pytest.param(
            Case((*WAVE, *BLIP)),
            PAUSE, "correlated_failure", id="established-nodes-fail",
        ),
        pytest.param(
            Case((*WAVE, *OLD_NODES), rolled_back=("new-2",)),
            BUDGET, "blast_radius_fraction", id="the-wave's-fraction",
        ),
        pytest.param(
            Case(
                (*WAVE, *OLD_NODES),
                policy=replace(POLICY, max_rollbacks=1, max_rollback_fraction=1.0),
                rolled_back=("new-2",),
            ),
            BUDGET, "blast_radius_absolute", id="the-absolute-cap",
        ),
        pytest.param(
            Case((*WAVE, *OLD_NODES), dry_run=True), DRY_RUN, DRY_RUN, id="dry-run",
        ),
        pytest.param(
            Case((*BAD_IMAGE, *OLD_NODES), cohort_keys=("os_image",)),
            COHORT, "cohort", id="a-bad-image",
        ),
    ],
)  # fmt: skip
def test_the_reason_chosen_for_each_guard(case: Case, reason: str | None, guard: str) -> None:
    found = hold_for(case)
    if reason is None:
        assert found is None
        return
    assert found is not None
    assert (found.reason, found.guard) == (reason, guard)
    assert (found.alertname, found.node) == ("NodesyncNewNodeNotReady", "new-1")
    assert found.line().startswith(f"NodesyncNewNodeNotReady on new-1: held by {reason} ({guard}):")


def test_every_guard_reason_but_an_unknown_node_has_a_hold_reason() -> None:
    assert {hold_reason(r) for r in guards.REASONS} - {None} == set(GUARD_HOLDS.values())
    assert [r for r in guards.REASONS if hold_reason(r) is None] == [guards.UNKNOWN_NODE]
    assert all(hold_reason(r) is None for r in planner.REASONS)
    assert set(HOLD_REASONS) == {*GUARD_HOLDS.values(), DRY_RUN}
    assert GUARD_HOLDS[guards.COHORT] == COHORT


def test_a_cohort_hold_names_the_cohort_and_its_figures() -> None:
    held = hold_for(Case((*BAD_IMAGE, *OLD_NODES), cohort_keys=("os_image",)))
    assert held is not None
    assert held.figure.startswith("10 of 10 nodes of cohort os_image=bad in wave ")
    assert held.figure.endswith(
        "failing (not_ready; opens at --cohort.min-nodes 5 and --cohort.fraction 0.5)"
    )
    assert held.release.startswith("fewer of the cohort fail")


def test_the_figures_and_what_releases_them() -> None:
    fraction = hold_for(Case((*WAVE, *OLD_NODES), rolled_back=("new-2",)))
    assert fraction is not None
    assert fraction.figure.startswith("1 of 1 node rollbacks of wave ")
    assert "(--guard.max-rollback-fraction 0.1 of 10 nodes)" in fraction.figure
    assert fraction.release.startswith("--guard.max-rollback-fraction is raised")
    absolute = hold_for(
        Case(
            (*WAVE, *OLD_NODES),
            policy=replace(POLICY, max_rollbacks=1, max_rollback_fraction=1.0),
            rolled_back=("new-2",),
        )
    )
    assert absolute is not None
    window = POLICY.max_rollbacks_window
    assert (
        absolute.figure == f"1 of 1 node rollbacks within {window:g} s used (--guard.max-rollbacks)"
    )
    assert f"(at {format_time(NOW - MIN + window)})" in absolute.release
    pause = hold_for(Case((*WAVE, *BLIP)))
    assert pause is not None
    assert pause.figure.startswith("3 of 4 established nodes failing")
    assert "decided again at the next pass" in pause.release
    old = hold_for(Case((failing("new-1", created=OLD, since=NOW - 5 * MIN), *OLD_NODES)))
    assert old is not None
    assert old.release.startswith("never")


@pytest.mark.parametrize(
    ("about", "guard", "running"),
    [
        pytest.param(alert(status="resolved"), "protected", (), id="resolved"),
        pytest.param(alert(action="none"), "protected", (), id="report-only"),
        pytest.param(alert(action=""), "protected", (), id="no-action-label"),
        pytest.param(alert(), "protected", ("new-1",), id="a-rollback-runs-on-the-node"),
        pytest.param(alert(), "unknown_node", (), id="the-node-is-gone"),
        pytest.param(alert(), "missing_label", (), id="a-planner-refusal"),
    ],
)
def test_alerts_that_are_not_held(about: Alert, guard: str, running: tuple[str, ...]) -> None:
    case = Case((failing("new-1", labels={"nodesync.io/protected": "true"}),))
    view = _view(case)
    assert holds([(about, guard)], view, GuardState(), POLICY, NOW, running) == ()


def test_holds_are_listed_by_alert_and_node() -> None:
    case = Case((*WAVE,))
    view = _view(case)
    decided = [(alert(f"new-{i}"), "control_plane") for i in (3, 1, 2)]
    found = holds(decided, view, GuardState(), POLICY, NOW)
    assert [h.node for h in found] == ["new-1", "new-2", "new-3"]


GOOD_BUILD = ("v1.30.2", "containerd://1.7.20", "good", "6.1")
#: Beside the bad image, 4 of 10 nodes of a good image fail (under the breaker's 5), 10 are fine.
MIXED = (
    *BAD_IMAGE,
    *(replace(failing(f"good-{i}"), build=GOOD_BUILD) for i in range(4)),
    *(
        replace(n, build=GOOD_BUILD)
        for n in (
            node(f"good-{i}", T0, conditions=(NodeCondition("Ready", "True", last_transition=T0),))
            for i in range(4, 20)
        )
    ),
    *OLD_NODES,
)


def counted(decision: Decision, state: GuardState) -> Decision:
    """The decision, its plan counted in ``state`` as the controller counts it."""
    if decision.plan is not None and decision.verdict == PLAN:
        state.accept(f"r-{decision.plan.node}", decision.plan, NOW)
    return decision


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(Case((*BAD_IMAGE, *OLD_NODES), cohort_keys=("os_image",)), id="a-bad-image"),
        pytest.param(Case(MIXED, cohort_keys=("os_image", "kernel_version")), id="mixed-images"),
        pytest.param(
            Case(MIXED, policy=replace(POLICY, max_rollback_fraction=1.0),
                 cohort_keys=("os_image",)),
            id="mixed-images-a-larger-budget",
        ),
        pytest.param(Case((*BAD_IMAGE, *BLIP), cohort_keys=("os_image",)), id="paused"),
        pytest.param(Case((*BAD_IMAGE, *OLD_NODES)), id="no-cohort-keys"),
        pytest.param(
            Case((*BAD_IMAGE, *OLD_NODES), rolled_back=("new-2",), dry_run=True,
                 cohort_keys=("os_image",)),
            id="dry-run",
        ),
    ],
)  # fmt: skip
def test_a_pass_decides_and_holds_as_each_alert_judged_alone_did(case: Case) -> None:
    """One cohort table for the pass's alerts and holds: the same decisions and holds as when
    each alert's cohorts were computed anew (the table's reference)."""
    view = _view(case)
    about = [alert(n.name) for n in case.nodes]
    table = cohort_table(view, case.policy, NOW)
    alone, shared = _state(case, view), _state(case, view)
    per_alert, per_pass = [], []
    for a in about:  # in order, each plan counted against the next one's budget
        per_alert.append(counted(decide(a, view, alone, case.policy, NOW), alone))
        per_pass.append(counted(decide(a, view, shared, case.policy, NOW, table), shared))
    assert per_pass == per_alert
    decided = [(d.alert, d.refusal.reason if d.refusal is not None else DRY_RUN) for d in per_pass]
    alone_holds = [hold_of(a, g, view, alone, case.policy, NOW) for a, g in decided]
    expected = tuple(
        sorted(
            (h for h in alone_holds if h is not None), key=lambda h: (h.alertname, h.node, h.reason)
        )
    )
    assert holds(decided, view, shared, case.policy, NOW, (), table) == expected
    assert expected  # every case holds something
