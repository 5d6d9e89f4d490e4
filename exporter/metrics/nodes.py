"""Metric families for the controller's cluster view: one series set per node, and the waves."""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily, Metric

from exporter.model.clusterview import ClusterView, NodeView

# The node conditions exported (kubelet's own); other types (e.g. node-problem-detector's) are not.
CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")
STATUSES = ("true", "false", "unknown")
_STATUS = {"True": "true", "False": "false"}


def _status(value: str) -> str:
    return _STATUS.get(value, "unknown")


def _roles(node: NodeView) -> list[str]:
    flags = (
        ("control_plane", node.control_plane),
        ("protected", node.protected),
        ("other_remediator", node.owned_by_other_remediator),
    )
    return [role for role, on in flags if on]


def node_families(view: ClusterView) -> list[Metric]:
    """Families for one scrape of the view."""
    condition = GaugeMetricFamily(
        "nodesync_node_condition",
        "1 for the node condition's current status, 0 for the other two "
        "(status is true, false or unknown).",
        labels=["node", "condition", "status"],
    )
    transition = GaugeMetricFamily(
        "nodesync_node_condition_transition_timestamp_seconds",
        "Unix time the node condition last changed status.",
        labels=["node", "condition"],
    )
    lease = GaugeMetricFamily(
        "nodesync_node_lease_renew_timestamp_seconds",
        "Unix time kubelet last renewed the node's Lease (absent without a Lease).",
        labels=["node"],
    )
    created = GaugeMetricFamily(
        "nodesync_node_created_timestamp_seconds",
        "Unix time the Node object was created.",
        labels=["node"],
    )
    unschedulable = GaugeMetricFamily(
        "nodesync_node_unschedulable",
        "1 if the node is cordoned (spec.unschedulable), else 0.",
        labels=["node"],
    )
    taint = GaugeMetricFamily(
        "nodesync_node_taint",
        "1 for each taint on the node among those nodesync watches.",
        labels=["node", "key", "effect"],
    )
    wave = GaugeMetricFamily(
        "nodesync_node_wave",
        "1 for the scale-out wave the node belongs to.",
        labels=["node", "wave"],
    )
    role = GaugeMetricFamily(
        "nodesync_node_role",
        "1 for each reason nodesync never rolls the node back "
        "(control_plane, protected, other_remediator).",
        labels=["node", "role"],
    )
    for node in view.nodes:
        name = node.name
        by_type = {c.type: c for c in node.conditions}
        for type_ in CONDITIONS:
            cond = by_type.get(type_)
            if cond is None:
                continue
            current = _status(cond.status)
            for status in STATUSES:
                condition.add_metric([name, type_, status], 1.0 if status == current else 0.0)
            if cond.last_transition is not None:
                transition.add_metric([name, type_], cond.last_transition)
        if node.lease_renew_time is not None:
            lease.add_metric([name], node.lease_renew_time)
        created.add_metric([name], node.created_at)
        unschedulable.add_metric([name], 1.0 if node.unschedulable else 0.0)
        for t in node.taints_that_matter:
            taint.add_metric([name, t.key, t.effect], 1.0)
        wave.add_metric([name, node.wave_id], 1.0)
        for r in _roles(node):
            role.add_metric([name, r], 1.0)

    wave_nodes = GaugeMetricFamily(
        "nodesync_wave_nodes",
        "Nodes that joined the scale-out wave; frozen once the wave closed (deletions do not "
        "lower it).",
        labels=["wave"],
    )
    wave_start = GaugeMetricFamily(
        "nodesync_wave_start_timestamp_seconds",
        "Creation time of the first node of the scale-out wave.",
        labels=["wave"],
    )
    for w in view.waves:
        wave_nodes.add_metric([w.id], float(w.size))
        wave_start.add_metric([w.id], w.started_at)

    total = GaugeMetricFamily("nodesync_nodes", "Nodes in the cluster.")
    total.add_metric([], float(len(view.nodes)))
    return [
        condition,
        transition,
        lease,
        created,
        unschedulable,
        taint,
        wave,
        role,
        wave_nodes,
        wave_start,
        total,
    ]
