"""The guards, checked in order by :func:`evaluate` (see exporter.model.guards): nodes never
touched, the scale-out window, correlated failure, the cohort breaker, the blast radius. Each
refusal has a bounded ``reason`` (REASONS)."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.model import health
from exporter.model.clusterview import (
    CONTROL_PLANE_LABELS,
    OTHER_REMEDIATOR_TAINTS,
    PROTECTED_LABEL,
    ClusterView,
    NodeView,
)
from exporter.model.cohorts import Cohort, CohortTable, cohorts
from exporter.model.guards.budget import wave_budget
from exporter.model.guards.ledger import GuardState
from exporter.model.guards.policy import EPSILON, GuardPolicy
from exporter.model.kube import NodeInfo
from exporter.model.rollback import Action, Plan, Refusal

CONTROL_PLANE = "control_plane"
PROTECTED = "protected"
OTHER_REMEDIATOR = "other_remediator"
SCALE_OUT_WINDOW = "scale_out_window"
CORRELATED_FAILURE = "correlated_failure"
BLAST_RADIUS_ABSOLUTE = "blast_radius_absolute"
BLAST_RADIUS_FRACTION = "blast_radius_fraction"
COHORT = "cohort"
UNKNOWN_NODE = "unknown_node"

REASONS = (
    UNKNOWN_NODE,
    CONTROL_PLANE,
    PROTECTED,
    OTHER_REMEDIATOR,
    SCALE_OUT_WINDOW,
    CORRELATED_FAILURE,
    COHORT,
    BLAST_RADIUS_ABSOLUTE,
    BLAST_RADIUS_FRACTION,
)

# Reasons that hold a plan back for now rather than refuse it: evaluate it again later.
DEFERRING = frozenset({CORRELATED_FAILURE, COHORT})


def in_scaleout_window(
    node: NodeView, alert_starts_at: float, now: float, policy: GuardPolicy
) -> bool:
    """The node joined less than the scale-out window before its trouble began."""
    since = health.failing_since(node.health, now, policy.node_monitor_grace_period)
    if since is not None:
        reference = min(since, now)
    elif node.created_at <= alert_starts_at <= now:
        reference = alert_starts_at
    else:
        reference = now
    return reference - node.created_at < policy.scaleout_window


@dataclass(frozen=True, slots=True)
class CorrelatedFailure:
    established: int  # nodes outside their scale-out window that did not fail inside it
    failing: int  # of those, failing now
    paused: bool

    @property
    def fraction(self) -> float:
        return self.failing / self.established if self.established else 0.0


def correlated_failure(view: ClusterView, policy: GuardPolicy, now: float) -> CorrelatedFailure:
    """Whether established nodes fail together (then every rollback pauses). Without
    established nodes (a brand-new cluster) the guard cannot judge and does not pause. The
    counts come from the view (a watch keeps them current: no node is looked at here)."""
    established, failing = view.established_failing(
        policy.scaleout_window, policy.node_monitor_grace_period, now
    )
    paused = (
        established > 0
        and failing >= max(1, policy.correlated_failure_min_nodes)
        and failing / established + EPSILON >= policy.correlated_failure_fraction
    )
    return CorrelatedFailure(established=established, failing=failing, paused=paused)


def wave_cohorts(
    view: ClusterView, policy: GuardPolicy, now: float, table: CohortTable | None = None
) -> list[Cohort]:
    """The cohorts of the waves that can still be rolled back (a node inside its scale-out
    window), with their figures (exporter.model.cohorts), for the metrics: from ``table`` (a
    pass's :func:`cohort_table`, whose figures are as of its time) when given, so that reading
    them again costs no walk over the nodes; else computed from the view as of ``now``."""
    at_risk = {
        w.id
        for w in view.waves
        if w.newest_created is not None and now - w.newest_created < policy.scaleout_window
    }
    if not at_risk or not policy.cohorts.cohort_keys:
        return []
    if table is not None:
        return [c for wave in sorted(at_risk) for c in table.of_wave(wave)]
    members = (n for n in view.nodes if n.wave_id in at_risk)
    return cohorts(members, policy.cohorts, now, policy.node_monitor_grace_period)


def cohort_table(view: ClusterView, policy: GuardPolicy, now: float) -> CohortTable:
    """The cohorts of the view's waves as of ``now``, for the cohort breaker: one table per
    pass, shared by every alert the pass judges (nothing is walked until a breaker is asked
    for). The figures do not depend on the nodes' order: they are walked unsorted."""
    return CohortTable(view.unordered(), policy.cohorts, now, policy.node_monitor_grace_period)


def _never_touch(
    name: str, control_plane: bool, protected: bool, other_remediator: bool
) -> Refusal | None:
    if control_plane:
        return Refusal(CONTROL_PLANE, f"node {name} is a control-plane node")
    if protected:
        return Refusal(PROTECTED, f"node {name} is labelled {PROTECTED_LABEL}=true")
    if other_remediator:
        return Refusal(OTHER_REMEDIATOR, f"node {name} carries another remediator's taint")
    return None


def never_touch(node: NodeInfo) -> Refusal | None:
    """The same as the view's flags, for a Node read live (re-checked before every step)."""
    return _never_touch(
        node.name,
        any(label in node.labels for label in CONTROL_PLANE_LABELS),
        node.labels.get(PROTECTED_LABEL) == "true",
        any(t.key in OTHER_REMEDIATOR_TAINTS for t in node.taints),
    )


def evaluate(
    plan: Plan,
    view: ClusterView,
    state: GuardState,
    policy: GuardPolicy,
    now: float,
    cohorts: CohortTable | None = None,
) -> Refusal | None:
    """None when the plan may run now; else the first guard that says no. ``cohorts``: the
    pass's :func:`cohort_table` (by default one of the view as of ``now``)."""
    node = view.node(plan.node)
    if node is None:
        return Refusal(UNKNOWN_NODE, f"node {plan.node} does not exist")
    gone_by = state.gone_by(node.uid)
    if gone_by is not None:
        return Refusal(
            UNKNOWN_NODE,
            f"node {plan.node} (uid {node.uid}) exists no more: rollback {gone_by} deleted it "
            "or found it gone",
        )
    refusal = _never_touch(
        node.name, node.control_plane, node.protected, node.owned_by_other_remediator
    )
    if refusal is not None:
        return refusal
    if not in_scaleout_window(node, plan.alert_starts_at, now, policy):
        return Refusal(
            SCALE_OUT_WINDOW,
            f"node {node.name} joined more than {policy.scaleout_window:g} s before its "
            "trouble began: not a failed join",
        )
    correlated = correlated_failure(view, policy, now)
    if correlated.paused:
        return Refusal(
            CORRELATED_FAILURE,
            f"{correlated.failing} of {correlated.established} established nodes are failing: "
            "control-plane trouble suspected, every rollback waits",
        )
    if plan.action is not Action.ROLLBACK_NODE:
        return None
    if cohorts is None:
        cohorts = cohort_table(view, policy, now)
    held = cohorts.breaker(node)
    if held is not None:
        return Refusal(COHORT, held.detail(policy.cohorts))
    wave = wave_budget(view, state, policy, node.wave_id)
    if node.name not in state.nodes_in_wave(node.wave_id) and wave.used >= wave.limit:
        return Refusal(
            BLAST_RADIUS_FRACTION,
            f"{wave.used} of {wave.size} nodes of wave {node.wave_id} were rolled back "
            f"(--guard.max-rollback-fraction {policy.max_rollback_fraction:g} allows {wave.limit})",
        )
    rolled = state.nodes_in_window(now, policy.max_rollbacks_window)
    if node.name not in rolled and len(rolled) >= policy.max_rollbacks:
        return Refusal(
            BLAST_RADIUS_ABSOLUTE,
            f"{len(rolled)} nodes were rolled back within {policy.max_rollbacks_window:g} s "
            f"(--guard.max-rollbacks {policy.max_rollbacks})",
        )
    return None
