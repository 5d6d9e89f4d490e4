"""Maps the controller's latest cluster view and its informers' status to metric families."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client.core import Metric

from exporter.metrics.nodes import node_families
from exporter.metrics.selfmetrics import SourceStatus, self_families
from exporter.model.clusterview import ClusterView

SOURCE_APISERVER = "apiserver"


def combined_status(statuses: Iterable[SourceStatus]) -> SourceStatus:
    """One status for a source read by several watches (Nodes and Leases): up only if every watch
    is up; the last success is the oldest of theirs (absent until each has succeeded once)."""
    items = list(statuses)
    lasts = [s.last_success_timestamp for s in items]
    return SourceStatus(
        up=bool(items) and all(s.up for s in items),
        last_success_timestamp=(
            None if not lasts or None in lasts else min(t for t in lasts if t is not None)
        ),
    )


def controller_families(
    view: ClusterView | None, sources: Mapping[str, SourceStatus], build_info: Metric
) -> list[Metric]:
    """``view`` is None until Nodes and Leases were both listed once: an empty or half-built
    view would read as "no nodes" or "no leases", so the node and wave series stay absent."""
    nodes = node_families(view) if view is not None else []
    return [build_info, *nodes, *self_families(sources)]
