"""The rollback guards: whether an accepted-looking plan may run now (pure; time passed in).

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
- ``blast_radius_fraction``: at most ``max_rollback_fraction`` of the node's wave (at least one
  node), over the lifetime of the wave. The wave's size is frozen when the wave closes
  (exporter.model.waves), so rolling nodes back never raises the cap.
- ``blast_radius_absolute``: at most ``max_rollbacks`` nodes rolled back within any sliding
  window of ``max_rollbacks_window``, whatever their wave.
Blast radius applies to node rollbacks (``rollback_node``) only: evicting one pod or cleaning a
node's orphans does not take a node away. Every other guard applies to every plan.
``correlated_failure`` is a *deferring* reason (see ``DEFERRING``): the plan is not refused for
good, it waits and is evaluated again. An alert about a node that has a rollback already joins
or escalates it (exporter.model.decision) instead of being judged again. How many rollbacks go
past their cordon and taint at once (``max_concurrent_rollbacks``) is the executor's queue, not a
refusal; the API write budget (the token bucket) is enforced by the writer and only reported
here.

The rollbacks decided so far (:class:`GuardState`) are the NodeRollbacks in the cluster, so a
controller that takes over after a failover counts what the one before it decided.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from exporter.model import health
from exporter.model.clusterview import (
    CONTROL_PLANE_LABELS,
    OTHER_REMEDIATOR_TAINTS,
    PROTECTED_LABEL,
    ClusterView,
    NodeView,
)
from exporter.model.drain import DrainPolicy
from exporter.model.kube import NodeCondition, NodeInfo
from exporter.model.rollback import Action, NodeRollback, Phase, Plan, Refusal
from exporter.model.rollback_state import touched

CONTROL_PLANE = "control_plane"
PROTECTED = "protected"
OTHER_REMEDIATOR = "other_remediator"
SCALE_OUT_WINDOW = "scale_out_window"
CORRELATED_FAILURE = "correlated_failure"
BLAST_RADIUS_ABSOLUTE = "blast_radius_absolute"
BLAST_RADIUS_FRACTION = "blast_radius_fraction"
UNKNOWN_NODE = "unknown_node"

REASONS = (
    UNKNOWN_NODE,
    CONTROL_PLANE,
    PROTECTED,
    OTHER_REMEDIATOR,
    SCALE_OUT_WINDOW,
    CORRELATED_FAILURE,
    BLAST_RADIUS_ABSOLUTE,
    BLAST_RADIUS_FRACTION,
)

# Reasons that hold a plan back for now rather than refuse it: evaluate it again later.
DEFERRING = frozenset({CORRELATED_FAILURE})

# Fractions are compared with this tolerance, so that 0.1 of 100 nodes is 10, not 9.
_EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class GuardPolicy:
    """What a rollback may do (shared by the controller and ``plan``; the flags that set it are
    declared in exporter.settings.policy)."""

    delete_nodes: bool  # end a node rollback by deleting the Node
    scaleout_window: float  # seconds: only nodes created this long before their trouble
    max_rollbacks: int  # nodes rolled back within max_rollbacks_window, all waves together
    max_rollbacks_window: float  # seconds
    max_rollback_fraction: float  # of a scale-out wave (at least one node)
    correlated_failure_fraction: float  # of the established nodes failing: every plan waits
    correlated_failure_min_nodes: int  # ... and at least this many of them
    node_monitor_grace_period: float  # seconds: a Lease older than this is stale
    max_concurrent_rollbacks: int  # node rollbacks past their cordon and taint at once
    drain: DrainPolicy  # which pods a drain evicts


# ---------------------------------------------------------------- node health


def lease_stale(lease_renew_time: float | None, now: float, grace: float) -> bool:
    """The Lease was renewed, but longer than ``grace`` ago. A node without a Lease is judged by
    its Ready condition alone."""
    return health.lease_stale(lease_renew_time, now, grace)


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
    return health.failing_since(node.health, now, grace)


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
    return health.is_established(
        node.health, now, policy.scaleout_window, policy.node_monitor_grace_period
    )


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
        and failing / established + _EPSILON >= policy.correlated_failure_fraction
    )
    return CorrelatedFailure(established=established, failing=failing, paused=paused)


# ---------------------------------------------------------------- bookkeeping


@dataclass(frozen=True, slots=True)
class Decided:
    """What the guards need of one rollback decided so far."""

    node: str
    action: Action
    wave: str
    accepted_at: float
    active: bool  # not finished
    counts: bool  # counts against the blast radius (a node rollback that did or may act)
    pod: tuple[str, str] = ("", "")  # (namespace, name) of an evict_pod rollback

    @property
    def node_level(self) -> bool:
        return self.action in (Action.ROLLBACK_NODE, Action.CLEANUP_ORPHANS)


@dataclass(slots=True)
class GuardState:
    """The rollbacks decided so far, by name: the NodeRollbacks in the cluster (:meth:`of`),
    plus what this pass decided (:meth:`accept`)."""

    _decided: dict[str, Decided] = field(default_factory=dict)

    @classmethod
    def of(cls, rollbacks: Iterable[NodeRollback]) -> GuardState:
        state = cls()
        for r in rollbacks:
            node_rollback = r.spec.action is Action.ROLLBACK_NODE
            pod = (r.spec.pod.namespace, r.spec.pod.name) if r.spec.pod is not None else ("", "")
            state._decided[r.name] = Decided(
                node=r.spec.node,
                action=r.spec.action,
                wave=r.spec.wave,
                accepted_at=r.spec.decision.decided_at,
                active=r.active,
                counts=node_rollback
                and (r.status.phase is not Phase.CANCELLED or touched(r.status)),
                pod=pod,
            )
        return state

    def accept(self, key: str, plan: Plan, now: float, *, active: bool = True) -> None:
        """Count a plan decided now (before its NodeRollback is in the cluster's view)."""
        pod = next(((s.namespace, s.pod) for s in plan.steps if s.pod), ("", ""))
        self.accept_decided(key, plan.node, plan.action, plan.wave, now, active=active, pod=pod)

    def accept_decided(
        self,
        key: str,
        node: str,
        action: Action,
        wave: str,
        at: float,
        *,
        active: bool = True,
        pod: tuple[str, str] = ("", ""),
    ) -> None:
        """Count a decision made at ``at`` (e.g. one of a dry run, which made no object)."""
        self._decided[key] = Decided(
            node=node,
            action=action,
            wave=wave,
            accepted_at=at,
            active=active,
            counts=action is Action.ROLLBACK_NODE,
            pod=pod,
        )

    def active_on(
        self, node: str, *, node_level: bool, pod: tuple[str, str] = ("", "")
    ) -> tuple[str, Decided] | None:
        """The active rollback an alert about ``node`` would join: a node-level one, or (for
        an eviction) one evicting the same pod."""
        for name, d in sorted(self._decided.items()):
            if not d.active or d.node != node:
                continue
            if d.node_level and (node_level or d.action is Action.ROLLBACK_NODE):
                return name, d
            if not node_level and not d.node_level and d.pod == pod:
                return name, d
        return None

    def running(self) -> int:
        """Active node rollbacks."""
        return sum(1 for d in self._decided.values() if d.active and d.counts)

    def nodes_in_window(self, now: float, window: float) -> set[str]:
        return {d.node for d in self._decided.values() if d.counts and now - d.accepted_at < window}

    def nodes_in_wave(self, wave: str) -> set[str]:
        return {d.node for d in self._decided.values() if d.counts and d.wave == wave}


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
    wave = view.wave(wave_id)
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
    return Budget(
        absolute_limit=policy.max_rollbacks,
        absolute_used=len(state.nodes_in_window(now, policy.max_rollbacks_window)),
        waves=tuple(
            wave_budget(view, state, policy, w.id)
            for w in view.waves
            if w.newest_created is not None and now - w.newest_created < policy.scaleout_window
        ),
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
