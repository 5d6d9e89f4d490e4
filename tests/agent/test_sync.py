"""The sync loop with stand-in sources: each source fails alone, and the state says so."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from dataclasses import dataclass, field

import pytest

from exporter.agent.sync import AgentSync
from exporter.cri.errors import RuntimeTimeout, Unimplemented
from exporter.model.drift import DriftKind
from exporter.model.host import HostSnapshot, KubeletSnapshot
from exporter.model.kube import NodeCondition, NodeInfo, PodInfo
from exporter.model.phase import PodPhase
from exporter.model.runtime import (
    Container,
    ContainerState,
    ContainerStats,
    PodSandbox,
    RuntimeSnapshot,
    RuntimeStats,
    SandboxState,
)
from exporter.model.runtime_events import TOPIC_EXIT, TaskEvent
from tests.support.wait import until_async

NOW = 1_700_000_000.0


def _snapshot() -> RuntimeSnapshot:
    sandbox = PodSandbox(
        id="s1",
        name="web",
        namespace="default",
        uid="u1",
        attempt=0,
        state=SandboxState.READY,
        created_at=NOW - 60,
    )
    container = Container(
        id="c1",
        pod_sandbox_id="s1",
        name="app",
        attempt=0,
        state=ContainerState.RUNNING,
        created_at=NOW - 50,
        pod_uid="u1",
        pod_namespace="default",
        pod_name="web",
    )
    return RuntimeSnapshot(
        taken_at=NOW, version=None, conditions=(), sandboxes=(sandbox,), containers=(container,)
    )


@dataclass
class FakeRuntime:
    fail: bool = False
    stats_fail: bool = False
    reads: int = 0
    stats_reads: int = 0
    hang: asyncio.Event | None = None  # while set to an unset event, a read waits for it

    async def read(self) -> RuntimeSnapshot:
        self.reads += 1
        if self.hang is not None:
            await self.hang.wait()
        if self.fail:
            raise RuntimeTimeout("list_podsandbox", "DEADLINE_EXCEEDED", "deadline exceeded")
        return _snapshot()

    async def read_stats(self) -> RuntimeStats:
        self.stats_reads += 1
        if self.stats_fail:
            raise Unimplemented("list_container_stats", "UNIMPLEMENTED", "not implemented")
        usage = ContainerStats("c1", NOW, memory_working_set_bytes=self.stats_reads << 20)
        return RuntimeStats(taken_at=NOW + self.stats_reads, containers=(usage,))


@dataclass
class FakeKubelet:
    healthy: bool = False
    reads: int = 0
    hang: asyncio.Event | None = None  # while set to an unset event, a read waits for it

    async def read(self) -> KubeletSnapshot:
        self.reads += 1
        if self.hang is not None:
            await self.hang.wait()
        return KubeletSnapshot(
            taken_at=NOW, healthy=self.healthy, pod_uids=frozenset(), pod_dir_readable=False
        )


@dataclass
class Durations:
    seen: list[float] = field(default_factory=list)

    def observe(self, seconds: float) -> None:
        self.seen.append(seconds)


def _host() -> HostSnapshot:
    return HostSnapshot(
        taken_at=NOW,
        memory_total_bytes=8 << 30,
        memory_available_bytes=4 << 30,
        filesystems=(),
        pids_in_use=100,
        pid_max=4_194_304,
    )


def _sync(runtime: FakeRuntime, kubelet: FakeKubelet, durations: Durations) -> AgentSync:
    return AgentSync(runtime, kubelet, _host, durations, clock=lambda: NOW)


async def test_healthy_runtime_reports_running_pod() -> None:
    durations = Durations()
    state = await _sync(FakeRuntime(), FakeKubelet(healthy=True), durations).sync_once()
    assert state.synced
    assert state.phases[PodPhase.RUNNING] == 1
    assert state.sources["runtime"].up
    assert state.sources["runtime"].last_success == NOW
    assert state.sources["kubelet"].up
    assert state.host is not None
    assert len(durations.seen) == 1


async def test_runtime_down_marks_known_pods_unknown_and_keeps_host() -> None:
    runtime = FakeRuntime()
    sync = _sync(runtime, FakeKubelet(), Durations())
    await sync.sync_once()
    runtime.fail = True
    state = await sync.sync_once()
    assert state.runtime is None
    assert not state.sources["runtime"].up
    assert state.sources["runtime"].last_success == NOW  # the last success is kept
    assert "deadline" in state.sources["runtime"].error
    assert state.phases[PodPhase.UNKNOWN] == 1
    assert state.phases[PodPhase.RUNNING] == 0
    assert state.sources["host"].up
    assert state.host is not None
    # a missing kubelet is a down source, not a crash
    assert not state.sources["kubelet"].up
    assert state.sources["kubelet"].last_success is None


async def test_runtime_recovers() -> None:
    runtime = FakeRuntime(fail=True)
    sync = _sync(runtime, FakeKubelet(), Durations())
    assert not (await sync.sync_once()).sources["runtime"].up
    runtime.fail = False
    state = await sync.sync_once()
    assert state.sources["runtime"].up
    assert state.phases[PodPhase.RUNNING] == 1


async def test_host_probe_error_is_a_down_source() -> None:
    def broken_host() -> HostSnapshot:
        raise OSError("statvfs failed")

    sync = AgentSync(FakeRuntime(), FakeKubelet(), broken_host, Durations(), clock=lambda: NOW)
    state = await sync.sync_once()
    assert not state.sources["host"].up
    assert state.host is None
    assert state.sources["runtime"].up


async def test_wake_runs_the_next_cycle_now_not_a_period_later() -> None:
    durations = Durations()
    sync = _sync(FakeRuntime(), FakeKubelet(), durations)
    task = asyncio.create_task(sync.run(period=3600))
    try:
        await sync.wait_synced()
        assert len(durations.seen) == 1
        sync.wake()
        await until_async(
            lambda: len(durations.seen) >= 2, timeout=5, what="the woken cycle", interval=0.01
        )
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert len(durations.seen) == 2  # one wake, one extra cycle


async def _cancel(*tasks: asyncio.Task[None]) -> None:
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_sync_cycle_reads_no_stats() -> None:
    runtime = FakeRuntime()
    sync = AgentSync(runtime, FakeKubelet(), _host, Durations(), stats=runtime, clock=lambda: NOW)
    state = await sync.sync_once()
    assert runtime.stats_reads == 0
    assert state.stats is None
    assert state.runtime is not None


async def test_state_follows_the_sync_period_and_stats_their_own() -> None:
    """Many sync cycles, one stats refresh: the stats period (an hour here) is its own."""
    runtime = FakeRuntime()
    durations = Durations()
    sync = AgentSync(runtime, FakeKubelet(), _host, durations, stats=runtime, clock=lambda: NOW)
    tasks = [
        asyncio.create_task(sync.run(period=0.01)),
        asyncio.create_task(sync.run_stats(period=3600)),
    ]
    try:
        await until_async(lambda: len(durations.seen) >= 5, timeout=20, what="five sync cycles")
        await until_async(
            lambda: sync.state.stats is not None, timeout=20, what="the first stats refresh"
        )
        cycles = len(durations.seen)
        await until_async(
            lambda: len(durations.seen) >= cycles + 3, timeout=20, what="three more sync cycles"
        )
    finally:
        await _cancel(*tasks)
    assert runtime.stats_reads == 1
    stats = sync.state.stats
    assert stats is not None  # carried into every state published after the refresh
    assert stats.taken_at == NOW + 1


async def test_stats_refresh_on_their_period_between_sync_cycles() -> None:
    """Stats refreshed many times while the state stays the one of the only sync cycle."""
    runtime = FakeRuntime()
    durations = Durations()
    sync = AgentSync(runtime, FakeKubelet(), _host, durations, stats=runtime, clock=lambda: NOW)
    tasks = [
        asyncio.create_task(sync.run(period=3600)),
        asyncio.create_task(sync.run_stats(period=0.01)),
    ]
    try:
        await sync.wait_synced()
        first_state = sync.state.runtime
        await until_async(
            lambda: runtime.stats_reads >= 3, timeout=20, what="three stats refreshes"
        )
    finally:
        await _cancel(*tasks)
    assert len(durations.seen) == runtime.reads == 1
    assert sync.state.runtime is first_state
    stats = sync.state.stats
    assert stats is not None
    assert stats.taken_at == NOW + runtime.stats_reads
    assert stats.containers[0].memory_working_set_bytes == runtime.stats_reads << 20


async def test_the_first_stats_refresh_waits_for_the_first_sync_cycle() -> None:
    runtime = FakeRuntime()
    sync = AgentSync(runtime, FakeKubelet(), _host, Durations(), stats=runtime, clock=lambda: NOW)
    stats = asyncio.create_task(sync.run_stats(period=3600))
    try:
        for _ in range(20):  # let the stats task run as far as it can on its own
            await asyncio.sleep(0)
        assert runtime.stats_reads == 0
        await sync.sync_once()
        await until_async(
            lambda: runtime.stats_reads == 1, timeout=20, what="the first stats refresh"
        )
    finally:
        await _cancel(stats)
    assert runtime.reads == 1


async def test_a_failed_stats_read_leaves_no_stats_and_the_state_alone() -> None:
    runtime = FakeRuntime()
    sync = AgentSync(runtime, FakeKubelet(), _host, Durations(), stats=runtime, clock=lambda: NOW)
    await sync.sync_once()
    assert await sync.refresh_stats() is not None
    runtime.stats_fail = True
    assert await sync.refresh_stats() is None
    state = sync.state
    assert state.stats is None  # absent, not the old values or zero
    assert state.sources["runtime"].up
    assert (await sync.sync_once()).stats is None
    runtime.stats_fail = False
    assert await sync.refresh_stats() is not None
    assert (await sync.sync_once()).stats is not None


async def test_without_a_stats_source_nothing_is_refreshed() -> None:
    sync = _sync(FakeRuntime(), FakeKubelet(), Durations())
    await sync.sync_once()
    assert await sync.refresh_stats() is None
    assert sync.state.stats is None


@dataclass
class ListingRuntime:
    """Hands back the snapshot it holds, the same tuples until told otherwise (as the reader
    does when nothing changed)."""

    snapshot: RuntimeSnapshot = field(default_factory=_snapshot)

    async def read(self) -> RuntimeSnapshot:
        return self.snapshot


async def test_an_unchanged_listing_keeps_its_phases_and_a_change_is_seen() -> None:
    runtime = ListingRuntime()
    sync = AgentSync(runtime, FakeKubelet(), _host, Durations(), clock=lambda: NOW)
    assert (await sync.sync_once()).phases[PodPhase.RUNNING] == 1
    assert (await sync.sync_once()).phases[PodPhase.RUNNING] == 1  # the same tuples again
    (container,) = runtime.snapshot.containers
    done = dataclasses.replace(
        container, state=ContainerState.EXITED, exit_code=1, reason="Error", finished_at=NOW
    )
    runtime.snapshot = dataclasses.replace(runtime.snapshot, containers=(done,))
    state = await sync.sync_once()
    assert state.phases[PodPhase.FAILED] == 1
    assert state.phases[PodPhase.RUNNING] == 0
    assert state.terminations["Error"] == 1
    assert (await sync.sync_once()).terminations["Error"] == 1  # counted once


class Changes:
    def __init__(self) -> None:
        self.triggers: list[str] = []

    def changed(self, trigger: str) -> None:
        self.triggers.append(trigger)


async def test_an_exit_event_is_published_at_once_and_the_listing_then_stands() -> None:
    runtime, changes = ListingRuntime(), Changes()
    sync = AgentSync(runtime, FakeKubelet(), _host, Durations(), clock=lambda: NOW, changes=changes)
    sync.subscribed(NOW - 100)
    listed = await sync.sync_once()
    (container,) = runtime.snapshot.containers
    sync.tell(TaskEvent(TOPIC_EXIT, "c1", NOW, "c1", exit_status=1, exited_at=NOW - 0.01))
    # Published before any read: the pod failed, its termination counted.
    told = sync.state
    assert told is not listed
    assert told.listing is listed.listing  # the runtime's own listing, as read
    assert told.phases[PodPhase.FAILED] == 1
    assert told.terminations["Error"] == 1
    assert changes.triggers == []  # a change told, not a cycle that found one
    # A read whose listing still shows it running keeps what was told, counted once.
    again = await sync.sync_once()
    assert again.runtime is not None
    assert again.runtime.containers[0].state is ContainerState.EXITED
    assert (again.phases[PodPhase.FAILED], again.terminations["Error"]) == (1, 1)
    assert changes.triggers == []
    # The listing shows the exit: the runtime's own record is published, still counted once.
    done = dataclasses.replace(
        container, state=ContainerState.EXITED, exit_code=1, reason="Error", finished_at=NOW
    )
    runtime.snapshot = dataclasses.replace(runtime.snapshot, containers=(done,))
    shown = await sync.sync_once()
    assert shown.runtime is shown.listing is runtime.snapshot
    assert (shown.phases[PodPhase.FAILED], shown.terminations["Error"]) == (1, 1)
    assert changes.triggers == ["period"]


async def test_an_event_before_the_first_read_or_after_a_failed_one_publishes_nothing() -> None:
    runtime = FakeRuntime()
    sync = _sync(runtime, FakeKubelet(), Durations())
    sync.subscribed(NOW - 100)
    exit_ = TaskEvent(TOPIC_EXIT, "c1", NOW, "c1", exit_status=1, exited_at=NOW)
    sync.tell(exit_)
    assert not sync.state.synced
    await sync.sync_once()  # the listing shows c1 running; the exit told before stands over it
    assert sync.state.terminations["Error"] == 1
    runtime.fail = True
    down = await sync.sync_once()
    sync.tell(exit_)
    assert sync.state is down
    assert down.runtime is None
    assert down.listing is None


async def test_a_hung_kubelet_probe_does_not_hold_the_runtime_cycles() -> None:
    runtime, kubelet, durations = FakeRuntime(), FakeKubelet(healthy=True), Durations()
    sync = _sync(runtime, kubelet, durations)
    task = asyncio.create_task(sync.run(period=0.01))
    try:
        await sync.wait_synced()
        kubelet.hang = asyncio.Event()
        await until_async(lambda: kubelet.reads >= 2, timeout=20, what="the node probe to hang")
        reads = runtime.reads
        await until_async(
            lambda: runtime.reads >= reads + 3, timeout=20, what="runtime cycles during the hang"
        )
        assert kubelet.reads == 2  # still the one hung probe
        assert sync.state.sources["runtime"].up
        assert sync.state.sources["kubelet"].up  # its last answer stands until the next
        probed = sync.last_probe_end
        assert probed is not None
        assert sync.last_cycle_end == probed  # the older schedule: liveness sees the hang
        kubelet.hang.set()
        await until_async(
            lambda: sync.last_probe_end != probed, timeout=20, what="the probe to finish"
        )
    finally:
        await _cancel(task)


async def test_a_hung_runtime_does_not_hold_the_node_probes() -> None:
    host_reads = 0

    def counting_host() -> HostSnapshot:
        nonlocal host_reads
        host_reads += 1
        return _host()

    runtime, kubelet = FakeRuntime(), FakeKubelet(healthy=True)
    sync = AgentSync(runtime, kubelet, counting_host, Durations(), clock=lambda: NOW)
    task = asyncio.create_task(sync.run(period=0.01))
    try:
        await sync.wait_synced()
        runtime.hang = asyncio.Event()
        await until_async(lambda: runtime.reads >= 2, timeout=20, what="the runtime read to hang")
        reads = host_reads
        await until_async(
            lambda: host_reads >= reads + 3, timeout=20, what="host probes during the hang"
        )
        assert kubelet.reads >= 3
        assert runtime.reads == 2
        assert sync.state.host is not None
        runtime.hang.set()
    finally:
        await _cancel(task)


async def test_node_probes_before_the_first_cycle_publish_nothing() -> None:
    sync = _sync(FakeRuntime(), FakeKubelet(healthy=True), Durations())
    state = await sync.probe_node()
    assert not state.synced
    assert state.host is None
    state = await sync.sync_runtime()  # the cycle takes the probes' results
    assert state.synced
    assert state.host is not None
    assert state.sources["kubelet"].up
    assert sync.last_cycle_end is not None


@dataclass
class FakeView:
    """The API server's view: the pod of the runtime's sandbox, evicted (its deletion past)."""

    def pods(self) -> tuple[PodInfo, ...]:
        evicted = PodInfo(
            uid="u1",
            namespace="default",
            name="web",
            node_name="node-a",
            phase="Running",
            created_at=NOW - 600,
            deletion_timestamp=NOW - 5,
            deletion_grace_period_seconds=30,
        )
        return (evicted,)

    @property
    def up(self) -> bool:
        return True

    @property
    def last_success(self) -> float | None:
        return NOW

    @property
    def error(self) -> str:
        return ""


@pytest.mark.parametrize(
    ("healthy", "ready", "orphans"),
    [
        pytest.param(False, "Unknown", 1, id="kubelet gone: the evicted pod's sandbox"),
        pytest.param(True, "Unknown", 0, id="kubelet answers"),
        pytest.param(False, "True", 0, id="Node Ready"),
    ],
)
async def test_drift_takes_the_kubelet_for_gone_from_its_probe_and_the_node(
    healthy: bool, ready: str, orphans: int
) -> None:
    node = NodeInfo("node-a", "n1", NOW - 900, conditions=(NodeCondition("Ready", ready),))
    sync = AgentSync(
        FakeRuntime(),
        FakeKubelet(healthy=healthy),
        _host,
        Durations(),
        api=FakeView(),
        node=lambda: node,
        clock=lambda: NOW,
    )
    state = await sync.sync_once()
    assert state.drift is not None
    assert state.drift.counts()[DriftKind.ORPHAN_SANDBOX] == orphans
