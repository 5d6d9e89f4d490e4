"""A token bucket: the global budget of API writes the rollback hook may spend.

Pure: the caller passes the time in (any monotonic clock in seconds), so the bucket is tested as
a table and shared by the async limiter in :mod:`exporter.kube.ratelimit`. The bucket starts
full (``burst`` tokens) and refills at ``qps`` tokens per second up to ``burst``: at most
``burst`` writes at once, then ``qps`` per second on average (client-go's flowcontrol).
"""

from __future__ import annotations

import math
from collections.abc import Callable

#: Tolerance for float refills: a token 1e-12 short after waiting its exact delay is a token.
_EPSILON = 1e-9


class TokenBucket:
    def __init__(self, qps: float, burst: int, clock: Callable[[], float]) -> None:
        if not math.isfinite(qps) or qps <= 0:
            raise ValueError(f"qps must be a positive number, got {qps!r}")
        if burst < 1:
            raise ValueError(f"burst must be at least 1, got {burst!r}")
        self.qps = float(qps)
        self.burst = int(burst)
        self._tokens = float(burst)
        self._last = clock()

    def _refill(self, now: float) -> None:
        # A clock read before the last one (a caller's stale "now") adds nothing.
        if now > self._last:
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
            self._last = now

    def tokens(self, now: float) -> float:
        """Tokens available at ``now`` (the budget left; fractional while refilling)."""
        self._refill(now)
        return self._tokens

    def try_take(self, now: float) -> bool:
        """Take one token if one is available at ``now``."""
        self._refill(now)
        if self._tokens >= 1.0 - _EPSILON:
            self._tokens = max(0.0, self._tokens - 1.0)
            return True
        return False

    def delay_until_available(self, now: float) -> float:
        """Seconds from ``now`` until one token is available (0 when one is)."""
        self._refill(now)
        if self._tokens >= 1.0 - _EPSILON:
            return 0.0
        return (1.0 - self._tokens) / self.qps
