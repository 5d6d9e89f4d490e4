"""Metric families for drift between the API server's desired pods, the runtime and kubelet."""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily, Metric

from exporter.model.drift import Drift, DriftKind


def drift_families(drift: Drift | None) -> list[Metric]:
    """Families for one scrape; none when drift could not be computed (no API server view)."""
    if drift is None:
        return []
    pods = GaugeMetricFamily(
        "nodesync_drift_pods",
        "Drifted items between the API server's pods for this node, the runtime and kubelet's "
        "pod directories, per kind (reported once older than the grace period).",
        labels=["kind"],
    )
    oldest = GaugeMetricFamily(
        "nodesync_drift_oldest_timestamp_seconds",
        "Unix time since when the oldest item of each kind has drifted (kinds with items only).",
        labels=["kind"],
    )
    counts = drift.counts()
    since = drift.oldest()
    for kind in DriftKind:
        pods.add_metric([kind.value], float(counts[kind]))
        if kind in since:
            oldest.add_metric([kind.value], since[kind])
    return [pods, oldest]
