"""The sync loop with stand-in sources: each source fails alone, and the state says so."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from exporter.agent.sync import AgentSync
from exporter.cri.errors import RuntimeTimeout
from exporter.model.host import HostSnapshot, KubeletSnapshot
from exporter.model.phase import PodPhase
from exporter.model.runtime import (
    Container,
    ContainerState,
    PodSandbox,
    RuntimeSnapshot,
    SandboxState,
)

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

    async def read(self) -> RuntimeSnapshot:
        if self.fail:
            raise RuntimeTimeout("list_podsandbox", "DEADLINE_EXCEEDED", "deadline exceeded")
        return _snapshot()


@dataclass
class FakeKubelet:
    healthy: bool = False

    async def read(self) -> KubeletSnapshot:
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
        deadline = asyncio.get_running_loop().time() + 5
        while len(durations.seen) < 2:
            assert asyncio.get_running_loop().time() < deadline, "woken cycle did not run"
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert len(durations.seen) == 2  # one wake, one extra cycle
