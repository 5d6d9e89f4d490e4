"""The rollback guards: whether an accepted-looking plan may run now (pure; time passed in).
This package's face: the names callers use, from its modules ``policy`` (what the flags set),
``ledger`` (the rollbacks decided so far), ``budget`` (the blast radius left) and ``checks``
(the guards, in order: ``evaluate``).

``evaluate`` checks one plan against the cluster view, the plans accepted so far
(``GuardState``) and the policy (``GuardPolicy``, which the flags set), and returns a
``Refusal`` with a bounded ``reason`` or None. Guards, in the order they are checked:

- ``control_plane``, ``protected``, ``other_remediator``: nodes nodesync never touches (labels
  node-role.kubernetes.io/control-plane or /master; nodesync.io/protected=true; a taint of
  cluster-autoscaler, Karpenter, a node termination handler ...; see exporter.model.clusterview).
- ``scale_out_window``: only nodes that joined recently. The window is judged when the failure
  began, like the alerting rules do: a failing node by its view (Ready's last transition, or its
  last Lease renewal when the Lease is stale); otherwise by the alert's startsAt. A node created
  more than ``scaleout_window`` before that is refused.
- ``correlated_failure``: while at least ``correlated_failure_fraction`` (and at least
  ``correlated_failure_min_nodes``) of the *established* nodes fail, every plan waits. Established
  nodes joined before the scale-out window and did not start failing inside it (a failed join
  stays a failed join after its window closed). Failing: Ready is not True, or the Lease was not
  renewed within ``node_monitor_grace_period``. That is control-plane trouble, not a bad join.
- ``cohort``: a node rollback of a node whose cohort's breaker is open for the way it fails
  (exporter.model.cohorts: at least ``cohort_min_nodes`` and ``cohort_fraction`` of the nodes
  of its wave built alike fail that way) waits: what they were built from is the problem, and
  rolling them back one by one would only bring more of the same; other cohorts go on.
- ``blast_radius_fraction``: at most ``max_rollback_fraction`` of the node's wave (at least one
  node), over the lifetime of the wave. The wave's size is frozen when the wave closes
  (exporter.model.waves), so rolling nodes back never raises the cap.
- ``blast_radius_absolute``: at most ``max_rollbacks`` nodes rolled back within any sliding
  window of ``max_rollbacks_window``, whatever their wave.
The cohort breaker and blast radius apply to node rollbacks (``rollback_node``) only: evicting
one pod or cleaning a node's orphans does not take a node away. Every other guard applies to
every plan. ``correlated_failure`` and ``cohort`` are *deferring* reasons (see ``DEFERRING``):
the plan is not refused for good, it waits and is evaluated again. An alert about a node that
has a rollback already joins or escalates it (exporter.model.decision) instead of being judged
again. How many rollbacks go past their cordon and taint at once (``max_concurrent_rollbacks``)
is the executor's queue, not a refusal; the API write budget (the token bucket) is enforced by
the writer and only reported here.

The rollbacks decided so far (:class:`GuardState`) are the NodeRollbacks in the cluster, so a
controller that takes over after a failover counts what the one before it decided.
"""

from __future__ import annotations

from exporter.model.guards.budget import Budget, WaveBudget, budget, wave_budget, wave_limit
from exporter.model.guards.checks import (
    BLAST_RADIUS_ABSOLUTE,
    BLAST_RADIUS_FRACTION,
    COHORT,
    CONTROL_PLANE,
    CORRELATED_FAILURE,
    DEFERRING,
    OTHER_REMEDIATOR,
    PROTECTED,
    REASONS,
    SCALE_OUT_WINDOW,
    UNKNOWN_NODE,
    CorrelatedFailure,
    cohort_table,
    correlated_failure,
    evaluate,
    in_scaleout_window,
    never_touch,
    wave_cohorts,
)
from exporter.model.guards.ledger import Decided, GuardState
from exporter.model.guards.policy import GuardPolicy

__all__ = [
    "BLAST_RADIUS_ABSOLUTE",
    "BLAST_RADIUS_FRACTION",
    "COHORT",
    "CONTROL_PLANE",
    "CORRELATED_FAILURE",
    "DEFERRING",
    "OTHER_REMEDIATOR",
    "PROTECTED",
    "REASONS",
    "SCALE_OUT_WINDOW",
    "UNKNOWN_NODE",
    "Budget",
    "CorrelatedFailure",
    "Decided",
    "GuardPolicy",
    "GuardState",
    "WaveBudget",
    "budget",
    "cohort_table",
    "correlated_failure",
    "evaluate",
    "in_scaleout_window",
    "never_touch",
    "wave_budget",
    "wave_cohorts",
    "wave_limit",
]
