"""What the serving layer keeps per application: client mistakes counted and logged at most once
a minute per reason (:class:`ClientErrors`), the requests in flight (:class:`InFlight`), the
listener's settings; and the application keys that hold them."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from exporter.logs import RateLimitedLog
from exporter.metrics.http import ClientErrorMetrics
from exporter.model.names import shown

log = logging.getLogger(__package__)  # one logger for the serving layer

#: How often one kind of client mistake, or of accept-loop failure, is logged at most.
LOG_INTERVAL = 60.0


class ClientErrors:
    """Client mistakes: counted by reason, logged at WARNING at most once per reason and
    ``interval`` (the next line says how many were left out)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        interval: float = LOG_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.metrics = ClientErrorMetrics(registry)
        self._log = RateLimitedLog(log, interval=interval, clock=clock)

    def observe(self, reason: str, detail: str = "", remote: str | None = None) -> None:
        self.metrics.observe(reason)
        self._log.log(
            logging.WARNING,
            reason,
            "refused a client request",
            reason=reason,
            detail=shown(detail, 200),
            remote=remote or "",
        )


class InFlight:
    """The requests being handled (in ``nodesync_http_requests_in_flight``); once ``stopping``,
    their answers close their connections."""

    def __init__(self, metrics: ClientErrorMetrics) -> None:
        self.count = 0
        self.stopping = False
        self._gauge = metrics.in_flight
        self._idle = asyncio.Event()
        self._idle.set()

    def started(self) -> None:
        self.count += 1
        self._gauge.set(self.count)
        self._idle.clear()

    def finished(self) -> None:
        self.count -= 1
        self._gauge.set(self.count)
        if self.count == 0:
            self._idle.set()

    async def idle(self) -> None:
        await self._idle.wait()
