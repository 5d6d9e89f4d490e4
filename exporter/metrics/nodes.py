"""The controller's node and wave series: one series set per node, rendered node by node.

kube-state-metrics' way: a pure generator turns one node's view into its lines of text, one
chunk per family (:class:`NodeLines`); the controller keeps each node's chunks in a
:class:`~exporter.metrics.store.LineStore`, re-renders a node when a watch event changes it,
and a scrape writes the stored bytes out. The few series per wave and the node count are
families built at scrape time (:func:`cluster_families`).

Which series exist is the collector switches' choice (:class:`NodeCollectors`):

- ``node`` (on): what the rules read: creation, Lease renewal, the Ready condition and its
  transition, the reasons a node is exempt from rollback, and the node count;
- ``waves`` (on): each node's scale-out wave, each wave's size and start (nodesync's own);
- ``conditions`` (off): kubelet's other conditions (MemoryPressure, DiskPressure, PIDPressure,
  NetworkUnavailable) with their transitions: kube-state-metrics' kube_node_status_condition,
  read by no rule;
- ``spec`` (off): the cordon and the watched taints: kube-state-metrics' kube_node_spec_*,
  read by no rule;
- ``joins`` (on): each joining node's join stages, each wave's histograms of the stages'
  durations, the join SLO's judgements, and the readiness holds (exporter.model.joins).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from exporter.metrics.store import Family
from exporter.metrics.switches import FamilyGroup, is_on
from exporter.model.clusterview import ClusterView, NodeView
from exporter.model.joins import HELD, LEFT, OUTCOMES, STAGE_BUCKETS, Histogram
from exporter.model.waves import Wave

READY = "Ready"
# kubelet's other conditions; other types (e.g. node-problem-detector's) are not exported.
OTHER_CONDITIONS = ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")
CONDITIONS = (READY, *OTHER_CONDITIONS)
STATUSES = ("true", "false", "unknown")
_STATUS = {"True": "true", "False": "false"}

# ---------------------------------------------------------------- the families

CONDITION = Family(
    "nodesync_node_condition",
    "1 for the node condition's current status, 0 for the other two "
    "(status is true, false or unknown).",
)
TRANSITION = Family(
    "nodesync_node_condition_transition_timestamp_seconds",
    "Unix time the node condition last changed status.",
)
LEASE = Family(
    "nodesync_node_lease_renew_timestamp_seconds",
    "Unix time kubelet last renewed the node's Lease (absent without a Lease).",
)
CREATED = Family(
    "nodesync_node_created_timestamp_seconds",
    "Unix time the Node object was created.",
)
UNSCHEDULABLE = Family(
    "nodesync_node_unschedulable",
    "1 if the node is cordoned (spec.unschedulable), else 0.",
)
TAINT = Family(
    "nodesync_node_taint",
    "1 for each taint on the node among those nodesync watches.",
)
WAVE = Family(
    "nodesync_node_wave",
    "1 for the scale-out wave the node belongs to.",
)
EXEMPT = Family(
    "nodesync_node_rollback_exempt",
    "1 for each reason nodesync never rolls the node back "
    "(control_plane, protected, other_remediator).",
)
JOIN_STAGE = Family(
    "nodesync_node_join_stage_timestamp_seconds",
    "Unix time the joining node reached the join stage (lease, ready, network_ready, "
    "gates_cleared, pod_running).",
)
READINESS_HELD = Family(
    "nodesync_node_readiness_held",
    "1 while a readiness taint holds the new node back within --join.readiness-hold-limit of "
    "its creation: starting, not failed (absent otherwise).",
)
READINESS_LEFT = Family(
    "nodesync_node_readiness_taints_left",
    "Readiness taints left on the node, Ready and past --join.readiness-hold-limit (absent else).",
)
#: Per-node families, in the order a scrape writes them.
NODE_FAMILIES = (
    CONDITION,
    TRANSITION,
    LEASE,
    CREATED,
    UNSCHEDULABLE,
    TAINT,
    WAVE,
    EXEMPT,
    JOIN_STAGE,
    READINESS_HELD,
    READINESS_LEFT,
)

WAVE_NODES = "nodesync_wave_nodes"
WAVE_START = "nodesync_wave_start_timestamp_seconds"
NODES = "nodesync_nodes"
WAVE_JOIN_STAGE = "nodesync_wave_join_stage_duration_seconds"
JOINS = "nodesync_joins_total"

# ---------------------------------------------------------------- the switches

NODE = FamilyGroup(
    "node",
    True,
    "export what the rules read of each node: its creation, Lease renewal, Ready condition "
    "and its transition, the reasons it is exempt from rollback; and the node count",
    (CONDITION.name, TRANSITION.name, LEASE.name, CREATED.name, EXEMPT.name, NODES),
    detail="the condition families for Ready only",
)
WAVES = FamilyGroup(
    "waves",
    True,
    "export each node's scale-out wave, and each wave's size and start",
    (WAVE.name, WAVE_NODES, WAVE_START),
)
OTHER = FamilyGroup(
    "conditions",
    False,
    "export kubelet's other node conditions (MemoryPressure, DiskPressure, PIDPressure, "
    "NetworkUnavailable) and their transitions, as kube-state-metrics' "
    "kube_node_status_condition does; no rule reads them",
    (CONDITION.name, TRANSITION.name),
    detail="the condition families for the conditions other than Ready",
)
SPEC = FamilyGroup(
    "spec",
    False,
    "export each node's cordon (nodesync_node_unschedulable) and watched taints "
    "(nodesync_node_taint), as kube-state-metrics' kube_node_spec_unschedulable and "
    "kube_node_spec_taint do; no rule reads them",
    (UNSCHEDULABLE.name, TAINT.name),
)
JOIN = FamilyGroup(
    "joins",
    True,
    "export each joining node's join stages, each wave's histograms of the stages' "
    "durations, the join SLO's judgements, and the nodes held back by readiness taints or "
    "left with them",
    (JOIN_STAGE.name, WAVE_JOIN_STAGE, JOINS, READINESS_HELD.name, READINESS_LEFT.name),
)
GROUPS = (NODE, WAVES, OTHER, SPEC, JOIN)


@dataclass(frozen=True, slots=True)
class NodeCollectors:
    """The controller's collector switches for its node and wave series."""

    node: bool = NODE.field()
    waves: bool = WAVES.field()
    conditions: bool = OTHER.field()
    spec: bool = SPEC.field()
    joins: bool = JOIN.field()

    @classmethod
    def everything(cls) -> NodeCollectors:
        return cls(node=True, waves=True, conditions=True, spec=True, joins=True)


# ---------------------------------------------------------------- text


def _escape(value: str) -> str:
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def go_float(number: float) -> str:
    """A sample value as prometheus_client writes it (its ``floatToGoString``: Go's notation,
    which switches to an exponent sooner than Python's ``repr``)."""
    if math.isinf(number):
        return "+Inf" if number > 0 else "-Inf"
    if math.isnan(number):
        return "NaN"
    text = repr(float(number))
    dot = text.find(".")
    if number > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


def _status(value: str) -> str:
    return _STATUS.get(value, "unknown")


def exempt_reasons(node: NodeView) -> list[str]:
    """The reasons nodesync never rolls the node back (the guards' refusal reasons)."""
    flags = (
        ("control_plane", node.control_plane),
        ("protected", node.protected),
        ("other_remediator", node.owned_by_other_remediator),
    )
    return [reason for reason, on in flags if on]


class NodeLines:
    """One node's lines, one chunk of bytes per family of :attr:`families` (the families the
    switches turn on, in :data:`NODE_FAMILIES` order). Labels are written sorted by name, as
    prometheus_client writes them, so the text equals its rendering of the same samples."""

    def __init__(self, switches: NodeCollectors) -> None:
        node, other = is_on(switches, NODE), is_on(switches, OTHER)
        self._conditions = ((READY,) if node else ()) + (OTHER_CONDITIONS if other else ())
        on = {
            CONDITION: bool(self._conditions),
            TRANSITION: bool(self._conditions),
            LEASE: node,
            CREATED: node,
            UNSCHEDULABLE: is_on(switches, SPEC),
            TAINT: is_on(switches, SPEC),
            WAVE: is_on(switches, WAVES),
            EXEMPT: node,
            JOIN_STAGE: is_on(switches, JOIN),
            READINESS_HELD: is_on(switches, JOIN),
            READINESS_LEFT: is_on(switches, JOIN),
        }
        self.families = tuple(f for f in NODE_FAMILIES if on[f])

        renderers = {
            CONDITION: self._condition,
            TRANSITION: self._transition,
            LEASE: _lease,
            CREATED: _created,
            UNSCHEDULABLE: _unschedulable,
            TAINT: _taint,
            WAVE: _wave,
            EXEMPT: _exempt,
            JOIN_STAGE: _join_stages,
            READINESS_HELD: _readiness_held,
            READINESS_LEFT: _readiness_left,
        }
        self._renderers = tuple(renderers[f] for f in self.families)

    def render(self, node: NodeView) -> tuple[bytes, ...]:
        label = f'node="{_escape(node.name)}"'
        return tuple(render(node, label).encode() for render in self._renderers)

    def _condition(self, node: NodeView, label: str) -> str:
        by_type = {c.type: c for c in node.conditions}
        lines = []
        for type_ in self._conditions:
            cond = by_type.get(type_)
            if cond is not None:
                current = _status(cond.status)
                lines += [
                    f'nodesync_node_condition{{condition="{type_}",{label},status="{s}"}} '
                    f"{'1.0' if s == current else '0.0'}\n"
                    for s in STATUSES
                ]
        return "".join(lines)

    def _transition(self, node: NodeView, label: str) -> str:
        by_type = {c.type: c for c in node.conditions}
        return "".join(
            f"nodesync_node_condition_transition_timestamp_seconds"
            f'{{condition="{t}",{label}}} {go_float(c.last_transition)}\n'
            for t in self._conditions
            if (c := by_type.get(t)) is not None and c.last_transition is not None
        )


def _lease(node: NodeView, label: str) -> str:
    renew = node.lease_renew_time
    if renew is None:
        return ""
    return f"nodesync_node_lease_renew_timestamp_seconds{{{label}}} {go_float(renew)}\n"


def _created(node: NodeView, label: str) -> str:
    return f"nodesync_node_created_timestamp_seconds{{{label}}} {go_float(node.created_at)}\n"


def _unschedulable(node: NodeView, label: str) -> str:
    return f"nodesync_node_unschedulable{{{label}}} {'1.0' if node.unschedulable else '0.0'}\n"


def _taint(node: NodeView, label: str) -> str:
    return "".join(
        f'nodesync_node_taint{{effect="{_escape(t.effect)}",key="{_escape(t.key)}",{label}}} 1.0\n'
        for t in node.taints_that_matter
    )


def _wave(node: NodeView, label: str) -> str:
    return f'nodesync_node_wave{{{label},wave="{_escape(node.wave_id)}"}} 1.0\n'


def _exempt(node: NodeView, label: str) -> str:
    return "".join(
        f'nodesync_node_rollback_exempt{{{label},reason="{r}"}} 1.0\n' for r in exempt_reasons(node)
    )


def _join_stages(node: NodeView, label: str) -> str:
    if node.join is None:
        return ""
    return "".join(
        f'nodesync_node_join_stage_timestamp_seconds{{{label},stage="{stage}"}} {go_float(at)}\n'
        for stage, at in node.join.reached()
    )


def _readiness_held(node: NodeView, label: str) -> str:
    held = node.readiness_hold == HELD
    return f"nodesync_node_readiness_held{{{label}}} 1.0\n" if held else ""


def _readiness_left(node: NodeView, label: str) -> str:
    if node.readiness_hold != LEFT:
        return ""
    return f"nodesync_node_readiness_taints_left{{{label}}} {go_float(len(node.readiness_gates))}\n"


# ---------------------------------------------------------------- per scrape


def cluster_families(
    waves: Iterable[Wave], node_count: int, switches: NodeCollectors
) -> list[Metric]:
    """The series that are not per node: each wave's size and start, and the node count."""
    families: list[Metric] = []
    if is_on(switches, WAVES):
        wave_nodes = GaugeMetricFamily(
            WAVE_NODES,
            "Nodes that joined the scale-out wave; frozen once the wave closed (deletions do "
            "not lower it).",
            labels=["wave"],
        )
        wave_start = GaugeMetricFamily(
            WAVE_START,
            "Creation time of the first node of the scale-out wave.",
            labels=["wave"],
        )
        for w in waves:
            wave_nodes.add_metric([w.id], float(w.size))
            wave_start.add_metric([w.id], w.started_at)
        families += [wave_nodes, wave_start]
    if is_on(switches, NODE):
        total = GaugeMetricFamily(NODES, "Nodes in the cluster.")
        total.add_metric([], float(node_count))
        families.append(total)
    return families


def join_families(
    histograms: Mapping[tuple[str, str], Histogram],
    outcomes: Mapping[str, int],
    switches: NodeCollectors,
) -> list[Metric]:
    """Each wave's histograms of the join stages' durations, and the join SLO's judgements."""
    if not is_on(switches, JOIN):
        return []
    durations = HistogramMetricFamily(
        WAVE_JOIN_STAGE,
        "Seconds from a joining node's creation to each join stage it reached, per scale-out "
        "wave (observed once per node and stage).",
        labels=["stage", "wave"],
    )
    bounds = [go_float(b) for b in STAGE_BUCKETS] + ["+Inf"]
    for (wave, stage), histogram in sorted(histograms.items()):
        durations.add_metric(
            [stage, wave],
            [(b, float(n)) for b, n in zip(bounds, histogram.cumulative(), strict=True)],
            histogram.sum,
        )
    judged = CounterMetricFamily(
        JOINS,
        "New nodes judged against --join.ready-objective: ready (Ready within it) or not_ready "
        "(not Ready when it ran out, or deleted before it was Ready).",
        labels=["outcome"],
    )
    for outcome in OUTCOMES:
        judged.add_metric([outcome], float(outcomes.get(outcome, 0)))
    return [durations, judged]


def view_families(view: ClusterView, switches: NodeCollectors) -> list[Metric]:
    """:func:`cluster_families` of a view."""
    return cluster_families(view.waves, view.node_count, switches)
