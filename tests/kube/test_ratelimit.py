"""The async limiter on a fake clock: how long N acquisitions take, fairness, cancellation."""

from __future__ import annotations

import asyncio

import pytest

from exporter.kube.ratelimit import AsyncRateLimiter
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


def test_per_second_builds_a_limiter_on_the_monotonic_clock() -> None:
    lim = AsyncRateLimiter.per_second(5.0, 10)
    assert (lim.bucket.qps, lim.bucket.burst) == (5.0, 10)
    assert lim.tokens() == pytest.approx(10.0)
