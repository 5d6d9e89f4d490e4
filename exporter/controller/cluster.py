"""The controller's cluster view: watches of every Node and of the node Leases, the wave tracker
that keeps wave sizes frozen, and what both keep current: the nodes' views, their metric lines
and the guards' counts."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable

from prometheus_client.core import Metric

from exporter.controller.exposition import combined_status
from exporter.kube.api import KubeAPI
from exporter.kube.convert import NODE_SUMMARY_UNREAD, dropping, lease_info, node_summary
from exporter.kube.informer import Informer
from exporter.kube.podstarts import PodStarts
from exporter.kube.resources import LEASES, NODES
from exporter.metrics.nodes import NodeCollectors, NodeLines, join_families
from exporter.metrics.selfmetrics import SourceStatus
from exporter.metrics.store import Family, LineStore
from exporter.model.clusterview import (
    KUBELET_CONDITIONS,
    VIEW_CONDITIONS,
    VIEW_TAINT_PREFIXES,
    VIEW_TAINTS,
    ClusterView,
    NodeView,
    node_view,
    view_labels,
)
from exporter.model.health import HealthIndex
from exporter.model.joins import JoinPolicy, JoinTracker, node_hold
from exporter.model.kube import LEASE_NAMESPACE, LeaseInfo, NodeInfo
from exporter.model.waves import WaveTracker, node_key
from exporter.tasks import cancel_and_wait


class ClusterWatch:
    """Owns the two informers and the wave tracker, and keeps from their events everything a
    scrape or a decision reads: each node's view (its Node, trimmed to what the view needs,
    joined with its Lease and its wave), each node's metric lines (one chunk per family, in a
    :class:`~exporter.metrics.store.LineStore`), and the correlated-failure guard's counts (a
    :class:`~exporter.model.health.HealthIndex` per policy that asks). A watch event costs
    what it changed: one node re-rendered. ``view()`` hands out the current view without
    building anything; a view handed out stays as it was (the next change copies the map of
    nodes first, a dictionary copy), while its health counts are answered as of the call.

    Nodes that appear together (a list hands over thousands at once) join their waves
    together, in creation order, before anything reads them.

    While a node is joining (``--join.window``), a :class:`~exporter.model.joins.JoinTracker`
    follows its stages; with the ``joins`` switch on, a watch of the pods that start running
    (exporter.kube.podstarts: no cache) tells when its first workload pod runs.

    Everything runs in one event loop: the handlers and the readers never run concurrently.
    """

    def __init__(
        self,
        api: KubeAPI,
        *,
        wave_label: str | None,
        wave_gap: float,
        collectors: NodeCollectors | None = None,
        join: JoinPolicy | None = None,
        cohort_keys: tuple[str, ...] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        collectors = collectors or NodeCollectors()
        join = join or JoinPolicy()
        # Only what the view and the switched-on series read of each Node is kept.
        summary = functools.partial(
            node_summary,
            labels=view_labels(wave_label, cohort_keys),
            conditions=KUBELET_CONDITIONS if collectors.conditions else VIEW_CONDITIONS,
            taints=VIEW_TAINTS | frozenset(join.readiness_taints),
            taint_prefixes=VIEW_TAINT_PREFIXES,
        )
        self.nodes: Informer[NodeInfo] = Informer(
            api,
            NODES,
            summary,
            name="nodes",
            list_object_hook=dropping(NODE_SUMMARY_UNREAD),
        )
        self.leases: Informer[LeaseInfo] = Informer(
            api, LEASES, lease_info, namespace=LEASE_NAMESPACE, name="node-leases"
        )
        self._wave_label = wave_label
        self._wave_gap = wave_gap
        self._clock = clock
        self._collectors = collectors
        self._join_policy = join
        self._cohort_keys = cohort_keys
        self._joins: JoinTracker | None = (
            JoinTracker(join, since=clock()) if collectors.joins else None
        )
        self.pods: PodStarts | None = (
            PodStarts(api, self._on_pod_start) if collectors.joins else None
        )
        self._tracker = WaveTracker()
        self._lines = NodeLines(collectors)
        self._store = LineStore(self._lines.families)
        self._views: dict[str, NodeView] = {}
        self._views_shared = False  # a view handed out holds self._views: copy before a change
        self._pending: dict[str, NodeInfo] = {}  # appeared, not yet in a wave
        self._flush_scheduled = False
        self._health: dict[tuple[float, float], HealthIndex] = {}
        self._task: asyncio.Task[None] | None = None
        self.nodes.add_handler(self._on_node)
        self.leases.add_handler(self._on_lease)

    # ------------------------------------------------------------------ events

    def _on_node(self, event_type: str, old: NodeInfo | None, new: NodeInfo | None) -> None:
        # A node joins its wave when it appears, not at the next scrape: that keeps the time
        # a wave closes independent of how often it is scraped.
        if old is None and new is not None:
            self._pending[new.name] = new
            self._schedule_flush()
            return
        self._flush()
        if new is None:
            assert old is not None
            self._tracker.remove(old)
            self._drop(old.name)
        elif old is not None and node_key(old) != node_key(new):  # re-created under its name
            self._tracker.remove(old)
            self._drop(old.name)
            self._pending[new.name] = new
            self._flush()
        else:
            self._refresh(new.name)

    def _on_lease(self, event_type: str, old: LeaseInfo | None, new: LeaseInfo | None) -> None:
        lease = new if new is not None else old
        assert lease is not None
        if lease.name in self._views:
            self._refresh(lease.name)

    def _on_pod_start(self, node: str, started_at: float | None) -> None:
        assert self._joins is not None
        at = started_at if started_at is not None else self._clock()
        if self._joins.pod_running(node, at) is not None:
            self._refresh(node)

    def _advance(self) -> None:
        """Judge the joins whose objective ran out; a node whose join window ended loses its
        join series, one whose readiness hold limit ran out its hold."""
        if self._joins is None:
            return
        for name in self._joins.advance(self._clock()):
            self._refresh(name)

    def _schedule_flush(self) -> None:
        if self._flush_scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._flush()
            return
        self._flush_scheduled = True
        loop.call_soon(self._flush)

    def _flush(self) -> None:
        """The nodes that appeared join their waves, and get their view and lines."""
        self._flush_scheduled = False
        if not self._pending:
            return
        appeared = list(self._pending.values())
        self._pending.clear()
        self._tracker.observe(
            appeared, now=self._clock(), gap_seconds=self._wave_gap, wave_label=self._wave_label
        )
        for node in appeared:
            self._refresh(node.name)

    def _refresh(self, name: str) -> None:
        node = self.nodes.store.get(name)
        wave_id = self._tracker.wave_of(node) if node is not None else None
        if node is None or wave_id is None:
            return
        lease = self.leases.store.get(f"{LEASE_NAMESPACE}/{name}")
        now = self._clock()
        join, hold, gates = None, None, tuple[str, ...]()
        if self._joins is not None:
            join = self._joins.update(node, lease, wave_id, now)
            hold, gates = node_hold(node, self._join_policy, now)
        view = node_view(
            node,
            lease,
            wave_id,
            join,
            readiness_hold=hold,
            readiness_gates=gates,
            cohort_keys=self._cohort_keys,
        )
        if self._views.get(name) == view:
            return
        self._writable()[name] = view
        self._store.put(name, self._lines.render(view))
        if self._health:
            health = view.health
            for index in self._health.values():
                index.set(name, health)

    def _drop(self, name: str) -> None:
        if self._joins is not None:
            self._joins.remove(name, self._clock())
        if name in self._views:
            del self._writable()[name]
        self._store.delete(name)
        for index in self._health.values():
            index.remove(name)

    def _writable(self) -> dict[str, NodeView]:
        if self._views_shared:
            self._views = dict(self._views)
            self._views_shared = False
        return self._views

    # ------------------------------------------------------------------ state

    def view(self) -> ClusterView:
        """The current view: no node is looked at to hand it out."""
        self._flush()
        self._advance()
        now = self._clock()
        self._views_shared = True
        return ClusterView(
            now,
            self._views,
            self._tracker.waves(now=now, gap_seconds=self._wave_gap),
            health=self._health_counts,
        )

    def exposition(self) -> list[bytes]:
        """The node series as text, each family's header and lines (join them to serve)."""
        self._flush()
        self._advance()
        return self._store.exposition()

    def join_families(self) -> list[Metric]:
        """Each wave's histograms of the join stages and the join SLO's judgements (none with
        the ``joins`` switch off)."""
        if self._joins is None:
            return []
        self._flush()
        self._advance()
        now = self._clock()
        self._joins.keep_waves(
            w.id for w in self._tracker.waves(now=now, gap_seconds=self._wave_gap)
        )
        return join_families(self._joins.histograms(), self._joins.outcomes, self._collectors)

    def node_lines(self, name: str) -> tuple[bytes, ...] | None:
        """One node's chunks, one per family of :attr:`families` (None for an unknown node)."""
        self._flush()
        return self._store.chunks(name) if name in self._store else None

    @property
    def families(self) -> tuple[Family, ...]:
        """The per-node families the collector switches turn on."""
        return self._store.families

    def _health_counts(self, window: float, grace: float, now: float) -> tuple[int, int]:
        self._flush()
        index = self._health.get((window, grace))
        if index is None:
            index = self._health[(window, grace)] = HealthIndex(window, grace)
            for name, view in self._views.items():
                index.set(name, view.health)
        return index.counts(now)

    def lease_renew_time(self, node: str) -> float | None:
        """The node's last Lease renewal, read from the watch's cache: one lookup, where the
        whole view would cost milliseconds at a thousand nodes."""
        lease = self.leases.store.get(f"{LEASE_NAMESPACE}/{node}")
        return lease.renew_time if lease is not None else None

    def status(self) -> SourceStatus:
        """The API server as one source: the status of both watches (see combined_status)."""
        return combined_status(
            SourceStatus(up=i.up, last_success_timestamp=i.last_success)
            for i in (self.nodes, self.leases)
        )

    @property
    def synced(self) -> bool:
        """Both watches listed once: the view is complete from here on."""
        return self.nodes.synced and self.leases.synced

    async def wait_synced(self) -> None:
        await asyncio.gather(self.nodes.wait_synced(), self.leases.wait_synced())

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    # ------------------------------------------------------------------ lifecycle

    async def _run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self.nodes.run(), name="informer-nodes")
            group.create_task(self.leases.run(), name="informer-node-leases")
            if self.pods is not None:
                group.create_task(self.pods.run(), name="pod-starts")

    def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("already started")
        self._task = asyncio.create_task(self._run(), name="cluster-watch")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait([task])
