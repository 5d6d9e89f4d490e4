"""Metric families for the API server's view of the pods bound to this node."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client.core import GaugeMetricFamily, Metric

from exporter.model.pod_problems import PodProblem


def pod_problem_families(problems: Sequence[PodProblem] | None) -> list[Metric]:
    """The sparse per-pod problem families; none when the API server's view is not available."""
    if problems is None:
        return []
    pending = GaugeMetricFamily(
        "nodesync_pod_pending_since_timestamp_seconds",
        "Unix time since when a pod bound to this node has been Pending, per the API server "
        "(scheduled time, else creation time; series exists only while the pod is Pending).",
        labels=["namespace", "pod"],
    )
    waiting = GaugeMetricFamily(
        "nodesync_pod_container_waiting",
        "Containers waiting with a reason, per the API server; always 1 "
        "(series exists only while the container waits).",
        labels=["namespace", "pod", "container", "reason"],
    )
    terminated = GaugeMetricFamily(
        "nodesync_pod_container_last_terminated",
        "Containers whose last termination was not Completed, per the API server; value = the "
        "container's restart count.",
        labels=["namespace", "pod", "container", "reason"],
    )
    for p in problems:
        if p.kind == "pending" and p.since is not None:
            pending.add_metric([p.namespace, p.pod], p.since)
        elif p.kind == "waiting":
            waiting.add_metric([p.namespace, p.pod, p.container, p.reason], 1.0)
        elif p.kind == "last_terminated":
            terminated.add_metric(
                [p.namespace, p.pod, p.container, p.reason], float(p.restart_count)
            )
    return [pending, waiting, terminated]
