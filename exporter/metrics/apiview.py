"""Metric families for the API server's view of the pods bound to this node."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from prometheus_client.core import GaugeMetricFamily, Metric

from exporter.model.apiview import PodProblem
from exporter.model.phase import PodPhase

PODS_HELP = "Pods on this node per phase, as derived from the given source."


def pods_family(
    runtime_phases: Mapping[PodPhase, int] | None, api_phases: Mapping[str, int] | None
) -> Metric:
    """``nodesync_pods`` with both sources in one family (a family name may appear only once per
    exposition). Every phase is present for each source given; a source passed as None (the
    API server's view when it is not available) has no samples."""
    family = GaugeMetricFamily("nodesync_pods", PODS_HELP, labels=["phase", "source"])
    if runtime_phases is not None:
        for phase in PodPhase:
            family.add_metric([phase.value, "runtime"], float(runtime_phases.get(phase, 0)))
    if api_phases is not None:
        for phase in PodPhase:
            family.add_metric([phase.value, "apiserver"], float(api_phases.get(phase.value, 0)))
    return family


def apiview_families(problems: Sequence[PodProblem] | None) -> list[Metric]:
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
