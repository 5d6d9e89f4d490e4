"""The async side of the API write budget: wait for a token of a shared TokenBucket.

One limiter is shared by every writer of a process (the controller's ``--apiserver.qps`` and
``--apiserver.burst``). Waiters are served by priority, then in arrival order. A write's priority
is the ``write_priority`` its task is running under: 0, the most urgent, unless set. The
controller drives each rollback step at the step's index, so that the first writes of a rollback
that has not touched its node yet (its creation, its first step) do not queue behind the later
steps of rollbacks already under way: in a wave of failures every node is cordoned soon, and the
drains and deletes follow at the budget's pace. A waiter that is cancelled takes no token.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from exporter.model.ratelimit import TokenBucket

_PRIORITY: ContextVar[int] = ContextVar("nodesync_write_priority", default=0)


@contextmanager
def write_priority(level: int) -> Iterator[None]:
    """Writes made inside (by this task, and tasks it starts) wait at ``level``: a lower one is
    served first."""
    token = _PRIORITY.set(level)
    try:
        yield
    finally:
        _PRIORITY.reset(token)


@dataclass(order=True)
class _Waiter:
    level: int
    seq: int
    turn: asyncio.Future[None] = field(compare=False)


class AsyncRateLimiter:
    """``await limiter.acquire()`` before each write.

    ``clock`` must be the clock the bucket was built with; ``sleep`` is injectable so tests can
    run on a fake clock.
    """

    def __init__(
        self,
        bucket: TokenBucket,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.bucket = bucket
        self._clock = clock
        self._sleep = sleep
        self._queue: list[_Waiter] = []  # a heap: the head is the one that takes the next token
        self._seq = itertools.count()
        self.waited_seconds = 0.0  # total time the head of the queue slept for a token

    @classmethod
    def per_second(cls, qps: float, burst: int) -> AsyncRateLimiter:
        """A limiter on the monotonic clock."""
        return cls(TokenBucket(qps, burst, time.monotonic))

    def tokens(self) -> float:
        """The budget left now (for a gauge)."""
        return self.bucket.tokens(self._clock())

    async def acquire(self) -> None:
        """Wait until this caller heads the queue and a token is available, and take it."""
        loop = asyncio.get_running_loop()
        waiter = _Waiter(_PRIORITY.get(), next(self._seq), loop.create_future())
        heapq.heappush(self._queue, waiter)
        try:
            while True:
                if self._queue[0] is not waiter:
                    # Woken when the head leaves and this one is the next.
                    waiter.turn = loop.create_future()
                    await waiter.turn
                    continue
                now = self._clock()
                if self.bucket.try_take(now):
                    return
                delay = self.bucket.delay_until_available(now)
                self.waited_seconds += delay
                # A more urgent waiter may arrive meanwhile: then it heads the queue, and this
                # one, awake, waits for its turn again.
                await self._sleep(delay)
        finally:
            was_head = self._queue[0] is waiter
            self._queue.remove(waiter)
            heapq.heapify(self._queue)
            if was_head and self._queue and not self._queue[0].turn.done():
                self._queue[0].turn.set_result(None)
