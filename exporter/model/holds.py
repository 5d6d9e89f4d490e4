"""Why nothing happens: which guard holds a firing action alert that has no rollback running,
with the figure the guard judged and what would release it (pure; time passed in).

The guards' reasons (exporter.model.guards) are many and exact; an operator asks one question,
"what holds it?", so each maps to one of a few hold reasons (:data:`HOLD_REASONS`), the label
values of ``nodesync_alert_held`` (exporter.metrics.holds):

- ``budget``: the blast radius (``blast_radius_absolute``, ``blast_radius_fraction``);
- ``pause``: the correlated-failure guard (``correlated_failure``): the alert waits and is
  decided again at every pass, so it goes on by itself once the established nodes recover;
- ``cohort``: the cohort breaker (``cohort``: the nodes of a wave built alike that fail together,
  exporter.model.cohorts): the alert waits and is decided again at every pass, so it goes on by
  itself once fewer of the cohort fail;
- ``exemption``: a node nodesync never touches (``control_plane``, ``protected``,
  ``other_remediator``);
- ``window``: the node joined before the scale-out window (``scale_out_window``): not a failed
  join;
- ``dry_run``: the controller decided the alert with ``--rollback.dry-run``: it would have acted.

A refusal is final for the alert's episode (exporter.model.decision): what "would release it"
for a refused alert is what must change before its next episode is acted on. The figures are
judged again against the current view and budget, so a status line says how things are now.
Alerts the planner refused (no action, a missing label, an unknown node) are not held: there is
nothing a guard could release.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from dataclasses import dataclass
from typing import Final

from exporter.model import guards
from exporter.model.alerts import FIRING, Alert
from exporter.model.clusterview import ClusterView
from exporter.model.cohorts import CohortTable
from exporter.model.names import shown
from exporter.model.rfc3339 import format_time
from exporter.model.rollback import Action

BUDGET: Final = "budget"
PAUSE: Final = "pause"
COHORT: Final = "cohort"
EXEMPTION: Final = "exemption"
WINDOW: Final = "window"
DRY_RUN: Final = "dry_run"

#: Every hold reason, in the order an operator reads them.
HOLD_REASONS: Final = (BUDGET, PAUSE, COHORT, EXEMPTION, WINDOW, DRY_RUN)

#: The guard's refusal reason -> the hold reason it is reported as.
GUARD_HOLDS: Final = {
    guards.BLAST_RADIUS_ABSOLUTE: BUDGET,
    guards.BLAST_RADIUS_FRACTION: BUDGET,
    guards.CORRELATED_FAILURE: PAUSE,
    guards.COHORT: COHORT,
    guards.CONTROL_PLANE: EXEMPTION,
    guards.PROTECTED: EXEMPTION,
    guards.OTHER_REMEDIATOR: EXEMPTION,
    guards.SCALE_OUT_WINDOW: WINDOW,
}

_NEXT = "; its next episode is then acted on"


@dataclass(frozen=True, slots=True)
class Hold:
    """One firing action alert held back: by what (``reason``, and the ``guard``'s own reason),
    the ``figure`` judged, and what would ``release`` it."""

    alertname: str
    node: str
    reason: str  # one of HOLD_REASONS
    guard: str  # the guard's refusal reason, or dry_run
    figure: str
    release: str

    def line(self) -> str:
        """The status line ``nodesync plan`` prints and the controller logs."""
        return (
            f"{shown(self.alertname) or '(no alertname)'} on {shown(self.node) or '(no node)'}: "
            f"held by {self.reason} ({self.guard}): {self.figure}; released when {self.release}"
        )


def hold_reason(guard: str) -> str | None:
    """The hold reason of a guard's refusal reason; None for the planner's reasons."""
    return GUARD_HOLDS.get(guard)


def _budget(
    guard: str,
    node: str,
    view: ClusterView,
    state: guards.GuardState,
    policy: guards.GuardPolicy,
    now: float,
) -> tuple[str, str]:
    if guard == guards.BLAST_RADIUS_FRACTION:
        seen = view.node(node)
        wave = guards.wave_budget(view, state, policy, seen.wave_id if seen else "")
        return (
            f"{wave.used} of {wave.limit} node rollbacks of wave {wave.wave} used "
            f"(--guard.max-rollback-fraction {policy.max_rollback_fraction:g} of {wave.size} "
            "nodes)",
            "--guard.max-rollback-fraction is raised or a NodeRollback of the wave is deleted"
            + _NEXT,
        )
    window = policy.max_rollbacks_window
    used = len(state.nodes_in_window(now, window))
    frees = state.window_frees_at(now, window)
    when = f"at {format_time(frees)}" if frees is not None else "now"
    return (
        f"{used} of {policy.max_rollbacks} node rollbacks within {window:g} s used "
        "(--guard.max-rollbacks)",
        f"the oldest leaves the window ({when}) or --guard.max-rollbacks is raised" + _NEXT,
    )


def _pause(view: ClusterView, policy: guards.GuardPolicy, now: float) -> tuple[str, str]:
    c = guards.correlated_failure(view, policy, now)
    return (
        f"{c.failing} of {c.established} established nodes failing (pauses at "
        f"--guard.correlated-failure-fraction {policy.correlated_failure_fraction:g} and "
        f"--guard.correlated-failure-min-nodes {policy.correlated_failure_min_nodes})",
        "fewer established nodes fail: the alert is decided again at the next pass",
    )


def _cohort(node: str, view: ClusterView, policy: guards.GuardPolicy, table: CohortTable) -> str:
    seen = view.node(node)
    held = table.breaker(seen) if seen is not None else None
    if held is None:
        return "its cohort's breaker is closed now"
    c = held.cohort
    return (
        f"{c.failing.get(held.mode, 0)} of {c.nodes} nodes of cohort {c.key}={c.value} in wave "
        f"{c.wave} failing ({held.mode}; opens at --cohort.min-nodes "
        f"{policy.cohorts.cohort_min_nodes} and --cohort.fraction "
        f"{policy.cohorts.cohort_fraction:g})"
    )


_EXEMPTIONS: Final = {
    guards.CONTROL_PLANE: (
        "a control-plane node",
        "never: nodesync does not roll a control-plane node back",
    ),
    guards.PROTECTED: (
        "labelled nodesync.io/protected=true",
        "the label is removed" + _NEXT,
    ),
    guards.OTHER_REMEDIATOR: (
        "carries another remediator's taint",
        "that remediator is done and its taint removed" + _NEXT,
    ),
}


def hold_of(
    alert: Alert,
    guard: str,
    view: ClusterView,
    state: guards.GuardState,
    policy: guards.GuardPolicy,
    now: float,
    cohorts: CohortTable | None = None,
) -> Hold | None:
    """The hold of ``alert`` refused (or held back) with the guard's reason ``guard``, or
    decided in a dry run (``guard`` = :data:`DRY_RUN`); None when no guard holds it.
    ``cohorts``: the cohorts its figure is read from (exporter.model.guards.cohort_table; by
    default the view's as of ``now``)."""
    name = alert.labels.get("alertname", "")
    node = alert.node
    if guard == DRY_RUN:
        return Hold(
            name,
            node,
            DRY_RUN,
            DRY_RUN,
            f"would {alert.action or 'act'} (--rollback.dry-run)",
            "the controller runs without --rollback.dry-run" + _NEXT,
        )
    reason = hold_reason(guard)
    if reason == BUDGET:
        figure, release = _budget(guard, node, view, state, policy, now)
    elif reason == PAUSE:
        figure, release = _pause(view, policy, now)
    elif reason == COHORT:
        table = cohorts if cohorts is not None else guards.cohort_table(view, policy, now)
        figure = _cohort(node, view, policy, table)
        release = "fewer of the cohort fail: the alert is decided again at the next pass"
    elif reason == EXEMPTION:
        what, release = _EXEMPTIONS[guard]
        figure = f"node {node} is {what}"
    elif reason == WINDOW:
        seen = view.node(node)
        age = f"created {now - seen.created_at:.0f} s ago" if seen is not None else "gone"
        figure = (
            f"node {node} ({age}) joined more than --guard.scaleout-window "
            f"{policy.scaleout_window:g} s before its trouble began"
        )
        release = "never: an established node's failure is not a failed join"
    else:
        return None
    return Hold(name, node, reason, guard, figure, release)


def holds(
    decided: Iterable[tuple[Alert, str]],
    view: ClusterView,
    state: guards.GuardState,
    policy: guards.GuardPolicy,
    now: float,
    running: Container[str] = (),
    cohorts: CohortTable | None = None,
) -> tuple[Hold, ...]:
    """The holds of the firing action alerts among ``decided`` (each with the guard's reason
    it was refused or held back with, or dry_run) whose node has no rollback ``running``
    (the nodes with an active node-level rollback), by alert name and node. The cohort holds'
    figures come from one table (``cohorts``: the pass's, by default the view's as of ``now``),
    so that they cost one walk over a wave's nodes, not one per alert."""
    if cohorts is None:
        cohorts = guards.cohort_table(view, policy, now)
    found = []
    for alert, guard in decided:
        if alert.status != FIRING or alert.action in ("", Action.NONE.value):
            continue
        if alert.node in running:
            continue
        hold = hold_of(alert, guard, view, state, policy, now, cohorts)
        if hold is not None:
            found.append(hold)
    return tuple(sorted(found, key=lambda h: (h.alertname, h.node, h.reason)))
