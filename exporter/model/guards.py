"""The rollback guards: whether an accepted-looking plan may run now (pure; time passed in).

``evaluate`` checks one plan against the cluster view, the plans accepted so far
(``GuardState``) and the policy (the flags), and returns a ``Refusal`` with a bounded ``reason``
or None. Guards, in the order they are checked:

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
- ``in_progress``: a rollback of the same node is already running.
- ``blast_radius_fraction``: at most ``max_rollback_fraction`` of the node's wave (at least one
  node), over the lifetime of the wave. The wave's size is frozen when the wave closes
  (exporter.model.waves), so rolling nodes back never raises the cap.
- ``blast_radius_absolute``: at most ``max_rollbacks`` nodes rolled back within any sliding
  window of ``max_rollbacks_window``, whatever their wave.
- ``concurrency``: at most ``max_concurrent_rollbacks`` rollbacks run at once.

Blast radius, ``in_progress`` and concurrency apply to node rollbacks (``rollback_node``) only:
evicting one pod or cleaning a node's orphans does not take a node away. Every other guard applies
to every plan. ``correlated_failure`` and ``concurrency`` are *deferring* reasons (see
``DEFERRING``): the plan is not refused for good, it waits and is evaluated again. The API write
budget (the token bucket) is enforced by the writer and only reported here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from exporter.model.clusterview import (
    CONTROL_PLANE_LABELS,
    OTHER_REMEDIATOR_TAINTS,
    PROTECTED_LABEL,
    ClusterView,
    NodeView,
)
from exporter.model.kube import NodeCondition, NodeInfo
from exporter.model.rollback import Action, Plan, Refusal
from exporter.settings.declare import setting
from exporter.settings.values import (
    BOOLEAN,
    COUNT,
    FRACTION,
    POSITIVE_COUNT,
    POSITIVE_DURATION,
)

CONTROL_PLANE = "control_plane"
PROTECTED = "protected"
OTHER_REMEDIATOR = "other_remediator"
SCALE_OUT_WINDOW = "scale_out_window"
CORRELATED_FAILURE = "correlated_failure"
IN_PROGRESS = "in_progress"
BLAST_RADIUS_ABSOLUTE = "blast_radius_absolute"
BLAST_RADIUS_FRACTION = "blast_radius_fraction"
CONCURRENCY = "concurrency"
UNKNOWN_NODE = "unknown_node"

REASONS = (
    UNKNOWN_NODE,
    CONTROL_PLANE,
    PROTECTED,
    OTHER_REMEDIATOR,
    SCALE_OUT_WINDOW,
    CORRELATED_FAILURE,
    IN_PROGRESS,
    BLAST_RADIUS_ABSOLUTE,
    BLAST_RADIUS_FRACTION,
    CONCURRENCY,
)

# Reasons that hold a plan back for now rather than refuse it: evaluate it again later.
DEFERRING = frozenset({CORRELATED_FAILURE, CONCURRENCY})

# Fractions are compared with this tolerance, so that 0.1 of 100 nodes is 10, not 9.
_EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class GuardPolicy:
    """What a rollback may do, as the flags say (shared by the controller and ``plan``)."""

    delete_nodes: bool = setting(
        "--delete-nodes",
        "false",
        "end a node rollback by deleting the Node",
        BOOLEAN,
    )
    scaleout_window: float = setting(
        "--scaleout-window",
        "30m",
        "only nodes created at most this long before their trouble began are rolled back",
        POSITIVE_DURATION,
    )
    max_rollbacks: int = setting(
        "--max-rollbacks",
        "10",
        "at most this many nodes rolled back within --max-rollbacks-window, all waves together",
        COUNT,
    )
    max_rollbacks_window: float = setting(
        "--max-rollbacks-window",
        "1h",
        "the sliding window --max-rollbacks counts in",
        POSITIVE_DURATION,
    )
    max_rollback_fraction: float = setting(
        "--max-rollback-fraction",
        "0.1",
        "at most this fraction of a scale-out wave is rolled back (at least one node)",
        FRACTION,
    )
    correlated_failure_fraction: float = setting(
        "--correlated-failure-fraction",
        "0.3",
        "pause every action while at least this fraction of the established nodes fail",
        FRACTION,
    )
    correlated_failure_min_nodes: int = setting(
        "--correlated-failure-min-nodes",
        "2",
        "... and at least this many established nodes fail",
        POSITIVE_COUNT,
    )
    node_monitor_grace_period: float = setting(
        "--node-monitor-grace-period",
        "50s",
        "a Lease older than this is stale (kube-controller-manager's flag of that name)",
        POSITIVE_DURATION,
    )
    max_concurrent_rollbacks: int = setting(
        "--max-concurrent-rollbacks",
        "3",
        "node rollbacks running at once; further ones wait",
        POSITIVE_COUNT,
    )


# ---------------------------------------------------------------- node health


def lease_stale(lease_renew_time: float | None, now: float, grace: float) -> bool:
    """The Lease was renewed, but longer than ``grace`` ago. A node without a Lease is judged by
    its Ready condition alone."""
    return lease_renew_time is not None and now - lease_renew_time > grace


def is_failing(
    conditions: Iterable[NodeCondition], lease_renew_time: float | None, now: float, grace: float
) -> bool:
    """Ready is not True (False, Unknown, not reported), or the Lease is stale."""
    ready = next((c for c in conditions if c.type == "Ready"), None)
    return ready is None or ready.status != "True" or lease_stale(lease_renew_time, now, grace)


def is_recovered(
    conditions: Iterable[NodeCondition], lease_renew_time: float | None, now: float, grace: float
) -> bool:
    """Ready is True and the Lease was renewed within ``grace``."""
    ready = next((c for c in conditions if c.type == "Ready"), None)
    return (
        ready is not None
        and ready.status == "True"
        and lease_renew_time is not None
        and now - lease_renew_time <= grace
    )


def failing_since(node: NodeView, now: float, grace: float) -> float | None:
    """Since when the node has been failing (None while it is healthy): Ready's last transition
    when Ready is not True (creation when unknown), the last renewal when the Lease is stale;
    the earlier of the two."""
    since: list[float] = []
    ready = node.condition("Ready")
    if ready is None or ready.status != "True":
        since.append(
            ready.last_transition
            if ready is not None and ready.last_transition is not None
            else node.created_at
        )
    if lease_stale(node.lease_renew_time, now, grace) and node.lease_renew_time is not None:
        since.append(node.lease_renew_time)
    return min(since) if since else None


def in_scaleout_window(
    node: NodeView, alert_starts_at: float, now: float, policy: GuardPolicy
) -> bool:
    """The node joined less than the scale-out window before its trouble began."""
    since = failing_since(node, now, policy.node_monitor_grace_period)
    if since is not None:
        reference = min(since, now)
    elif node.created_at <= alert_starts_at <= now:
        reference = alert_starts_at
    else:
        reference = now
    return reference - node.created_at < policy.scaleout_window


# ---------------------------------------------------------------- correlated failure


@dataclass(frozen=True, slots=True)
class CorrelatedFailure:
    established: int  # nodes outside their scale-out window that did not fail inside it
    failing: int  # of those, failing now
    paused: bool

    @property
    def fraction(self) -> float:
        return self.failing / self.established if self.established else 0.0


def is_established(node: NodeView, now: float, policy: GuardPolicy) -> bool:
    if now - node.created_at < policy.scaleout_window:
        return False
    since = failing_since(node, now, policy.node_monitor_grace_period)
    return since is None or since - node.created_at >= policy.scaleout_window


def correlated_failure(view: ClusterView, policy: GuardPolicy, now: float) -> CorrelatedFailure:
    """Whether established nodes fail together (then every rollback pauses). Without
    established nodes (a brand-new cluster) the guard cannot judge and does not pause."""
    grace = policy.node_monitor_grace_period
    established = [n for n in view.nodes if is_established(n, now, policy)]
    failing = sum(
        1 for n in established if is_failing(n.conditions, n.lease_renew_time, now, grace)
    )
    paused = (
        bool(established)
        and failing >= max(1, policy.correlated_failure_min_nodes)
        and failing / len(established) + _EPSILON >= policy.correlated_failure_fraction
    )
    return CorrelatedFailure(established=len(established), failing=failing, paused=paused)


# ---------------------------------------------------------------- bookkeeping


@dataclass(slots=True)
class _Rollback:
    node: str
    wave: str
    accepted_at: float
    running: bool


@dataclass(slots=True)
class GuardState:
    """Node rollbacks accepted so far (keyed by plan), for blast radius and concurrency.

    The executor rebuilds it from the journal after a restart (``accept`` every accepted node
    rollback again, with its time, and ``finish`` those that ended)."""

    _rollbacks: dict[str, _Rollback] = field(default_factory=dict)

    def accept(self, key: str, plan: Plan, now: float, *, running: bool = True) -> None:
        """Count an accepted plan. Only node rollbacks count; ``running=False`` for a plan that
        will not run (dry run, or one that already ended)."""
        if plan.action is not Action.ROLLBACK_NODE:
            return
        self._rollbacks[key] = _Rollback(plan.node, plan.wave, now, running)

    def finish(self, key: str) -> None:
        """The plan ended: it no longer runs, but its node still counts against the budget."""
        rollback = self._rollbacks.get(key)
        if rollback is not None:
            rollback.running = False

    def release(self, key: str) -> None:
        """The plan ended without touching its node (cancelled before its first step): it does
        not count against the budget."""
        self._rollbacks.pop(key, None)

    def running(self) -> int:
        return sum(1 for r in self._rollbacks.values() if r.running)

    def running_on(self, node: str) -> bool:
        return any(r.running and r.node == node for r in self._rollbacks.values())

    def nodes_in_window(self, now: float, window: float) -> set[str]:
        return {r.node for r in self._rollbacks.values() if now - r.accepted_at < window}

    def nodes_in_wave(self, wave: str) -> set[str]:
        return {r.node for r in self._rollbacks.values() if r.wave == wave}


# ---------------------------------------------------------------- budget


def wave_limit(size: int, fraction: float) -> int:
    """Nodes of a wave of ``size`` nodes that may be rolled back: the fraction, at least one."""
    return max(1, math.floor(size * fraction + _EPSILON))


@dataclass(frozen=True, slots=True)
class WaveBudget:
    wave: str
    size: int
    limit: int
    used: int

    @property
    def remaining(self) -> int:
        return max(0, self.limit - self.used)


@dataclass(frozen=True, slots=True)
class Budget:
    absolute_limit: int
    absolute_used: int
    waves: tuple[WaveBudget, ...]  # waves with a node inside its scale-out window, by start

    @property
    def absolute_remaining(self) -> int:
        return max(0, self.absolute_limit - self.absolute_used)

    @property
    def wave_remaining(self) -> int | None:
        """The smallest budget left among the waves that can still be rolled back (None when
        there is none)."""
        return min((w.remaining for w in self.waves), default=None)


def _wave_size(view: ClusterView, wave_id: str) -> int:
    wave = next((w for w in view.waves if w.id == wave_id), None)
    if wave is not None:
        return wave.size
    return sum(1 for n in view.nodes if n.wave_id == wave_id)


def wave_budget(
    view: ClusterView, state: GuardState, policy: GuardPolicy, wave_id: str
) -> WaveBudget:
    size = _wave_size(view, wave_id)
    return WaveBudget(
        wave=wave_id,
        size=size,
        limit=wave_limit(size, policy.max_rollback_fraction),
        used=len(state.nodes_in_wave(wave_id)),
    )


def budget(view: ClusterView, state: GuardState, policy: GuardPolicy, now: float) -> Budget:
    young = {n.wave_id for n in view.nodes if now - n.created_at < policy.scaleout_window}
    return Budget(
        absolute_limit=policy.max_rollbacks,
        absolute_used=len(state.nodes_in_window(now, policy.max_rollbacks_window)),
        waves=tuple(wave_budget(view, state, policy, w.id) for w in view.waves if w.id in young),
    )


# ---------------------------------------------------------------- evaluate


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
    plan: Plan, view: ClusterView, state: GuardState, policy: GuardPolicy, now: float
) -> Refusal | None:
    """None when the plan may run now; else the first guard that says no."""
    node = view.node(plan.node)
    if node is None:
        return Refusal(UNKNOWN_NODE, f"node {plan.node} does not exist")
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
    if state.running_on(node.name):
        return Refusal(IN_PROGRESS, f"a rollback of node {node.name} is already running")
    wave = wave_budget(view, state, policy, node.wave_id)
    if node.name not in state.nodes_in_wave(node.wave_id) and wave.used >= wave.limit:
        return Refusal(
            BLAST_RADIUS_FRACTION,
            f"{wave.used} of {wave.size} nodes of wave {node.wave_id} were rolled back "
            f"(--max-rollback-fraction {policy.max_rollback_fraction:g} allows {wave.limit})",
        )
    rolled = state.nodes_in_window(now, policy.max_rollbacks_window)
    if node.name not in rolled and len(rolled) >= policy.max_rollbacks:
        return Refusal(
            BLAST_RADIUS_ABSOLUTE,
            f"{len(rolled)} nodes were rolled back within {policy.max_rollbacks_window:g} s "
            f"(--max-rollbacks {policy.max_rollbacks})",
        )
    if state.running() >= policy.max_concurrent_rollbacks:
        return Refusal(
            CONCURRENCY,
            f"{state.running()} rollbacks are running "
            f"(--max-concurrent-rollbacks {policy.max_concurrent_rollbacks})",
        )
    return None
