"""The controller's per-node series built the plain way, as prometheus_client families from a
whole view, for tests to compare the controller's line store with: the two must render to the
same bytes."""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily, Metric

from exporter.metrics.nodes import (
    CONDITION,
    CREATED,
    EXEMPT,
    JOIN_STAGE,
    LEASE,
    OTHER_CONDITIONS,
    READINESS_HELD,
    READINESS_LEFT,
    READY,
    STATUSES,
    TAINT,
    TRANSITION,
    UNSCHEDULABLE,
    WAVE,
    NodeCollectors,
    exempt_reasons,
)
from exporter.model.clusterview import ClusterView
from exporter.model.joins import HELD, LEFT
from tests.metrics.exposition import render


def reference_families(view: ClusterView, switches: NodeCollectors) -> list[Metric]:
    conditions = ((READY,) if switches.node else ()) + (
        OTHER_CONDITIONS if switches.conditions else ()
    )
    made = {
        f: GaugeMetricFamily(f.name, f.help, labels=labels)
        for f, labels in (
            (CONDITION, ["node", "condition", "status"]),
            (TRANSITION, ["node", "condition"]),
            (LEASE, ["node"]),
            (CREATED, ["node"]),
            (UNSCHEDULABLE, ["node"]),
            (TAINT, ["node", "key", "effect"]),
            (WAVE, ["node", "wave"]),
            (EXEMPT, ["node", "reason"]),
            (JOIN_STAGE, ["node", "stage"]),
            (READINESS_HELD, ["node"]),
            (READINESS_LEFT, ["node"]),
        )
    }
    for node in view.nodes:
        name = node.name
        by_type = {c.type: c for c in node.conditions}
        for type_ in conditions:
            cond = by_type.get(type_)
            if cond is None:
                continue
            current = {"True": "true", "False": "false"}.get(cond.status, "unknown")
            for status in STATUSES:
                made[CONDITION].add_metric([name, type_, status], float(status == current))
            if cond.last_transition is not None:
                made[TRANSITION].add_metric([name, type_], cond.last_transition)
        if node.lease_renew_time is not None:
            made[LEASE].add_metric([name], node.lease_renew_time)
        made[CREATED].add_metric([name], node.created_at)
        made[UNSCHEDULABLE].add_metric([name], float(node.unschedulable))
        for t in node.taints_that_matter:
            made[TAINT].add_metric([name, t.key, t.effect], 1.0)
        made[WAVE].add_metric([name, node.wave_id], 1.0)
        for reason in exempt_reasons(node):
            made[EXEMPT].add_metric([name, reason], 1.0)
        for stage, at in node.join.reached() if node.join is not None else ():
            made[JOIN_STAGE].add_metric([name, stage], at)
        if node.readiness_hold == HELD:
            made[READINESS_HELD].add_metric([name], 1.0)
        if node.readiness_hold == LEFT:
            made[READINESS_LEFT].add_metric([name], float(len(node.readiness_gates)))
    on = {
        CONDITION: bool(conditions),
        TRANSITION: bool(conditions),
        LEASE: switches.node,
        CREATED: switches.node,
        UNSCHEDULABLE: switches.spec,
        TAINT: switches.spec,
        WAVE: switches.waves,
        EXEMPT: switches.node,
        JOIN_STAGE: switches.joins,
        READINESS_HELD: switches.joins,
        READINESS_LEFT: switches.joins,
    }
    return [family for f, family in made.items() if on[f]]


def reference_text(view: ClusterView, switches: NodeCollectors) -> str:
    return render(reference_families(view, switches))
