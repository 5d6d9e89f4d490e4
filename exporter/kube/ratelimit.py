"""The async side of the API write budget: wait for a token of a shared TokenBucket.

One limiter is shared by every writer of a process (the controller's ``--apiserver.qps`` and
``--apiserver.burst``). Waiters are served in arrival order (an asyncio.Lock is fair), and a waiter
that is cancelled takes no token.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from exporter.model.ratelimit import TokenBucket


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
        self._lock = asyncio.Lock()
        self.waited_seconds = 0.0  # total time callers spent waiting for a token

    @classmethod
    def per_second(cls, qps: float, burst: int) -> AsyncRateLimiter:
        """A limiter on the monotonic clock."""
        return cls(TokenBucket(qps, burst, time.monotonic))

    def tokens(self) -> float:
        """The budget left now (for a gauge)."""
        return self.bucket.tokens(self._clock())

    async def acquire(self) -> None:
        """Wait until a token is available, and take it."""
        async with self._lock:
            while True:
                now = self._clock()
                if self.bucket.try_take(now):
                    return
                delay = self.bucket.delay_until_available(now)
                self.waited_seconds += delay
                await self._sleep(delay)
