"""Cohorts: the nodes of a wave grouped by what they were built from, and the cohort breaker
(pure; the time is passed in).

A *cohort key* is one thing a node is built from: its kubelet's version, its container
runtime's, its OS image, its kernel (``status.nodeInfo``: :data:`BUILD_KEYS`), or a label
(instance type, zone, node pool). A node belongs to one cohort per key it has a value for: the
cohort ``(wave, key, value)``, e.g. every node of wave ``w`` whose OS image is ``X``, so that
one bad image, one bad kernel or one bad zone each make one cohort whatever the other keys say.

A node *fails* in a cohort when it has failed one way (:func:`failure_mode`: ``lease_lost``,
its kubelet silent; else ``not_ready``) for at least ``cohort_failing_for``: a node still
starting (NotReady until its CNI is up) is not failing yet.

The **cohort breaker** of a cohort is open for a way of failing when at least
``cohort_min_nodes`` of its nodes, and at least ``cohort_fraction`` of them, fail that way:
then it is not each node's problem but what they were built from, and rolling them back one by
one only makes the provisioner create more of the same. A node rollback of a node failing that
way in that cohort is held (:meth:`CohortTable.breaker`); other cohorts of the wave go on. The
breaker closes by itself when fewer fail (nodes recovered, or removed by a person).

Bounded: per wave and key, only the ``cohort_max_values`` values with the most nodes are
cohorts (ties by value); the nodes of the other values are in no cohort of that key. At most
:data:`MAX_KEYS` keys.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol

from exporter.model.health import NodeHealth, lease_stale

KUBELET_VERSION: Final = "kubelet_version"
CONTAINER_RUNTIME_VERSION: Final = "container_runtime_version"
OS_IMAGE: Final = "os_image"
KERNEL_VERSION: Final = "kernel_version"
#: The keys read from the Node's ``status.nodeInfo``; every other key is a label's.
BUILD_KEYS: Final = (KUBELET_VERSION, CONTAINER_RUNTIME_VERSION, OS_IMAGE, KERNEL_VERSION)
#: The labels of the default keys: instance type, zone, and the node pool as Karpenter, EKS,
#: GKE and AKS name it (a node carries one of the four at most).
DEFAULT_LABEL_KEYS: Final = (
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/zone",
    "karpenter.sh/nodepool",
    "eks.amazonaws.com/nodegroup",
    "cloud.google.com/gke-nodepool",
    "kubernetes.azure.com/agentpool",
)
DEFAULT_KEYS: Final = (*BUILD_KEYS, *DEFAULT_LABEL_KEYS)
MAX_KEYS: Final = 12

NOT_READY: Final = "not_ready"
LEASE_LOST: Final = "lease_lost"
#: The ways a node fails, as the breaker tells them apart (the label ``mode``).
MODES: Final = (NOT_READY, LEASE_LOST)

#: The build of a node: its values of :data:`BUILD_KEYS`, in that order ("" when not reported).
Build = tuple[str, str, str, str]
NO_BUILD: Final[Build] = ("", "", "", "")


@dataclass(frozen=True, slots=True)
class CohortPolicy:
    """The cohort breaker's policy (its flags: exporter.settings.cohorts). No keys: no cohorts,
    the breaker never opens."""

    cohort_keys: tuple[str, ...] = DEFAULT_KEYS
    cohort_min_nodes: int = 5
    cohort_fraction: float = 0.5
    cohort_failing_for: float = 300.0
    cohort_max_values: int = 10

    def __post_init__(self) -> None:
        if len(self.cohort_keys) > MAX_KEYS:
            raise ValueError(
                f"--cohort.keys: {len(self.cohort_keys)} keys, at most {MAX_KEYS} (each key's "
                "cohorts are series of their own)"
            )

    @property
    def label_keys(self) -> tuple[str, ...]:
        """The keys that are labels (the cluster view must keep them)."""
        return tuple(k for k in self.cohort_keys if k not in BUILD_KEYS)


@functools.lru_cache(maxsize=4096)
def _cohorts(pairs: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """One shared tuple per distinct set of cohorts: nodes built alike hold the same object."""
    return pairs


def node_cohorts(
    build: Build, labels: Mapping[str, str], keys: Iterable[str]
) -> tuple[tuple[str, str], ...]:
    """The node's (key, value) for each key it has a value for, in the keys' order."""
    pairs = []
    for key in keys:
        value = build[BUILD_KEYS.index(key)] if key in BUILD_KEYS else labels.get(key, "")
        if value:
            pairs.append((key, value))
    return _cohorts(tuple(pairs))


def failure_mode(health: NodeHealth, now: float, grace: float) -> tuple[str, float] | None:
    """How the node fails and since when (None while it does not): ``lease_lost`` while its
    Lease is stale (its kubelet is silent), since the last renewal or the Ready transition,
    whichever came first; else ``not_ready`` while Ready is not True, since its transition."""
    renew = health.lease_renew_time
    if renew is not None and lease_stale(renew, now, grace):
        since = renew if health.ready_since is None else min(renew, health.ready_since)
        return LEASE_LOST, since
    if health.ready_since is not None:
        return NOT_READY, health.ready_since
    return None


class Member(Protocol):
    """What the breaker needs of a node (the cluster view's NodeView has it)."""

    @property
    def wave_id(self) -> str: ...

    @property
    def cohorts(self) -> tuple[tuple[str, str], ...]: ...

    @property
    def health(self) -> NodeHealth: ...


@dataclass(frozen=True, slots=True)
class Cohort:
    """One cohort's figures: its nodes, and those failing for long enough, by way."""

    wave: str
    key: str
    value: str
    nodes: int
    failing: Mapping[str, int] = field(default_factory=dict)  # mode -> nodes

    def open(self, mode: str, policy: CohortPolicy) -> bool:
        """Whether its breaker is open for ``mode``."""
        failing = self.failing.get(mode, 0)
        return (
            failing >= policy.cohort_min_nodes
            and failing >= policy.cohort_fraction * self.nodes - 1e-9
        )

    def open_modes(self, policy: CohortPolicy) -> tuple[str, ...]:
        return tuple(m for m in MODES if self.open(m, policy))


def cohorts(
    members: Iterable[Member], policy: CohortPolicy, now: float, grace: float
) -> list[Cohort]:
    """Every cohort of the members' waves with its figures, by wave, key (in the policy's
    order; a key the policy does not name is none) and value; per wave and key the
    ``cohort_max_values`` largest."""
    sizes: dict[tuple[str, str, str], int] = {}
    failing: dict[tuple[str, str, str], dict[str, int]] = {}
    order = {k: i for i, k in enumerate(policy.cohort_keys)}
    for m in members:
        if not m.cohorts:
            continue
        mode = failure_mode(m.health, now, grace)
        counted = mode is not None and now - mode[1] >= policy.cohort_failing_for
        for key, value in m.cohorts:
            if key not in order:
                continue
            ident = (m.wave_id, key, value)
            sizes[ident] = sizes.get(ident, 0) + 1
            if counted:
                assert mode is not None
                by_mode = failing.setdefault(ident, {})
                by_mode[mode[0]] = by_mode.get(mode[0], 0) + 1
    by_group: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
    for ident in sizes:
        by_group.setdefault(ident[:2], []).append(ident)
    out: list[Cohort] = []
    for wave, key in sorted(by_group, key=lambda g: (g[0], order[g[1]])):
        kept = sorted(by_group[(wave, key)], key=lambda i: (-sizes[i], i[2]))
        out.extend(
            Cohort(wave, key, value, sizes[(wave, key, value)], failing.get((wave, key, value), {}))
            for _, _, value in sorted(kept[: policy.cohort_max_values], key=lambda i: i[2])
        )
    return out


@dataclass(frozen=True, slots=True)
class CohortHold:
    """A node rollback held by its cohort's open breaker."""

    cohort: Cohort
    mode: str

    def detail(self, policy: CohortPolicy) -> str:
        c = self.cohort
        return (
            f"{c.failing.get(self.mode, 0)} of {c.nodes} nodes of cohort {c.key}={c.value} in "
            f"wave {c.wave} fail the same way ({self.mode}, for "
            f"{policy.cohort_failing_for:g} s or more): not a node problem but what they were "
            f"built from (--cohort.min-nodes {policy.cohort_min_nodes}, --cohort.fraction "
            f"{policy.cohort_fraction:g}); its nodes are not rolled back one by one until fewer "
            "of them fail"
        )


class CohortTable:
    """The cohorts of the members' waves as of ``now``, each wave's computed once, when first
    asked for: a pure function of the members, the policy, ``now`` and ``grace``.

    One pass of the executor judges all its alerts against one table (and reports its holds from
    it), so that the pass walks each wave's nodes once, not once per alert: with hundreds of
    alerts held by a breaker in a wave of thousands of nodes, that is the difference between
    milliseconds and seconds of a busy event loop. Nothing is walked until a breaker is asked
    for."""

    __slots__ = ("_by_wave", "_computed", "_members", "grace", "now", "policy")

    def __init__(
        self, members: Iterable[Member], policy: CohortPolicy, now: float, grace: float
    ) -> None:
        self._members: Iterable[Member] | None = members
        self._by_wave: dict[str, list[Member]] = {}
        self._computed: dict[str, list[Cohort]] = {}
        self.policy = policy
        self.now = now
        self.grace = grace

    def of_wave(self, wave: str) -> list[Cohort]:
        """Every cohort of ``wave`` with its figures (:func:`cohorts`)."""
        found = self._computed.get(wave)
        if found is None:
            if self._members is not None:
                for m in self._members:
                    if m.cohorts:
                        self._by_wave.setdefault(m.wave_id, []).append(m)
                self._members = None
            found = cohorts(self._by_wave.get(wave, ()), self.policy, self.now, self.grace)
            self._computed[wave] = found
        return found

    def breaker(self, node: Member) -> CohortHold | None:
        """The open breaker that holds a rollback of ``node``: the first of its cohorts (in the
        keys' order) open for the way it fails. None when it does not fail, or no such cohort
        is open."""
        mode = failure_mode(node.health, self.now, self.grace)
        if mode is None or not node.cohorts:
            return None
        mine = frozenset(node.cohorts)
        for cohort in self.of_wave(node.wave_id):
            if (cohort.key, cohort.value) in mine and cohort.open(mode[0], self.policy):
                return CohortHold(cohort, mode[0])
        return None
