"""The agent's task-event driver, with scripted subscriptions: what it asks the sync loop for,
and what it says about the subscription."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator

import pytest

from exporter.agent import runtime_events
from exporter.agent.runtime_events import RuntimeEvents
from exporter.agent.state import AgentState
from exporter.agent.sync import TRIGGER_EVENT, TRIGGER_RESUBSCRIBE
from exporter.cri.errors import RuntimeUnavailable, Unimplemented
from exporter.model.runtime import Container, ContainerState, RuntimeSnapshot
from exporter.model.runtime_events import TOPIC_EXIT, TOPIC_OOM, TaskEvent
from tests.support.wait import until_async


class Sync:
    """Answers each request with a snapshot listing ``containers`` as they are then, and
    records what it is told."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.containers: tuple[Container, ...] = ()
        self.told: list[TaskEvent] = []
        self.since: list[float | None] = []
        self.publishes = False  # whether a told event changes what is published

    def request_sync(self, trigger: str = TRIGGER_EVENT) -> asyncio.Future[AgentState]:
        self.requests.append(trigger)
        snapshot = RuntimeSnapshot(1.0, None, (), (), self.containers)
        done: asyncio.Future[AgentState] = asyncio.get_running_loop().create_future()
        done.set_result(AgentState(runtime=snapshot, listing=snapshot, synced=True))
        return done

    def tell(self, event: TaskEvent) -> bool:
        self.told.append(event)
        return self.publishes

    def subscribed(self, since: float | None) -> None:
        self.since.append(since)


class Observer:
    def __init__(self) -> None:
        self.up: list[bool] = []
        self.events: list[str] = []

    def set_up(self, up: bool) -> None:
        self.up.append(up)

    def event(self, topic: str) -> None:
        self.events.append(topic)


def _container(cid: str, state: ContainerState) -> Container:
    return Container(
        id=cid, pod_sandbox_id="s1", name=cid, attempt=0, state=state, created_at=1.0
    )  # fmt: skip


async def test_a_runtime_without_the_events_service_leaves_the_relist_alone() -> None:
    calls = 0

    async def unimplemented() -> AsyncIterator[TaskEvent]:
        nonlocal calls
        calls += 1
        raise Unimplemented("events_subscribe", "UNIMPLEMENTED")
        yield  # an async generator

    sync, observer = Sync(), Observer()
    task = asyncio.create_task(RuntimeEvents(unimplemented, sync, observer).run())
    try:
        await until_async(lambda: calls == 1, timeout=5.0, what="the one subscription attempt")
        await asyncio.sleep(0.3)  # past the time a subscription needs to hold
        assert observer.up == [False]
        assert sync.requests == []  # nothing asked of the sync loop: the period alone
        assert calls == 1  # not retried in a tight loop
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_events_ask_for_cycles_until_the_listing_shows_them() -> None:
    feed: asyncio.Queue[TaskEvent] = asyncio.Queue()

    async def stream() -> AsyncIterator[TaskEvent]:
        while True:
            yield await feed.get()

    sync, observer = Sync(), Observer()
    sync.containers = (_container("c1", ContainerState.RUNNING),)
    driver = RuntimeEvents(stream, sync, observer, wall=lambda: 99.0)
    task = asyncio.create_task(driver.run())
    try:
        await until_async(
            lambda: observer.up == [False, True], timeout=5.0, what="the subscription to come up"
        )
        assert sync.requests == [TRIGGER_RESUBSCRIBE]  # the relist once subscribed
        assert sync.since == [99.0]  # every event from then on reaches it
        feed.put_nowait(TaskEvent(TOPIC_OOM, "c1", 100.0))
        feed.put_nowait(TaskEvent(TOPIC_OOM, "c1", 100.01))  # the same OOM kill again
        feed.put_nowait(TaskEvent(TOPIC_EXIT, "c1", 100.02, "exec-1"))  # an exec's exit
        await until_async(
            lambda: len(observer.events) == 2, timeout=5.0, what="two events observed"
        )
        assert observer.events == ["oom", "exit"]
        # Told to the sync loop: the OOM kill once, not the exec's exit.
        assert sync.told == [TaskEvent(TOPIC_OOM, "c1", 100.0)]
        # c1 is still listed running: the driver reads again, and again.
        await until_async(
            lambda: sync.requests.count(TRIGGER_EVENT) >= 3, timeout=5.0, what="three event cycles"
        )
        sync.containers = (_container("c1", ContainerState.EXITED),)
        await asyncio.sleep(0.3)
        settled = len(sync.requests)
        await asyncio.sleep(0.5)
        assert len(sync.requests) == settled  # shown: no more reads
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_an_exit_published_from_its_event_is_read_from_the_runtime_later() -> None:
    feed: asyncio.Queue[TaskEvent] = asyncio.Queue()

    async def stream() -> AsyncIterator[TaskEvent]:
        while True:
            yield await feed.get()

    sync, observer = Sync(), Observer()
    sync.publishes = True
    sync.containers = (_container("c1", ContainerState.RUNNING),)
    task = asyncio.create_task(RuntimeEvents(stream, sync, observer, told_read_after=2.0).run())
    try:
        await until_async(lambda: observer.up == [False, True], timeout=5.0, what="subscribed")
        exit_ = TaskEvent(TOPIC_EXIT, "c1", 100.0, "c1", exit_status=1, exited_at=100.0)
        feed.put_nowait(exit_)
        await until_async(lambda: sync.told == [exit_], timeout=5.0, what="the exit told")
        assert sync.requests == [TRIGGER_RESUBSCRIBE]  # no read in the scrapes' milliseconds
        # Then the reads until the listing shows it, as for any event.
        await until_async(
            lambda: sync.requests.count(TRIGGER_EVENT) >= 2, timeout=5.0, what="the reads"
        )
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_an_ended_subscription_tells_the_sync_loop_events_may_be_missed() -> None:
    end = asyncio.Event()

    async def until_ended() -> AsyncIterator[TaskEvent]:
        await end.wait()
        raise RuntimeUnavailable("events_subscribe", "UNAVAILABLE")
        yield

    sync, observer = Sync(), Observer()
    task = asyncio.create_task(RuntimeEvents(until_ended, sync, observer, wall=lambda: 7.0).run())
    try:
        await until_async(lambda: sync.since == [7.0], timeout=5.0, what="the subscription")
        end.set()  # containerd went away; its next subscriptions fail at once
        await until_async(lambda: observer.up == [False, True, False], timeout=5.0, what="down")
        assert sync.since == [7.0, None]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_an_ended_subscription_is_renewed_with_a_growing_delay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runtime_events, "RETRY_MIN_SECONDS", 0.05)
    attempts: list[float] = []

    async def down() -> AsyncIterator[TaskEvent]:
        attempts.append(time.monotonic())
        raise RuntimeUnavailable("events_subscribe", "UNAVAILABLE")
        yield

    sync, observer = Sync(), Observer()
    task = asyncio.create_task(RuntimeEvents(down, sync, observer).run())
    try:
        await until_async(
            lambda: len(attempts) >= 4, timeout=5.0, what="four subscription attempts"
        )
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert gaps[0] >= 0.05
    assert gaps[2] >= 2 * gaps[0] * 0.9  # doubling
    assert observer.up == [False]
    assert sync.requests == []
    assert sync.since == []  # never subscribed: nothing is complete
