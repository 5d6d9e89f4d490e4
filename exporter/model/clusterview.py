"""The controller's cluster view: each Node joined with its Lease and its scale-out wave.

Pure: the caller hands in the Nodes and Leases (from the informers' stores), the time, and the
``WaveTracker`` that keeps wave sizes frozen from one view to the next.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from exporter.model.cohorts import BUILD_KEYS, node_cohorts
from exporter.model.health import NodeHealth, counts, node_health
from exporter.model.joins import (
    NETWORK_UNAVAILABLE,
    READINESS_PREFIX,
    JoinPolicy,
    JoinStages,
    node_hold,
)
from exporter.model.kube import (
    LEASE_NAMESPACE,
    TAINT_CLUSTER_AUTOSCALER,
    TAINT_NODESYNC,
    TAINT_NOT_READY,
    TAINT_UNREACHABLE,
    TAINT_UNSCHEDULABLE,
    LeaseInfo,
    NodeCondition,
    NodeInfo,
    Taint,
)
from exporter.model.waves import DEFAULT_GAP_SECONDS, Wave, WaveTracker

CONTROL_PLANE_LABELS = (
    "node-role.kubernetes.io/control-plane",
    "node-role.kubernetes.io/master",
)
PROTECTED_LABEL = "nodesync.io/protected"

# Taints by which another component says it owns the node's fate (it is draining, deleting or
# replacing it). nodesync never touches such a node.
OTHER_REMEDIATOR_TAINTS = frozenset(
    {
        # cluster-autoscaler: scale-down of this node is in progress. (Its soft
        # DeletionCandidateOfClusterAutoscaler taint only marks a candidate and is not listed.)
        TAINT_CLUSTER_AUTOSCALER,
        # Karpenter v1, and v1beta1 (v0.32 - v0.37): disruption (drift, consolidation, expiry).
        "karpenter.sh/disrupted",
        "karpenter.sh/disruption",
        # AWS Node Termination Handler, when it taints (spot interruption, maintenance, ASG).
        "aws-node-termination-handler/spot-itn",
        "aws-node-termination-handler/scheduled-maintenance",
        "aws-node-termination-handler/asg-lifecycle-termination",
        "aws-node-termination-handler/rebalance-recommendation",
        # GKE: the node is about to be preempted or shut down.
        "cloud.google.com/impending-node-termination",
        # Kubernetes non-graceful node shutdown: an operator or a remediator (e.g. medik8s'
        # self-node-remediation) declared the node out of service.
        "node.kubernetes.io/out-of-service",
    }
)

# The taints the view (and the metrics) keep: the node lifecycle controller's view of the node,
# cordoning, cluster-autoscaler's, and nodesync's own.
TAINTS_THAT_MATTER = frozenset(
    {
        TAINT_UNREACHABLE,
        TAINT_NOT_READY,
        TAINT_UNSCHEDULABLE,
        TAINT_CLUSTER_AUTOSCALER,
        TAINT_NODESYNC,
    }
)


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    created_at: float
    lease_renew_time: float | None  # None when the node has no Lease or it was never renewed
    conditions: tuple[NodeCondition, ...]
    unschedulable: bool
    taints_that_matter: tuple[Taint, ...]  # sorted by key, then effect; one per pair
    wave_id: str
    control_plane: bool  # labelled node-role.kubernetes.io/control-plane or /master
    protected: bool  # labelled nodesync.io/protected=true
    owned_by_other_remediator: bool  # carries one of OTHER_REMEDIATOR_TAINTS
    cordoned_by_nodesync: bool  # carries nodesync's own taint (nodesync.io/rollback)
    uid: str = ""
    join: JoinStages | None = None  # while the node is joining (exporter.model.joins)
    # its readiness taints' hold (exporter.model.joins.readiness_hold: held, left, or None)
    # and those taints' keys
    readiness_hold: str | None = None
    readiness_gates: tuple[str, ...] = ()
    # its cohorts (exporter.model.cohorts): (key, value) for each cohort key it has a value for
    cohorts: tuple[tuple[str, str], ...] = ()

    def condition(self, type_: str) -> NodeCondition | None:
        return next((c for c in self.conditions if c.type == type_), None)

    @property
    def health(self) -> NodeHealth:
        """What the guards judge the node by."""
        return node_health(self.conditions, self.created_at, self.lease_renew_time)


class HealthCounts(Protocol):
    """Established nodes and those of them failing (exporter.model.health), for a scale-out
    window and a Lease grace period, at a time."""

    def __call__(self, window: float, grace: float, now: float) -> tuple[int, int]: ...


class ClusterView:
    """Every node that exists, joined with its Lease and its wave, and the waves.

    Built from lists (:func:`build_view`), or handed out by a watch that keeps its parts
    current from events (exporter.controller.cluster): then ``health`` answers the
    correlated-failure guard's counts from an index kept current too, and nothing here looks at
    every node unless ``nodes`` is read (it is sorted on first use)."""

    __slots__ = ("_by_name", "_health", "_nodes", "_waves_by_id", "built_at", "waves")

    def __init__(
        self,
        built_at: float,
        nodes: Mapping[str, NodeView],
        waves: tuple[Wave, ...],
        *,
        health: HealthCounts | None = None,
    ) -> None:
        self.built_at = built_at
        self.waves = waves  # waves with live nodes, and open ones; by start time
        self._by_name = nodes
        self._health = health
        self._nodes: tuple[NodeView, ...] | None = None
        self._waves_by_id = {w.id: w for w in waves}

    @property
    def nodes(self) -> tuple[NodeView, ...]:
        """Every node, sorted by name."""
        if self._nodes is None:
            self._nodes = tuple(self._by_name[name] for name in sorted(self._by_name))
        return self._nodes

    def unordered(self) -> Iterable[NodeView]:
        """Every node, in no particular order: for what counts or groups them, without the sort
        ``nodes`` makes of a new view (a thousand names per executor pass and scrape)."""
        return self._by_name.values()

    @property
    def node_count(self) -> int:
        return len(self._by_name)

    def node(self, name: str) -> NodeView | None:
        return self._by_name.get(name)

    def wave(self, wave_id: str) -> Wave | None:
        return self._waves_by_id.get(wave_id)

    def established_failing(self, window: float, grace: float, now: float) -> tuple[int, int]:
        """Nodes established at ``now`` (joined ``window`` ago or earlier and did not start
        failing inside it), and how many of them fail (exporter.model.health)."""
        if self._health is not None:
            return self._health(window, grace, now)
        return counts((n.health for n in self._by_name.values()), now, window, grace)


#: The node conditions the view keeps: kubelet's own. Other types (node-problem-detector's, a
#: cloud's) are neither judged nor exported.
KUBELET_CONDITIONS = (
    "Ready",
    "MemoryPressure",
    "DiskPressure",
    "PIDPressure",
    "NetworkUnavailable",
)


#: The conditions the view reads whatever the collector switches: Ready (the rules' and the
#: guards'), NetworkUnavailable (a join's network_ready stage).
VIEW_CONDITIONS = ("Ready", NETWORK_UNAVAILABLE)

#: The taints the view reads: those that matter, and another remediator's; and every readiness
#: taint (:data:`VIEW_TAINT_PREFIXES`, and the keys of --join.readiness-taints).
VIEW_TAINTS = TAINTS_THAT_MATTER | OTHER_REMEDIATOR_TAINTS
VIEW_TAINT_PREFIXES = (READINESS_PREFIX,)


def view_labels(wave_label: str | None, cohort_keys: Iterable[str] = ()) -> frozenset[str]:
    """The label keys the view reads: control plane, protected, the wave label, and the
    cohort keys that are labels."""
    return frozenset(
        {
            *CONTROL_PLANE_LABELS,
            PROTECTED_LABEL,
            *([wave_label] if wave_label else []),
            *(k for k in cohort_keys if k not in BUILD_KEYS),
        }
    )


def node_leases(leases: Iterable[LeaseInfo]) -> dict[str, LeaseInfo]:
    """Node leases (namespace kube-node-lease) by node name; other leases are ignored."""
    return {lease.name: lease for lease in leases if lease.namespace == LEASE_NAMESPACE}


def _taints_that_matter(taints: Iterable[Taint]) -> tuple[Taint, ...]:
    """Sorted by key and effect; one per key and effect (the API server rejects duplicates)."""
    kept = {(t.key, t.effect): t for t in taints if t.key in TAINTS_THAT_MATTER}
    return tuple(kept[k] for k in sorted(kept))


def node_view(
    node: NodeInfo,
    lease: LeaseInfo | None,
    wave_id: str,
    join: JoinStages | None = None,
    *,
    readiness_hold: str | None = None,
    readiness_gates: tuple[str, ...] = (),
    cohort_keys: Iterable[str] = (),
) -> NodeView:
    taint_keys = {t.key for t in node.taints}
    return NodeView(
        name=node.name,
        created_at=node.created_at,
        lease_renew_time=lease.renew_time if lease is not None else None,
        conditions=node.conditions,
        unschedulable=node.unschedulable,
        taints_that_matter=_taints_that_matter(node.taints),
        wave_id=wave_id,
        control_plane=any(label in node.labels for label in CONTROL_PLANE_LABELS),
        protected=node.labels.get(PROTECTED_LABEL) == "true",
        owned_by_other_remediator=not taint_keys.isdisjoint(OTHER_REMEDIATOR_TAINTS),
        cordoned_by_nodesync=TAINT_NODESYNC in taint_keys,
        uid=node.uid,
        join=join,
        readiness_hold=readiness_hold,
        readiness_gates=readiness_gates if readiness_hold is not None else (),
        cohorts=node_cohorts(node.build, node.labels, cohort_keys),
    )


def build_view(
    nodes: Iterable[NodeInfo],
    leases: Iterable[LeaseInfo],
    *,
    wave_label: str | None,
    gap_seconds: float = DEFAULT_GAP_SECONDS,
    now: float,
    tracker: WaveTracker | None = None,
    joins: Mapping[str, JoinStages] | None = None,
    join_policy: JoinPolicy | None = None,
    cohort_keys: Iterable[str] = (),
) -> ClusterView:
    """The view of every node that exists now. Pass the same ``tracker`` to every build so wave
    sizes stay frozen; without one, waves are judged from these nodes alone. ``joins``: the
    joining nodes' stages, by name (exporter.model.joins); ``join_policy``: judge each node's
    readiness hold by it (none without); ``cohort_keys``: the keys of the nodes' cohorts
    (exporter.model.cohorts; none without)."""
    current = list(nodes)
    tracker = tracker if tracker is not None else WaveTracker()
    waves = tracker.snapshot(current, now=now, gap_seconds=gap_seconds, wave_label=wave_label)
    by_lease = node_leases(leases)
    joins = joins or {}
    views = {}
    for n in current:
        hold, gates = node_hold(n, join_policy, now) if join_policy is not None else (None, ())
        views[n.name] = node_view(
            n,
            by_lease.get(n.name),
            waves.node_wave[n.name],
            joins.get(n.name),
            readiness_hold=hold,
            readiness_gates=gates,
            cohort_keys=cohort_keys,
        )
    return ClusterView(now, views, waves.waves)
