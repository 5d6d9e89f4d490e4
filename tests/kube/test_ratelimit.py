"""The async limiter on a fake clock: how long N acquisitions take, fairness, priority,
cancellation."""

from __future__ import annotations

import asyncio

import pytest

from exporter.kube.ratelimit import AsyncRateLimiter, write_priority
from exporter.model.ratelimit import TokenBucket


class FakeClock:
    """Time moves only when someone sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


def limiter(clock: FakeClock, qps: float, burst: int) -> AsyncRateLimiter:
    return AsyncRateLimiter(TokenBucket(qps, burst, clock), clock=clock, sleep=clock.sleep)


@pytest.mark.parametrize(("n", "qps", "burst"), [(10, 2.0, 3), (5, 1.0, 5), (20, 10.0, 1)])
async def test_n_acquisitions_take_at_least_n_minus_burst_over_qps(
    n: int, qps: float, burst: int
) -> None:
    clock = FakeClock()
    lim = limiter(clock, qps, burst)
    for _ in range(n):
        await lim.acquire()
    expected = max(0, n - burst) / qps
    assert clock.now >= expected - 1e-9
    assert clock.now == pytest.approx(expected)
    assert lim.waited_seconds == pytest.approx(expected)


async def test_the_burst_is_free_and_the_budget_shows_what_is_left() -> None:
    clock = FakeClock()
    lim = limiter(clock, 1.0, 3)
    assert lim.tokens() == 3.0
    await lim.acquire()
    await lim.acquire()
    assert clock.sleeps == []
    assert lim.tokens() == 1.0


async def test_concurrent_waiters_are_served_in_order() -> None:
    clock = FakeClock()
    lim = limiter(clock, 1.0, 1)
    order: list[int] = []

    async def take(i: int) -> None:
        await lim.acquire()
        order.append(i)

    await asyncio.gather(*(take(i) for i in range(5)))
    assert order == [0, 1, 2, 3, 4]
    assert clock.now == pytest.approx(4.0)


async def test_a_more_urgent_waiter_goes_first_and_equals_keep_their_order() -> None:
    clock = FakeClock()
    lim = limiter(clock, 1.0, 1)
    await lim.acquire()  # the burst is spent: everyone below waits
    order: list[str] = []

    async def take(label: str, level: int) -> None:
        with write_priority(level):
            await lim.acquire()
        order.append(label)

    # Queued in this order; served by level, then by arrival.
    await asyncio.gather(
        take("late-a", 3), take("late-b", 3), take("new-a", 0), take("mid", 1), take("new-b", 0)
    )
    assert order == ["new-a", "new-b", "mid", "late-a", "late-b"]
    assert clock.now == pytest.approx(5.0)  # the budget itself is unchanged


class ParkedSleep:
    """A sleep that parks every sleeper until released, then moves the clock on."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.parked = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, seconds: float) -> None:
        self.parked.set()
        await self.release.wait()
        self.clock.now += seconds


async def test_an_urgent_arrival_overtakes_a_sleeping_head_which_then_waits_its_turn() -> None:
    clock = FakeClock()
    sleep = ParkedSleep(clock)
    lim = AsyncRateLimiter(TokenBucket(1.0, 1, clock), clock=clock, sleep=sleep)
    await lim.acquire()
    order: list[str] = []

    async def take(label: str, level: int) -> None:
        with write_priority(level):
            await lim.acquire()
        order.append(label)

    late = asyncio.create_task(take("late", 2))
    async with asyncio.timeout(5):
        await sleep.parked.wait()  # the late one heads the queue, asleep for the token
    urgent = asyncio.create_task(take("urgent", 0))
    await asyncio.sleep(0)  # queued: it heads the queue now
    sleep.release.set()
    async with asyncio.timeout(5):
        await asyncio.gather(late, urgent)
    assert order == ["urgent", "late"]


async def test_a_task_started_under_a_priority_keeps_it_and_the_default_is_most_urgent() -> None:
    clock = FakeClock()
    sleep = ParkedSleep(clock)
    lim = AsyncRateLimiter(TokenBucket(1.0, 1, clock), clock=clock, sleep=sleep)
    await lim.acquire()
    order: list[str] = []

    async def take(label: str) -> None:
        await lim.acquire()
        order.append(label)

    holder = asyncio.create_task(take("holder"))
    async with asyncio.timeout(5):
        await sleep.parked.wait()  # the holder heads the queue, asleep until the next token
    with write_priority(5):
        background = asyncio.create_task(take("background"))
    await asyncio.sleep(0)  # queued behind the holder
    default = asyncio.create_task(take("default"))
    await asyncio.sleep(0)  # queued too, after the background one
    sleep.release.set()
    async with asyncio.timeout(5):
        await asyncio.gather(holder, background, default)
    assert order == ["holder", "default", "background"]


async def test_a_cancelled_waiter_takes_no_token_and_frees_the_queue() -> None:
    clock = FakeClock()
    waiting = asyncio.Event()

    async def sleep_forever(seconds: float) -> None:
        waiting.set()
        await asyncio.Event().wait()

    lim = AsyncRateLimiter(TokenBucket(0.5, 1, clock), clock=clock, sleep=sleep_forever)
    await lim.acquire()
    waiter = asyncio.create_task(lim.acquire())
    await waiting.wait()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    clock.now += 2.0  # one token refilled: still there for the next caller
    assert lim.tokens() == pytest.approx(1.0)
    async with asyncio.timeout(5):
        await lim.acquire()
    assert lim.tokens() == pytest.approx(0.0)


async def test_a_cancelled_head_hands_the_turn_to_the_next_waiter() -> None:
    clock = FakeClock()
    sleep = ParkedSleep(clock)
    lim = AsyncRateLimiter(TokenBucket(1.0, 1, clock), clock=clock, sleep=sleep)
    await lim.acquire()
    head = asyncio.create_task(lim.acquire())
    async with asyncio.timeout(5):
        await sleep.parked.wait()
    with write_priority(1):
        second = asyncio.create_task(lim.acquire())
    await asyncio.sleep(0)
    head.cancel()
    with pytest.raises(asyncio.CancelledError):
        await head
    sleep.release.set()
    async with asyncio.timeout(5):
        await second  # it was woken to head the queue, slept for the token and took it
    assert lim.tokens() == pytest.approx(0.0)


def test_per_second_builds_a_limiter_on_the_monotonic_clock() -> None:
    lim = AsyncRateLimiter.per_second(5.0, 10)
    assert (lim.bucket.qps, lim.bucket.burst) == (5.0, 10)
    assert lim.tokens() == pytest.approx(10.0)
