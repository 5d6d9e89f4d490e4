"""``nodesync_pods``: pods on this node per phase, from the runtime and from the API server.

Both sources share one family: a family name may appear only once per exposition.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client.core import GaugeMetricFamily, Metric

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
