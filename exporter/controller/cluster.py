"""The controller's cluster view: watches of every Node and of the node Leases, and the wave
tracker that keeps wave sizes frozen from one view to the next."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from exporter.controller.exposition import combined_status
from exporter.kube.api import KubeAPI
from exporter.kube.convert import lease_info, node_info
from exporter.kube.informer import Informer
from exporter.kube.resources import LEASES, NODES
from exporter.metrics.selfmetrics import SourceStatus
from exporter.model.clusterview import ClusterView, build_view
from exporter.model.kube import LEASE_NAMESPACE, LeaseInfo, NodeInfo
from exporter.model.waves import WaveTracker


class ClusterWatch:
    """Owns the two informers and the wave tracker; ``view()`` builds a fresh view from the
    informers' caches (no API call), so it is cheap enough for every scrape and every alert.

    Everything runs in one event loop: the node handler and ``view()`` never run concurrently.
    """

    def __init__(
        self,
        api: KubeAPI,
        *,
        wave_label: str | None,
        wave_gap: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.nodes: Informer[NodeInfo] = Informer(api, NODES, node_info, name="nodes")
        self.leases: Informer[LeaseInfo] = Informer(
            api, LEASES, lease_info, namespace=LEASE_NAMESPACE, name="node-leases"
        )
        self._wave_label = wave_label
        self._wave_gap = wave_gap
        self._clock = clock
        self._tracker = WaveTracker()
        self._task: asyncio.Task[None] | None = None
        self.nodes.add_handler(self._on_node)

    def _on_node(self, event_type: str, old: NodeInfo | None, new: NodeInfo | None) -> None:
        # A node joins its wave when it appears, not at the next scrape: that keeps the time
        # a wave closes independent of how often it is scraped.
        if old is None and new is not None:
            self._tracker.observe(
                [new], now=self._clock(), gap_seconds=self._wave_gap, wave_label=self._wave_label
            )

    # ------------------------------------------------------------------ state

    def view(self) -> ClusterView:
        return build_view(
            self.nodes.store.values(),
            self.leases.store.values(),
            wave_label=self._wave_label,
            gap_seconds=self._wave_gap,
            now=self._clock(),
            tracker=self._tracker,
        )

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

    def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("already started")
        self._task = asyncio.create_task(self._run(), name="cluster-watch")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
