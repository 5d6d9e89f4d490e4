"""A new node's join, stage by stage, and the join SLO's judgement (pure; the time is passed in).

A node is *joining* for ``--join.window`` after its Node object was created. Its stages, each a
Unix time read from the objects the controller watches (none is nodesync's own invention):

- ``lease``: its Lease in kube-node-lease was created (kubelet creates it once it runs:
  the Lease's ``metadata.creationTimestamp``);
- ``ready``: its Ready condition was first seen True (that condition's ``lastTransitionTime``);
- ``network_ready``: its NetworkUnavailable condition is False (its ``lastTransitionTime``); a
  node without that condition (nothing in the cluster sets it) takes its ``ready`` time, since
  kubelet reports Ready only once the runtime says its network is ready;
- ``gates_cleared``: none of its readiness taints is left (:func:`is_readiness_taint`): when the
  controller saw the Node without them (the API keeps no removal time); a node first seen
  without any has its creation time (nothing held it);
- ``pod_running``: the first pod that is not a DaemonSet's (nor a static pod's mirror) runs on
  it: the earliest start of that pod's containers.

A stage keeps its first time: a node that flaps later does not move it.

Each stage reached is observed once, in its wave's histogram of durations from the Node's
creation, when the controller sees it reached, if it was reached after the tracker started
(``since``): a controller that starts again does not observe again what the one before it did.

A node held back by a readiness taint is *starting*, not failed, for ``--join.readiness-hold-limit``
after its creation (:func:`readiness_hold`): the controller exports it as held, and the rules
that act on a NotReady new node leave it alone meanwhile; past the limit it is a failed join like
any other, and a readiness taint still on a node that is Ready by then is reported as left.

The join SLO: a new node is judged once, *ready* (Ready within ``--join.ready-objective`` of
its creation) or *not_ready* (not Ready when the objective ran out, or deleted before it was
Ready). The judgement falls at the Ready time or at the objective's end, whichever comes first,
and counts only if it falls after ``since``, for the same reason as the histograms.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Final

from exporter.model.kube import LeaseInfo, NodeInfo, Taint

LEASE: Final = "lease"
READY: Final = "ready"
NETWORK_READY: Final = "network_ready"
GATES_CLEARED: Final = "gates_cleared"
POD_RUNNING: Final = "pod_running"
#: The stages, in the order a join usually reaches them (the label ``stage``).
STAGES: Final = (LEASE, READY, NETWORK_READY, GATES_CLEARED, POD_RUNNING)

#: The join SLO's outcomes (the label ``outcome``).
OUTCOME_READY: Final = "ready"
OUTCOME_NOT_READY: Final = "not_ready"
OUTCOMES: Final = (OUTCOME_READY, OUTCOME_NOT_READY)

#: Upper bounds of the stage-duration histograms' buckets, in seconds: from a fast join's
#: seconds to the scale-out window's 30 minutes; 300 s is the default objective.
STAGE_BUCKETS: Final = (
    5.0,
    10.0,
    20.0,
    30.0,
    45.0,
    60.0,
    90.0,
    120.0,
    180.0,
    240.0,
    300.0,
    450.0,
    600.0,
    900.0,
    1800.0,
)

#: node-readiness-controller's taints: every key under this prefix holds a node back on purpose.
READINESS_PREFIX: Final = "readiness.k8s.io/"

NETWORK_UNAVAILABLE: Final = "NetworkUnavailable"

#: A node's readiness hold (:func:`readiness_hold`): within the hold limit, starting; past it and
#: Ready, its readiness taints were left behind.
HELD: Final = "held"
LEFT: Final = "left"


@dataclass(frozen=True, slots=True)
class JoinPolicy:
    """How the controller follows a join (its flags: exporter.settings.joins)."""

    join_window: float = 1800.0  # a node is joining this long after its creation
    ready_objective: float = 300.0  # the join SLO: Ready within this long of the creation
    readiness_taints: tuple[str, ...] = (
        "node.cilium.io/agent-not-ready",
    )  # and readiness.k8s.io/*
    readiness_hold_limit: float = 1200.0  # a readiness taint holds a new node this long at most

    def __post_init__(self) -> None:
        if self.ready_objective > self.join_window:
            raise ValueError(
                f"--join.ready-objective ({self.ready_objective:g} s) must not exceed "
                f"--join.window ({self.join_window:g} s)"
            )
        if self.readiness_hold_limit > self.join_window:
            raise ValueError(
                f"--join.readiness-hold-limit ({self.readiness_hold_limit:g} s) must not exceed "
                f"--join.window ({self.join_window:g} s)"
            )


def is_readiness_taint(key: str, keys: Iterable[str]) -> bool:
    """A taint that holds a starting node back on purpose: node-readiness-controller's (the
    ``readiness.k8s.io/`` prefix) or one of the ``keys`` configured."""
    return key.startswith(READINESS_PREFIX) or key in keys


def readiness_gates(taints: Iterable[Taint], keys: Iterable[str]) -> tuple[str, ...]:
    """The keys of the node's readiness taints, sorted, each once."""
    configured = frozenset(keys)
    return tuple(sorted({t.key for t in taints if is_readiness_taint(t.key, configured)}))


def readiness_hold(
    gates: tuple[str, ...], *, ready: bool, created_at: float, now: float, hold_limit: float
) -> str | None:
    """:data:`HELD` while the node carries readiness taints (``gates``) within ``hold_limit`` of
    its creation, Ready or not: it is starting. Past the limit, :data:`LEFT` if it is Ready with
    them (a gate nobody removed), else None: a node still NotReady behind its gates is a failed
    join like any other, and a node without gates holds nothing."""
    if not gates:
        return None
    if now < created_at + hold_limit:
        return HELD
    return LEFT if ready else None


def node_hold(node: NodeInfo, policy: JoinPolicy, now: float) -> tuple[str | None, tuple[str, ...]]:
    """The node's :func:`readiness_hold` at ``now``, and its readiness taints' keys."""
    gates = readiness_gates(node.taints, policy.readiness_taints)
    ready = node.condition("Ready")
    hold = readiness_hold(
        gates,
        ready=ready is not None and ready.status == "True",
        created_at=node.created_at,
        now=now,
        hold_limit=policy.readiness_hold_limit,
    )
    return hold, gates


@dataclass(frozen=True, slots=True)
class JoinStages:
    """One joining node's stages (None: not reached, or not known) and the readiness taints it
    carries now."""

    created_at: float
    lease: float | None = None
    ready: float | None = None
    network_ready: float | None = None
    gates_cleared: float | None = None
    pod_running: float | None = None
    gates: tuple[str, ...] = ()

    def stage(self, name: str) -> float | None:
        at: float | None = getattr(self, name)
        return at

    def reached(self) -> tuple[tuple[str, float], ...]:
        """The stages reached, in :data:`STAGES` order, with their times."""
        return tuple((s, at) for s in STAGES if (at := self.stage(s)) is not None)


def _condition_time(node: NodeInfo, type_: str, status: str, fallback: float) -> float | None:
    cond = node.condition(type_)
    if cond is None or cond.status != status:
        return None
    return cond.last_transition if cond.last_transition is not None else fallback


def next_stages(
    stages: JoinStages,
    node: NodeInfo,
    lease: LeaseInfo | None,
    now: float,
    readiness_taints: Iterable[str],
    *,
    first_seen: bool,
) -> JoinStages:
    """The stages after seeing ``node`` and ``lease`` at ``now``: each stage not reached yet
    takes its time from the objects, a stage reached keeps its time."""
    gates = readiness_gates(node.taints, readiness_taints)
    lease_at = stages.lease
    if lease_at is None and lease is not None:
        lease_at = lease.created_at if lease.created_at is not None else now
    ready = stages.ready
    if ready is None:
        ready = _condition_time(node, "Ready", "True", now)
    network = stages.network_ready
    if network is None:
        if node.condition(NETWORK_UNAVAILABLE) is not None:
            network = _condition_time(node, NETWORK_UNAVAILABLE, "False", now)
        else:
            network = ready
    cleared = stages.gates_cleared
    if cleared is None and not gates:
        cleared = stages.created_at if first_seen else now
    return replace(
        stages,
        lease=lease_at,
        ready=ready,
        network_ready=network,
        gates_cleared=cleared,
        gates=gates,
    )


# ---------------------------------------------------------------- histograms


@dataclass(slots=True)
class Histogram:
    """Durations observed, per bucket of :data:`STAGE_BUCKETS` (not cumulative; the last
    count is above every bound), their sum and count."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(STAGE_BUCKETS) + 1))
    sum: float = 0.0
    count: int = 0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(STAGE_BUCKETS, seconds)] += 1
        self.sum += seconds
        self.count += 1

    def cumulative(self) -> list[int]:
        """Counts at or below each bound of :data:`STAGE_BUCKETS`, then at +Inf."""
        out, running = [], 0
        for n in self.counts:
            running += n
            out.append(running)
        return out


# ---------------------------------------------------------------- the tracker


@dataclass(slots=True)
class _Join:
    uid: str
    wave: str
    stages: JoinStages
    judged: bool = False
    hold_due: bool = False  # its hold limit's end is in the queue


class JoinTracker:
    """The joining nodes' stages, each wave's stage histograms and the join SLO's counts; the
    caller hands in every change of a Node, a Lease or a first running pod, and the time.

    Memory: one entry per joining node, dropped when its window ends (or it is deleted); one
    histogram per stage of each wave the caller keeps (:meth:`keep_waves`)."""

    def __init__(self, policy: JoinPolicy, *, since: float) -> None:
        self.policy = policy
        self.since = since
        self._joins: dict[str, _Join] = {}
        self._due: list[tuple[float, str, str]] = []  # (deadline, node, uid)
        self._hold_ends: list[tuple[float, str, str]] = []  # (hold limit's end, node, uid)
        self._histograms: dict[tuple[str, str], Histogram] = {}
        self.outcomes: dict[str, int] = dict.fromkeys(OUTCOMES, 0)

    def __len__(self) -> int:
        return len(self._joins)

    def stages(self, name: str) -> JoinStages | None:
        join = self._joins.get(name)
        return join.stages if join is not None else None

    def update(
        self, node: NodeInfo, lease: LeaseInfo | None, wave: str, now: float
    ) -> JoinStages | None:
        """The node's stages after this change; None for a node that is not joining (created
        more than the window ago when first seen, or its window ended)."""
        join = self._joins.get(node.name)
        if join is not None and join.uid != node.uid:
            self.remove(node.name, now)
            join = None
        if join is None:
            if node.created_at + self.policy.join_window <= now:
                return None
            join = _Join(node.uid, wave, JoinStages(node.created_at))
            self._joins[node.name] = join
            heapq.heappush(
                self._due, (node.created_at + self.policy.ready_objective, node.name, node.uid)
            )
            heapq.heappush(
                self._due, (node.created_at + self.policy.join_window, node.name, node.uid)
            )
            first_seen = True
        else:
            first_seen = False
        before = join.stages
        join.stages = next_stages(
            before, node, lease, now, self.policy.readiness_taints, first_seen=first_seen
        )
        self._observe(join, before)
        if not join.judged and join.stages.ready is not None:
            self._judge(join, now)
        hold_end = join.stages.created_at + self.policy.readiness_hold_limit
        if join.stages.gates and not join.hold_due and now < hold_end:
            join.hold_due = True
            heapq.heappush(self._hold_ends, (hold_end, node.name, node.uid))
        return join.stages

    def pod_running(self, name: str, at: float) -> JoinStages | None:
        """A pod that is not a DaemonSet's runs on node ``name`` since ``at``: the node's
        stages when that changed them, else None."""
        join = self._joins.get(name)
        if join is None or join.stages.pod_running is not None:
            return None
        before = join.stages
        join.stages = replace(before, pod_running=at)
        self._observe(join, before)
        return join.stages

    def remove(self, name: str, now: float) -> None:
        """The node was deleted: judged ``not_ready`` if it was not judged yet."""
        join = self._joins.pop(name, None)
        if join is not None and not join.judged:
            self._judge(join, now)

    def advance(self, now: float) -> list[str]:
        """Judge the nodes whose objective ran out, end the joins whose window ended: the
        names of those ended (their series go), and of the nodes held by readiness taints
        whose hold limit ran out (their hold changes: :func:`readiness_hold`)."""
        ended: list[str] = []
        while self._hold_ends and self._hold_ends[0][0] <= now:
            _, name, uid = heapq.heappop(self._hold_ends)
            join = self._joins.get(name)
            if join is not None and join.uid == uid:
                ended.append(name)
        while self._due and self._due[0][0] <= now:
            _, name, uid = heapq.heappop(self._due)
            join = self._joins.get(name)
            if join is None or join.uid != uid:
                continue
            if not join.judged:
                self._judge(join, now)
            if join.stages.created_at + self.policy.join_window <= now:
                del self._joins[name]
                ended.append(name)
        return list(dict.fromkeys(ended))

    def keep_waves(self, waves: Iterable[str]) -> None:
        """Forget the histograms of the waves not named (the wave tracker forgot them)."""
        kept = frozenset(waves)
        for key in [k for k in self._histograms if k[0] not in kept]:
            del self._histograms[key]

    def histograms(self) -> Mapping[tuple[str, str], Histogram]:
        """(wave, stage) -> its histogram, for the stages observed at least once."""
        return self._histograms

    # ------------------------------------------------------------------ internals

    def _observe(self, join: _Join, before: JoinStages) -> None:
        created = join.stages.created_at
        for stage in STAGES:
            at = join.stages.stage(stage)
            if at is None or before.stage(stage) is not None or at < self.since:
                continue
            histogram = self._histograms.get((join.wave, stage))
            if histogram is None:
                histogram = self._histograms[(join.wave, stage)] = Histogram()
            histogram.observe(max(0.0, at - created))

    def _judge(self, join: _Join, now: float) -> None:
        """Judge once: at the Ready time when that is within the objective, else at the
        objective's end (or the deletion, when that came first)."""
        created, ready = join.stages.created_at, join.stages.ready
        deadline = created + self.policy.ready_objective
        if ready is not None and ready <= deadline:
            outcome, at = OUTCOME_READY, ready
        elif ready is None and now < deadline:  # deleted before its objective ran out
            outcome, at = OUTCOME_NOT_READY, now
        else:
            outcome, at = OUTCOME_NOT_READY, deadline
        join.judged = True
        if at >= self.since:
            self.outcomes[outcome] += 1
