"""The journal's thread: one SQLite connection used by one dedicated thread, so that the event
loop never waits for a disk flush and writes are serialised. Deliveries go first; a call given a
deadline fails with JournalTimeout when it has not returned by then."""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final, TypeVar

from exporter.controller.journal.errors import JournalClosed, JournalTimeout, guarded
from exporter.tasks import wait_set

T = TypeVar("T")

#: How long a journal call other than a delivery waits for the deliveries before it, at most.
DELIVERIES_FIRST_SECONDS: Final = 0.05


class JournalThread:
    """Start with ``await JournalThread.start(connect)``; stop with ``await thread.close()``."""

    def __init__(self, executor: ThreadPoolExecutor, conn: sqlite3.Connection) -> None:
        self._executor = executor
        self._conn = conn
        self._closed = False
        self._busy_since: float | None = None  # when the thread began its current call
        # Deliveries go first: they are what an acknowledgement waits for. Every other call
        # (the intake's reads and decisions, pruning, probes) waits its turn one at a time,
        # and while a delivery waits, up to DELIVERIES_FIRST_SECONDS (see run).
        self._deliveries = 0  # recording now, or waiting to
        self._no_deliveries = asyncio.Event()
        self._no_deliveries.set()
        self._others = asyncio.Lock()

    @classmethod
    async def start(
        cls, connect: Callable[[], tuple[sqlite3.Connection, T]]
    ) -> tuple[JournalThread, T]:
        """The thread, with the connection ``connect`` opened in it, and what else it
        returned."""
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="journal")
        loop = asyncio.get_running_loop()
        try:
            conn, extra = await loop.run_in_executor(executor, guarded(connect))
        except BaseException:
            executor.shutdown(wait=False)
            raise
        return cls(executor, conn), extra

    @property
    def closed(self) -> bool:
        return self._closed

    def busy_for(self) -> float | None:
        """How long the thread has been in its current call (None: idle)."""
        since = self._busy_since
        return None if since is None else time.monotonic() - since

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self._conn.close)
        finally:
            self._executor.shutdown(wait=False)

    def _in_thread(self, call: Callable[[], T]) -> T:
        self._busy_since = time.monotonic()
        try:
            return guarded(call)()
        finally:
            self._busy_since = None

    async def run(
        self,
        fn: Callable[..., T],
        *args: Any,
        within: float | None = None,
        delivery: bool = False,
    ) -> T:
        """``fn(conn, *args)`` on the journal's thread. With ``within`` (seconds): JournalTimeout
        when it has not returned by then, and at once when the thread has been stuck in an
        earlier call for that long; a call that had not started is then cancelled, one that
        had goes on (and may commit).

        A ``delivery`` goes to the thread at once. Any other call goes once the one before it
        (not a delivery) finished, and no delivery is waiting, or has waited
        DELIVERIES_FIRST_SECONDS: so a delivery waits for at most one other call in the thread,
        not for an intake pass's worth of decisions, and a stream of deliveries cannot hold the
        rest back for long."""
        if self._closed:
            raise JournalClosed()
        if delivery:
            self._deliveries += 1
            self._no_deliveries.clear()
            try:
                return await self._submit(fn, args, within)
            finally:
                self._deliveries -= 1
                if not self._deliveries:
                    self._no_deliveries.set()
        async with self._others:
            await wait_set(self._no_deliveries, DELIVERIES_FIRST_SECONDS)
            return await self._submit(fn, args, within)

    async def _submit(self, fn: Callable[..., T], args: tuple[Any, ...], within: float | None) -> T:
        if self._closed:
            raise JournalClosed()
        if within is not None:
            busy = self.busy_for()
            if busy is not None and busy >= within:
                raise JournalTimeout(
                    f"journal: a write has not finished for {busy:.1f} s (a frozen filesystem, "
                    "or a lock another process holds)"
                )
        future = self._executor.submit(self._in_thread, functools.partial(fn, self._conn, *args))
        waiting = asyncio.wrap_future(future)
        if within is None:
            return await waiting
        try:
            async with asyncio.timeout(within):  # not wait_for, which can drop a cancel (wait_set)
                return await asyncio.shield(waiting)
        except TimeoutError:
            pass
        if future.cancel():
            raise JournalTimeout(
                f"journal: the write could not start within {within:g} s: an earlier one has "
                "not finished (a frozen filesystem, or a lock another process holds)"
            )
        if future.done():  # it finished as the deadline passed
            return future.result()
        waiting.add_done_callback(_consume)
        raise JournalTimeout(
            f"journal: the write did not commit within {within:g} s (a frozen filesystem, or a "
            "lock another process holds); it may still commit"
        )


def _consume(future: asyncio.Future[Any]) -> None:
    """Retrieve the outcome of a write nobody waits for any longer."""
    if not future.cancelled():
        future.exception()
