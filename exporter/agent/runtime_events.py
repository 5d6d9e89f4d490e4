"""The agent's subscription to containerd's task events: a change published at once.

On a container's exit or OOM kill the sync loop publishes what the event says at once
(:meth:`exporter.agent.sync.AgentSync.tell`, exporter.model.told_exits). On each task start, exit
or OOM kill (exporter.model.runtime_events) the agent also asks the sync loop for a runtime cycle
now (:meth:`exporter.agent.sync.AgentSync.request_sync`; :data:`TOLD_READ_AFTER_SECONDS` later
for an exit already published from its event) and reads again, a little later each time, until
the listing shows what the event said or
:data:`~exporter.model.runtime_events.SHOWN_WITHIN_SECONDS` passed since the last read that
worked: containerd's CRI plugin handles the same event on its own and may not show it yet,
and a runtime busy with a storm of exits may miss a read's deadline. Events that come together share
cycles, so 110 containers exiting at once cost a few relists, not 110.

The periodic relist stays the safety net. When the subscription ends (containerd restarted or
stopped) the agent subscribes again with a growing delay, and relists once the new
subscription holds, for what happened while it was not subscribed. A runtime that does not
serve the events service (UNIMPLEMENTED) leaves the agent relisting alone; it tries again
every :data:`UNIMPLEMENTED_RETRY_SECONDS`. ``nodesync_cri_events_up`` says which it is.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Final, Protocol

from exporter.agent.state import AgentState
from exporter.agent.sync import TRIGGER_EVENT, TRIGGER_RESUBSCRIBE
from exporter.cri.errors import CRIError, Unimplemented
from exporter.model.runtime_events import (
    SHOWN_WITHIN_SECONDS,
    OomDeduplicator,
    TaskEvent,
    shown,
)
from exporter.tasks import cancel_and_wait, wait_set

log = logging.getLogger(__name__)

#: A subscription that has not failed within this is taken to hold (containerd sends nothing
#: before the first event; an unreachable or unwilling runtime fails it within milliseconds).
HOLDS_AFTER_SECONDS: Final = 0.25
RETRY_MIN_SECONDS: Final = 0.1
RETRY_MAX_SECONDS: Final = 5.0
UNIMPLEMENTED_RETRY_SECONDS: Final = 300.0
#: Delays between the reads that wait for the listing to show an event: the first, growing by
#: half each time up to the second while the wait is young (containerd's CRI plugin updates a
#: container tens of ms after its exit event: it deletes the task first; 57 ms at the median,
#: 78 ms at p99 on an idle 2-core machine, so reads 10 ms apart see it within about one cycle
#: of it; 50 ms apart added 21 ms at the median), then the third.
REREAD_MIN_SECONDS: Final = 0.005
REREAD_YOUNG_MAX_SECONDS: Final = 0.01
REREAD_MAX_SECONDS: Final = 0.25
REREAD_YOUNG_SECONDS: Final = 1.0
#: An exit published from its event is read from the CRI first this much later: about when
#: containerd's CRI plugin has recorded it (57-115 ms at the median here).
TOLD_READ_AFTER_SECONDS: Final = 0.1


class SyncRequester(Protocol):
    def request_sync(self, trigger: str = TRIGGER_EVENT) -> asyncio.Future[AgentState]: ...

    def tell(self, event: TaskEvent) -> bool: ...  # whether it published what the event says

    def subscribed(self, since: float | None) -> None: ...


class EventObserver(Protocol):
    def set_up(self, up: bool) -> None: ...

    def event(self, topic: str) -> None: ...


class RuntimeEvents:
    """Subscribes with ``subscribe`` (exporter.cri.events.subscribe bound to a client) and
    drives ``sync`` from what comes."""

    def __init__(
        self,
        subscribe: Callable[[], AsyncIterator[TaskEvent]],
        sync: SyncRequester,
        observer: EventObserver,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        told_read_after: float = TOLD_READ_AFTER_SECONDS,
    ) -> None:
        self._subscribe = subscribe
        self._sync = sync
        self._observer = observer
        self._clock = clock
        self._wall = wall
        self._told_read_after = told_read_after
        self._oom = OomDeduplicator()
        self._pending: list[tuple[TaskEvent, float]] = []  # event, deadline (clock)
        self._arrived = asyncio.Event()
        self._failing = False
        self.subscribed = False

    async def run(self) -> None:
        """Subscribe, and resubscribe, until cancelled."""
        self._observer.set_up(False)
        settle = asyncio.create_task(self._settle(), name="agent-events-settle")
        try:
            await self._subscriptions()
        finally:
            await cancel_and_wait([settle])

    async def _subscriptions(self) -> None:
        delay = RETRY_MIN_SECONDS
        while True:
            reader = asyncio.create_task(self._read(self._subscribe()), name="agent-events")
            try:
                done, _ = await asyncio.wait({reader}, timeout=HOLDS_AFTER_SECONDS)
                if not done:
                    self._held()
                    delay = RETRY_MIN_SECONDS
                error = await reader
            finally:
                await cancel_and_wait([reader])
            if self.subscribed:
                self.subscribed = False
                self._sync.subscribed(None)
                self._observer.set_up(False)
            if isinstance(error, Unimplemented):
                log.warning(
                    "the runtime does not serve task events: relisting alone",
                    extra={"error": str(error), "retry_seconds": UNIMPLEMENTED_RETRY_SECONDS},
                )
                await asyncio.sleep(UNIMPLEMENTED_RETRY_SECONDS)
                continue
            level = logging.DEBUG if self._failing else logging.WARNING
            log.log(level, "task events subscription ended", extra={"error": str(error or "")})
            self._failing = True
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_SECONDS)

    def _held(self) -> None:
        if self._failing:
            log.info("task events subscribed again")
        self._failing = False
        self.subscribed = True
        self._sync.subscribed(self._wall())  # an event from now on reaches it
        self._observer.set_up(True)
        # What happened while not subscribed shows in a relist.
        self._sync.request_sync(TRIGGER_RESUBSCRIBE)

    async def _read(self, events: AsyncIterator[TaskEvent]) -> CRIError | None:
        """Handle events until the stream ends (None) or fails (its error)."""
        try:
            async for event in events:
                self._received(event)
        except CRIError as exc:
            return exc
        except Exception as exc:  # a bug must not end the subscriptions for good
            log.exception("task events failed")
            return CRIError("events_subscribe", "UNKNOWN", str(exc))
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()
        return None

    def _received(self, event: TaskEvent) -> None:
        if self._oom.is_repeat(event):
            return
        self._observer.event(event.short_topic)
        if not event.of_init_process:
            return
        if self._sync.tell(event):
            # Published from the event already: the reads that wait for the CRI's own record
            # start about when it comes, not in the milliseconds the scrapes need the CPU.
            asyncio.get_running_loop().call_later(self._told_read_after, self._wait_shown, event)
        else:
            self._wait_shown(event)

    def _wait_shown(self, event: TaskEvent) -> None:
        self._pending.append((event, self._clock() + SHOWN_WITHIN_SECONDS))
        self._arrived.set()

    async def _settle(self) -> None:
        """Read the runtime until it shows every pending event (or its time is up)."""
        delay = REREAD_MIN_SECONDS
        waiting_since: float | None = None
        while True:
            await self._arrived.wait()
            self._arrived.clear()
            batch, self._pending = self._pending, []
            state = await self._sync.request_sync(TRIGGER_EVENT)
            now = self._clock()
            snapshot = state.listing
            if snapshot is None:  # the read failed: every event waits for one that works
                left = [
                    (event, max(deadline, now + SHOWN_WITHIN_SECONDS)) for event, deadline in batch
                ]
            else:
                left = [(e, d) for e, d in batch if d > now and not shown(e, snapshot)]
            if not left:
                delay, waiting_since = REREAD_MIN_SECONDS, None
                continue
            self._pending = left + self._pending
            # Not shown yet: read again soon, sooner if another event comes.
            await wait_set(self._arrived, delay)
            self._arrived.set()
            waiting_since = now if waiting_since is None else waiting_since
            young = self._clock() - waiting_since < REREAD_YOUNG_SECONDS
            delay = min(delay * 1.5, REREAD_YOUNG_MAX_SECONDS if young else REREAD_MAX_SECONDS)
