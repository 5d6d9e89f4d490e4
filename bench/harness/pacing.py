"""Requests on a schedule, and a bound on how many are in flight.

A schedule is monotonic: each item is due at ``origin + k * interval``, so one that is sent
late does not shift the ones after it, and how late it was is a figure of the run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Sequence
from typing import TypeVar

T = TypeVar("T")


async def sleep_until(due: float) -> float:
    """Sleep until ``time.monotonic()`` reaches ``due``; how late the wake-up was (>= 0)."""
    delay = due - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)
    return max(0.0, time.monotonic() - due)


async def bounded(awaitables: Sequence[Awaitable[T]], parallel: int) -> list[T]:
    """Await them with at most ``parallel`` running at a time; the results in order."""
    gate = asyncio.Semaphore(parallel)

    async def one(awaitable: Awaitable[T]) -> T:
        async with gate:
            return await awaitable

    return list(await asyncio.gather(*(one(a) for a in awaitables)))
