"""Metric families for kubelet's local state: its health and its pod directories."""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily, Metric

from exporter.model.host import KubeletSnapshot


def kubelet_families(k: KubeletSnapshot | None) -> list[Metric]:
    """Families for one scrape; none before kubelet was first probed."""
    if k is None:
        return []
    healthy = GaugeMetricFamily(
        "nodesync_kubelet_healthy", "1 if kubelet's healthz answered ok at the last probe, else 0."
    )
    healthy.add_metric([], 1.0 if k.healthy else 0.0)
    pod_dirs = GaugeMetricFamily(
        "nodesync_kubelet_pod_directories",
        "Pod directories in kubelet's pods dir (absent when the directory could not be read).",
    )
    if k.pod_dir_readable:
        pod_dirs.add_metric([], float(len(k.pod_uids)))
    return [healthy, pod_dirs]
