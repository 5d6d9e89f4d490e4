"""Stopping background tasks the same way everywhere; waiting for an event with a timeout;
sharing the event loop fairly."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable

#: How long a run of synchronous work may hold the event loop before it lets others in.
SLICE_SECONDS = 0.002


class TimeSlice:
    """Hands the event loop back once a run of synchronous work has held it ``budget``
    seconds. For loops over many items that each cost little but add up (a burst of watch
    events read from one chunk, the alerts an intake pass decides): without it, one such loop
    holds every webhook acknowledgement and probe for its whole run."""

    def __init__(
        self, budget: float = SLICE_SECONDS, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self._budget = budget
        self._clock = clock
        self._since = clock()

    async def pause(self) -> None:
        """Yield to the loop if this slice is used up (a no-op otherwise)."""
        if self._clock() - self._since >= self._budget:
            await asyncio.sleep(0)
            self._since = self._clock()


async def cancel_and_wait(tasks: Iterable[asyncio.Task[object]]) -> None:
    """Cancel every task, then wait for each to finish its cleanup."""
    pending = list(tasks)
    for task in pending:
        task.cancel()
    for task in pending:
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def wait_set(event: asyncio.Event, seconds: float) -> bool:
    """Wait at most ``seconds`` for ``event``; whether it is set. Use it, not
    ``asyncio.wait_for(event.wait(), seconds)``: in Python 3.11 wait_for drops a cancel that
    lands as the event is set, and the cancelled task runs on (a shutdown that never ends)."""
    if event.is_set():
        return True
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()
    return event.is_set()
