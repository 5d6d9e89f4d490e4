"""A scenario expanded into concrete nodes, their pods and their faults (pure, deterministic).

- Old nodes are named ``<prefix>-000`` ...; wave nodes ``<wave>-000`` ...; the real node keeps
  its name and joins its wave ``join_spread_seconds`` after the wave's start (after the wave's
  last simulated node).
- Wave node ``i`` of ``n`` joins at ``start_seconds + i * join_spread_seconds / n``. Old nodes
  exist before the scenario starts (registered first, with creation times ``age_seconds`` ago).
- Every node runs ``daemonset_pods_per_node`` DaemonSet pods (``daemon-<j>-<node>``) and
  ``pods_per_node`` ReplicaSet pods (``app-<node>-<i>``).
- A fault with a ``share`` hits ``round(share * n)`` (at least one) of the group's ``n``
  simulated nodes, drawn with a generator seeded by the scenario's seed, the group and the
  fault's position: the same scenario always faults the same nodes. ``crash_loop`` and
  ``oom_loop`` hit the node's first ``pods`` app pods; ``readiness_taint`` puts its ``taint``
  (Cilium's startup taint unless it names one) on the node while it is active.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

import msgspec

from nodesync_sim.fake.scaleout.scenario import (
    CNI_STARTUP_TAINT,
    CRASH_LOOP,
    OOM_LOOP,
    READINESS_TAINT,
    FaultSpec,
    MarkSpec,
    Scenario,
    Taint,
)

Role = Literal["old", "new", "real"]

OWNER_DAEMONSET: Final = "DaemonSet"
OWNER_REPLICASET: Final = "ReplicaSet"
APP_CONTAINER: Final = "app"


@dataclass(frozen=True, slots=True)
class PodPlan:
    name: str
    namespace: str
    owner_kind: str  # DaemonSet or ReplicaSet
    owner_name: str
    grace_seconds: int
    containers: tuple[str, ...] = (APP_CONTAINER,)


@dataclass(frozen=True, slots=True)
class Fault:
    """Active from ``start`` until ``end`` (None: for good), in seconds from the scenario's
    start. ``pods``: the pods a crash or OOM loop hits; ``taint``: the key a readiness taint
    puts on the node."""

    kind: str
    start: float
    end: float | None = None
    pods: tuple[str, ...] = ()
    taint: str = ""

    def active(self, t: float) -> bool:
        return self.start <= t and (self.end is None or t < self.end)


@dataclass(frozen=True, slots=True)
class NodePlan:
    name: str
    role: Role
    wave: str | None  # None for old nodes
    join_at: float  # seconds from the scenario's start (old nodes: 0, registered before it)
    age_seconds: float  # old nodes: how long ago their Node was created
    labels: Mapping[str, str] = field(default_factory=dict)
    daemonset_pods: tuple[PodPlan, ...] = ()
    app_pods: tuple[PodPlan, ...] = ()
    faults: tuple[Fault, ...] = ()
    taints: tuple[Taint, ...] = ()
    orphan_sandboxes: int = 0  # in its simulated runtime before it registers
    node_info: Mapping[str, str] = field(default_factory=dict)  # status.nodeInfo's, by field

    @property
    def pods(self) -> tuple[PodPlan, ...]:
        return (*self.daemonset_pods, *self.app_pods)

    def active(self, kind: str, t: float) -> Fault | None:
        """The first fault of ``kind`` active at ``t``."""
        return next((f for f in self.faults if f.kind == kind and f.active(t)), None)

    def readiness_taints(self, t: float) -> frozenset[str]:
        """The keys of the readiness taints its faults put on it at ``t``."""
        return frozenset(f.taint for f in self.faults if f.kind == READINESS_TAINT and f.active(t))

    def loop_fault(self, pod: str, t: float) -> Fault | None:
        """The crash or OOM loop active at ``t`` for ``pod``, if any."""
        return next(
            (
                f
                for f in self.faults
                if f.kind in (CRASH_LOOP, OOM_LOOP) and pod in f.pods and f.active(t)
            ),
            None,
        )


@dataclass(frozen=True, slots=True)
class Layout:
    nodes: tuple[NodePlan, ...]

    def node(self, name: str) -> NodePlan:
        return next(n for n in self.nodes if n.name == name)

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def of_role(self, role: Role) -> list[NodePlan]:
        return [n for n in self.nodes if n.role == role]


def share_count(share: float, nodes: int) -> int:
    """How many of ``nodes`` a share hits: rounded half up, at least one."""
    return min(nodes, max(1, math.floor(share * nodes + 0.5)))


def _targets(spec: FaultSpec, group: str, index: int, names: list[str], seed: int) -> list[str]:
    if spec.share is None:
        return list(spec.nodes)
    rng = random.Random(f"{seed}:{group}:{index}")
    return sorted(rng.sample(names, share_count(spec.share, len(names))))


def _fault(spec: FaultSpec, app_pods: tuple[PodPlan, ...]) -> Fault:
    end = None if spec.for_seconds is None else spec.at_seconds + spec.for_seconds
    pods: tuple[str, ...] = ()
    if spec.kind in (CRASH_LOOP, OOM_LOOP):
        pods = tuple(p.name for p in app_pods[: spec.pods])
    taint = ""
    if spec.kind == READINESS_TAINT:
        taint = spec.taint if spec.taint is not None else CNI_STARTUP_TAINT
    return Fault(spec.kind, spec.at_seconds, end, pods, taint)


def _pods(
    scenario: Scenario, node: str, daemonsets: int, apps: int
) -> tuple[tuple[PodPlan, ...], tuple[PodPlan, ...]]:
    grace = scenario.timing.pod_grace_seconds
    ns = scenario.namespace
    ds = tuple(
        PodPlan(f"daemon-{j}-{node}", ns, OWNER_DAEMONSET, f"daemon-{j}", grace)
        for j in range(daemonsets)
    )
    app = tuple(
        PodPlan(f"app-{node}-{i}", ns, OWNER_REPLICASET, f"app-{node}", grace) for i in range(apps)
    )
    return ds, app


def _labels(scenario: Scenario, name: str, wave: str | None) -> dict[str, str]:
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
    if wave is not None and scenario.wave_label:
        labels[scenario.wave_label] = wave
    return labels


def _group(
    scenario: Scenario,
    group: str,
    names: list[str],
    faults: tuple[FaultSpec, ...],
) -> dict[str, list[tuple[int, FaultSpec]]]:
    by_node: dict[str, list[tuple[int, FaultSpec]]] = {name: [] for name in names}
    for index, spec in enumerate(faults):
        for name in _targets(spec, group, index, names, scenario.seed):
            by_node[name].append((index, spec))
    return by_node


@dataclass(frozen=True, slots=True)
class _Marked:
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    orphan_sandboxes: int = 0
    node_info: dict[str, str] = field(default_factory=dict)


def _node_info(mark: MarkSpec) -> dict[str, str]:
    """The mark's nodeInfo fields, by their camelCase names in the Node."""
    if mark.node_info is None:
        return {}
    given = msgspec.structs.asdict(mark.node_info)
    return {_camel(k): v for k, v in given.items() if v is not None}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.capitalize() for p in rest)


def _marked(
    scenario: Scenario, group: str, names: list[str], marks: tuple[MarkSpec, ...]
) -> dict[str, _Marked]:
    """Each node's marks, merged in their order (a later label wins, taints add up)."""
    out = {name: _Marked() for name in names}
    for index, mark in enumerate(marks):
        if mark.share is None:
            targets = list(mark.nodes)
        else:
            rng = random.Random(f"{scenario.seed}:{group}/marks:{index}")
            targets = rng.sample(names, share_count(mark.share, len(names)))
        for name in targets:
            was = out[name]
            out[name] = _Marked(
                {**was.labels, **mark.labels},
                (*was.taints, *mark.taints),
                was.orphan_sandboxes + mark.orphan_sandboxes,
                {**was.node_info, **_node_info(mark)},
            )
    return out


def layout(scenario: Scenario) -> Layout:
    nodes: list[NodePlan] = []
    old = scenario.old_nodes
    old_faults = _group(scenario, "old_nodes", old.node_names(), old.faults)
    old_marks = _marked(scenario, "old_nodes", old.node_names(), old.marks)
    for name in old.node_names():
        ds, app = _pods(scenario, name, old.daemonset_pods_per_node, old.pods_per_node)
        nodes.append(
            NodePlan(
                name=name,
                role="old",
                wave=None,
                join_at=0.0,
                age_seconds=old.age_seconds,
                labels={**_labels(scenario, name, None), **old_marks[name].labels},
                daemonset_pods=ds,
                app_pods=app,
                faults=tuple(_fault(spec, app) for _, spec in old_faults[name]),
                taints=old_marks[name].taints,
                orphan_sandboxes=old_marks[name].orphan_sandboxes,
                node_info=old_marks[name].node_info,
            )
        )
    for wave in scenario.waves:
        names = wave.node_names()
        wave_faults = _group(scenario, f"waves/{wave.name}", names, wave.faults)
        wave_marks = _marked(scenario, f"waves/{wave.name}", names, wave.marks)
        for i, name in enumerate(names):
            ds, app = _pods(scenario, name, wave.daemonset_pods_per_node, wave.pods_per_node)
            nodes.append(
                NodePlan(
                    name=name,
                    role="new",
                    wave=wave.name,
                    join_at=wave.start_seconds + i * wave.join_spread_seconds / wave.count,
                    age_seconds=0.0,
                    labels={**_labels(scenario, name, wave.name), **wave_marks[name].labels},
                    daemonset_pods=ds,
                    app_pods=app,
                    faults=tuple(_fault(spec, app) for _, spec in wave_faults[name]),
                    taints=wave_marks[name].taints,
                    orphan_sandboxes=wave_marks[name].orphan_sandboxes,
                    node_info=wave_marks[name].node_info,
                )
            )
        real = scenario.real_node
        if real is not None and real.wave == wave.name:
            ds, app = _pods(scenario, real.name, wave.daemonset_pods_per_node, wave.pods_per_node)
            nodes.append(
                NodePlan(
                    name=real.name,
                    role="real",
                    wave=wave.name,
                    join_at=wave.start_seconds + wave.join_spread_seconds,
                    age_seconds=0.0,
                    labels=_labels(scenario, real.name, wave.name),
                    daemonset_pods=ds,
                    app_pods=app,
                    faults=tuple(_fault(spec, app) for spec in real.faults),
                )
            )
    return Layout(tuple(nodes))
