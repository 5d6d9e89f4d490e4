"""The agent's sync loop: read the runtime, kubelet and host; publish one immutable state.

A scrape never waits on containerd: it renders the state published by the last completed
sync. Each source fails on its own: a frozen containerd does not stop the host probes.

After the first cycle (every source read at once) the runtime's state and the node probes (the
host and kubelet) are read on schedules of their own, of the same period, so that neither waits
for the other: a kubelet healthz that takes its whole timeout does not age the runtime's state,
and a sync cycle (:meth:`AgentSync.sync_runtime`) costs about the CRI calls it makes.

A runtime cycle runs at its period, or at once when asked (:meth:`AgentSync.request_sync`):
containerd's task events (exporter.agent.runtime_events) ask for one the moment a container
starts, exits or is OOM-killed, so a change is published without waiting for the period. Either
way the cycle is the same read, and a cycle that found the listing changed is counted by what
started it (``trigger``). An exit or OOM kill is published even sooner, from the event itself
(:meth:`AgentSync.tell`, exporter.model.told_exits), over the listing last read; the listing
that then shows it replaces what the event told.

The containers' resource usage (CRI ListContainerStats) is not part of a sync cycle: at 110
pods it costs containerd and its shims ~100x the state calls, so it is refreshed on a period
of its own (:meth:`AgentSync.run_stats`, ``--stats.period``) and published into the same state.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from exporter.agent.drift_view import DriftView
from exporter.agent.sources import (
    SOURCE_APISERVER,
    SOURCE_CRI,
    SOURCE_HOST,
    SOURCE_KUBELET,
    log_source_error,
    source_state,
    was_up,
)
from exporter.agent.state import AgentState, SourceState
from exporter.cri.errors import CRIError
from exporter.model.drift import DEFAULT_GRACE_SECONDS
from exporter.model.host import HostSnapshot, KubeletSnapshot
from exporter.model.kube import NodeInfo, PodInfo
from exporter.model.phase import PodPhase, phase_counts, pods_by_uid
from exporter.model.pod_problems import api_phase_counts, pod_problems
from exporter.model.pressure import pressure
from exporter.model.runtime import Container, PodSandbox, RuntimeSnapshot, RuntimeStats
from exporter.model.runtime_events import TaskEvent
from exporter.model.terminations import TerminationTracker
from exporter.model.told_exits import ToldExits
from exporter.tasks import wait_set

log = logging.getLogger(__name__)


TRIGGER_PERIOD = "period"
TRIGGER_EVENT = "event"
TRIGGER_RESUBSCRIBE = "resubscribe"
# What starts a runtime cycle: a task event, a (re)subscription to the events, its period.
TRIGGERS = (TRIGGER_EVENT, TRIGGER_RESUBSCRIBE, TRIGGER_PERIOD)


class RuntimeSource(Protocol):
    async def read(self) -> RuntimeSnapshot: ...


class StatsSource(Protocol):
    async def read_stats(self) -> RuntimeStats: ...


class KubeletSource(Protocol):
    async def read(self) -> KubeletSnapshot: ...


class APIView(Protocol):
    """The API server's view of this node (exporter.agent.node_objects.NodeObjects)."""

    @property
    def up(self) -> bool: ...

    @property
    def last_success(self) -> float | None: ...

    @property
    def error(self) -> str: ...

    def pods(self) -> tuple[PodInfo, ...] | None: ...


class DurationObserver(Protocol):
    def observe(self, seconds: float) -> None: ...


class ChangeObserver(Protocol):
    def changed(self, trigger: str) -> None: ...  # a cycle found the listing changed


class AgentSync:
    def __init__(
        self,
        runtime: RuntimeSource,
        kubelet: KubeletSource,
        read_host: Callable[[], HostSnapshot],
        durations: DurationObserver,
        *,
        api: APIView | None = None,
        stats: StatsSource | None = None,
        drift_grace_seconds: float = DEFAULT_GRACE_SECONDS,
        node: Callable[[], NodeInfo | None] = lambda: None,
        clock: Callable[[], float] = time.time,
        changes: ChangeObserver | None = None,
    ) -> None:
        self._runtime = runtime
        self._stats_source = stats
        self._stats: RuntimeStats | None = None
        self._stats_failing = False
        self._kubelet = kubelet
        self._read_host = read_host
        self._durations = durations
        self._clock = clock
        self._api = api
        self._drift = DriftView(drift_grace_seconds, node)  # node: its own, from its watch
        self._terminations = TerminationTracker()
        self._known_pod_uids: frozenset[str] = frozenset()
        self._listed: tuple[tuple[PodSandbox, ...], tuple[Container, ...]] | None = None
        self._phases_of: tuple[Container, ...] | None = None  # the containers of _phases
        self._told = ToldExits()
        self._phases: dict[PodPhase, int] = {}
        self._sources: dict[str, SourceState] = {}
        self._host: HostSnapshot | None = None
        self._kubelet_snapshot: KubeletSnapshot | None = None
        self._state = AgentState()
        self._synced = asyncio.Event()
        self._wake = asyncio.Event()
        self._changes = changes
        self._trigger: str | None = None  # of the next cycle, when it was asked for
        self._waiters: list[asyncio.Future[AgentState]] = []  # of the next cycle
        self.last_runtime_end: float | None = None
        self.last_probe_end: float | None = None

    @property
    def state(self) -> AgentState:
        return self._state

    async def wait_synced(self) -> None:
        await self._synced.wait()

    async def sync_once(self) -> AgentState:
        """Read every source once and publish the state: the node probes, then the runtime
        (whose drift needs kubelet's pod directories). The first cycle of :meth:`run`."""
        await self.probe_node()
        return await self.sync_runtime()

    def request_sync(self, trigger: str = TRIGGER_EVENT) -> asyncio.Future[AgentState]:
        """Ask for a runtime cycle starting after now (requests share it); the future is done
        with the state it published."""
        waiter: asyncio.Future[AgentState] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        if self._trigger != TRIGGER_EVENT:
            self._trigger = trigger
        self._wake.set()
        return waiter

    async def sync_runtime(self) -> AgentState:
        """One sync cycle: read the runtime's state and publish it, with what follows from it
        and the latest node probes. Timed by the durations observer."""
        waiters, self._waiters = self._waiters, []
        trigger, self._trigger = self._trigger or TRIGGER_PERIOD, None
        try:
            return await self._sync_runtime(trigger)
        finally:
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(self._state)

    def subscribed(self, since: float | None) -> None:
        """Every task event after ``since`` (Unix seconds) reaches :meth:`tell`; None while
        the agent is not subscribed."""
        self._told.subscribed(since)

    def tell(self, event: TaskEvent) -> bool:
        """Publish at once what a container's exit or OOM kill event says, over the listing
        last read (exporter.model.told_exits); the reads the event asks for confirm it.
        Whether what was published changed."""
        now = self._clock()
        listing = self._state.listing
        if not self._told.tell(event, now) or listing is None:
            return False
        snapshot = self._told.apply(listing, now)
        if snapshot is listing and self._state.runtime is listing:
            return False
        self._terminations.observe(snapshot.containers, now)
        self._observe_listing(snapshot, listing)
        self._publish(snapshot, listing, now)
        return True

    async def _sync_runtime(self, trigger: str) -> AgentState:
        started = time.perf_counter()
        runtime = await self._read_runtime()
        now = self._clock()
        previous = self._state.sources.get(SOURCE_CRI)
        self._sources[SOURCE_CRI] = source_state(previous, runtime, now)
        self._sources[SOURCE_APISERVER] = self._api_source()
        listing = runtime if isinstance(runtime, RuntimeSnapshot) else None
        snapshot = None
        if listing is not None:
            snapshot = self._told.apply(listing, now)
            if self._observe_listing(snapshot, listing) and self._changes is not None:
                self._changes.changed(trigger)
            self._terminations.observe(snapshot.containers, now)
        self._publish(snapshot, listing, now)
        self._durations.observe(time.perf_counter() - started)
        self.last_runtime_end = time.monotonic()
        self._synced.set()
        return self._state

    def _publish(
        self, snapshot: RuntimeSnapshot | None, listing: RuntimeSnapshot | None, now: float
    ) -> None:
        host, kubelet = self._host, self._kubelet_snapshot
        pods = self._api.pods() if self._api is not None else None
        self._state = AgentState(
            runtime=snapshot,
            listing=listing,
            stats=self._stats,
            phases=self._phases
            if snapshot is not None
            else phase_counts(None, self._known_pod_uids),
            terminations=dict(self._terminations.totals()),
            loops=tuple(self._terminations.loops(now)),
            host=host,
            pressure=pressure(host) if host else {},
            kubelet=kubelet,
            sources=dict(self._sources),
            api_phases=api_phase_counts(pods) if pods is not None else None,
            problems=tuple(pod_problems(pods, now)) if pods is not None else None,
            drift=self._drift.compute(pods, snapshot, kubelet, now),
            synced=True,
        )

    async def probe_node(self) -> AgentState:
        """Read the host and kubelet (concurrently) and publish them into the current state."""
        host, kubelet = await asyncio.gather(self._read_host_safely(), self._read_kubelet())
        now = self._clock()
        previous = self._state.sources
        self._sources[SOURCE_HOST] = source_state(previous.get(SOURCE_HOST), host, now)
        self._sources[SOURCE_KUBELET] = source_state(previous.get(SOURCE_KUBELET), kubelet, now)
        self._host = host if isinstance(host, HostSnapshot) else None
        self._kubelet_snapshot = kubelet if isinstance(kubelet, KubeletSnapshot) else None
        if self._state.synced:  # before the first sync cycle the state stays the empty one
            self._state = dataclasses.replace(
                self._state,
                host=self._host,
                pressure=pressure(self._host) if self._host else {},
                kubelet=self._kubelet_snapshot,
                sources=dict(self._sources),
            )
        self.last_probe_end = time.monotonic()
        return self._state

    @property
    def last_cycle_end(self) -> float | None:
        """When both schedules last finished (the older of the two), monotonic; None before."""
        if self.last_runtime_end is None or self.last_probe_end is None:
            return None
        return min(self.last_runtime_end, self.last_probe_end)

    def _observe_listing(self, snapshot: RuntimeSnapshot, listing: RuntimeSnapshot) -> bool:
        """Pods and their phases from what is published (``snapshot``: the runtime's
        ``listing`` with what events told), and whether the listing changed since a previous
        one; none of it again when unchanged (the reader hands back the same tuples)."""
        listed = self._listed
        unchanged = (
            listed is not None
            and listed[0] is listing.sandboxes
            and listed[1] is listing.containers
        )
        if unchanged and self._phases_of is snapshot.containers:
            return False
        self._listed = (listing.sandboxes, listing.containers)
        self._phases_of = snapshot.containers
        self._known_pod_uids = frozenset(pods_by_uid(snapshot))
        self._phases = phase_counts(snapshot, self._known_pod_uids)
        return listed is not None and not unchanged

    def _api_source(self) -> SourceState:
        if self._api is None:
            return SourceState(up=False, last_success=None, error="no API server configured")
        return SourceState(
            up=self._api.up, last_success=self._api.last_success, error=self._api.error
        )

    async def refresh_stats(self) -> RuntimeStats | None:
        """Read the containers' resource usage once and publish it into the current state:
        None (its families absent) when there is no stats source or the read failed."""
        if self._stats_source is None:
            return None
        try:
            stats: RuntimeStats | None = await self._stats_source.read_stats()
        except CRIError as exc:
            # Loudly once, then quietly: a runtime without stats must not flood the log.
            level = logging.DEBUG if self._stats_failing else logging.WARNING
            log.log(level, "runtime stats read failed", extra={"error": str(exc)})
            stats = None
        self._stats_failing = stats is None
        self._stats = stats
        self._state = dataclasses.replace(self._state, stats=stats)
        return stats

    async def run_stats(self, period: float) -> None:
        """Refresh the stats every ``period`` seconds until cancelled; the first refresh once
        the first sync cycle is published, so that it does not slow that cycle down."""
        await self.wait_synced()
        next_at = time.monotonic()
        while True:
            try:
                await self.refresh_stats()
            except Exception:  # a bug in one refresh must not end the stats for good
                log.exception("stats refresh failed")
            next_at = max(next_at + period, time.monotonic())
            await asyncio.sleep(next_at - time.monotonic())

    def wake(self) -> None:
        """Run the next cycle now rather than at its time (e.g. the API view just synced)."""
        self._wake.set()

    async def run(self, period: float) -> None:
        """Sync every ``period`` seconds until cancelled: one whole cycle first, then the
        runtime and the node probes each on its own schedule of that period. A slow cycle
        delays its own schedule, never overlaps itself, and never delays the other."""
        await _guarded(self.sync_once, "sync cycle failed")
        await asyncio.gather(
            self._every(period, self.sync_runtime, "sync cycle failed", self._wake),
            self._every(period, self.probe_node, "node probe failed"),
        )

    @staticmethod
    async def _every(
        period: float,
        cycle: Callable[[], Awaitable[object]],
        failed: str,
        wake: asyncio.Event | None = None,
    ) -> None:
        """Run ``cycle`` every ``period`` seconds, the first a period from now; re-anchor the
        schedule when behind or when ``wake`` is set (then run at once)."""
        next_at = time.monotonic() + period
        while True:
            woken = False
            delay = next_at - time.monotonic()
            if delay > 0 and wake is None:
                await asyncio.sleep(delay)
            elif delay > 0 and wake is not None:
                woken = await wait_set(wake, delay)
            if wake is not None:
                wake.clear()
            started = time.monotonic()
            await _guarded(cycle, failed)
            # Woken: the schedule starts again from then. Behind: run now and re-anchor.
            next_at = started + period if woken else next_at + period
            next_at = max(next_at, time.monotonic())

    async def _read_runtime(self) -> RuntimeSnapshot | Exception:
        try:
            return await self._runtime.read()
        except CRIError as exc:
            log_source_error(self._state.sources.get(SOURCE_CRI), SOURCE_CRI, exc)
            return exc

    async def _read_host_safely(self) -> HostSnapshot | Exception:
        try:
            return await asyncio.to_thread(self._read_host)
        except OSError as exc:
            log_source_error(self._state.sources.get(SOURCE_HOST), SOURCE_HOST, exc)
            return exc

    async def _read_kubelet(self) -> KubeletSnapshot | Exception:
        try:
            snapshot = await self._kubelet.read()
        except OSError as exc:
            log_source_error(self._state.sources.get(SOURCE_KUBELET), SOURCE_KUBELET, exc)
            return exc
        if not snapshot.healthy and was_up(self._state.sources.get(SOURCE_KUBELET)):
            log.warning("kubelet healthz failing", extra={"error": snapshot.error})
        return snapshot


async def _guarded(cycle: Callable[[], Awaitable[object]], failed: str) -> None:
    try:
        await cycle()
    except Exception:  # a bug in one cycle must not kill its loop
        log.exception(failed)
