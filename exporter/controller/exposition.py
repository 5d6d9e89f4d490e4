"""The controller's metrics of its cluster view: the families built at scrape time (build info,
waves, node count, the watches' status) and, for tests and checks, the per-node series of a view
rendered from scratch (a running controller keeps them per node: exporter.controller.cluster)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client.core import Metric

from exporter.metrics.nodes import NodeCollectors, NodeLines, view_families
from exporter.metrics.selfmetrics import SourceStatus, self_families
from exporter.metrics.store import render_all
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
    view: ClusterView | None,
    sources: Mapping[str, SourceStatus],
    build_info: Metric,
    collectors: NodeCollectors | None = None,
    joins: Iterable[Metric] = (),
) -> list[Metric]:
    """The families built at scrape time. ``view`` is None until Nodes and Leases were both
    listed once: an empty or half-built view would read as "no nodes" or "no leases", so the
    wave series, the node count and the join families (``joins``) stay absent (and so do the
    per-node series)."""
    if view is None:
        return [build_info, *self_families(sources)]
    waves = view_families(view, collectors or NodeCollectors())
    return [build_info, *waves, *joins, *self_families(sources)]


def node_exposition(view: ClusterView, collectors: NodeCollectors | None = None) -> bytes:
    """The per-node series of ``view``, rendered from scratch: what the controller's line
    store holds for the same nodes."""
    lines = NodeLines(collectors or NodeCollectors())
    return render_all(lines.families, ((n.name, lines.render(n)) for n in view.nodes))
