"""The controller's durable journal: the webhook's intake. Every received alert, and what was
decided about it.

One SQLite file (WAL), one connection used by one dedicated thread: every method runs its SQL
there, so the event loop never waits for a disk flush, and writes are serialised. A write method
returns only after its transaction committed: what it reported survives a crash or a SIGKILL,
and a transaction that did not commit leaves nothing behind. Every commit waits for the disk
(``synchronous=FULL``: the WAL fsynced), but one: a delivery that brings no new alert and no
resolution writes only its audit row (and "last seen"), without waiting for the disk, since its
alerts are there already (exporter.controller.journal.ledger.record). Other processes may read
the file beside the writer (:meth:`Journal.open_read_only`): WAL readers see committed
transactions and take no lock the writer waits for.

Alerts are keyed by (fingerprint, startsAt): Alertmanager re-sends every alert of a group with
each notification, HA pairs deliver duplicates, and 5xx answers are retried, but one firing
episode keeps its key. startsAt is compared to the millisecond, with a millisecond's tolerance
(exporter.model.alerts.same_episode): Alertmanager keeps nanoseconds and an alert pushed again
through its API comes back with other digits, and two writings of one instant may round to
neighbouring milliseconds. A key is recorded once; later copies only move ``last_seen_at`` (to
a minute: LAST_SEEN_RESOLUTION), or mark the alert resolved. A resolved alert never fires again
(a new episode has a new startsAt).
At most one decision exists per alert key (``save_decision`` is idempotent): the plan, join or
escalation became (or named) a NodeRollback, whose status in the API server is the record of
the rollback itself; a refusal or a dry run is recorded here only. Every alert is to be decided
once, one that arrived already resolved included (it is refused, ``resolved``). The journal is
local to one controller replica: what it holds that no NodeRollback records yet (alerts
acknowledged, not yet decided) is what a replica's death can delay (docs/install.md).

A write costs the same however much the journal holds: counts for the metrics are kept as the
writes change them (counted once at open), the alerts still to decide and the alerts to prune
are found through their own indexes, and pruning goes in small transactions.

Faults: every failure is a :class:`JournalError` with a bounded ``reason``. A write given a
deadline (``within``) fails with :class:`JournalTimeout` when it has not committed by then (a frozen
filesystem, a lock another process holds), and at once while the journal's thread is still
stuck in an earlier one; the write may still commit later (a retry is then a duplicate). Each
write checks that the file at the path is still the one open (device and inode), before and
after its commit: a journal deleted or replaced while running fails with
:class:`JournalReplaced` rather than acknowledge into a file nobody will read. A journal that
is corrupt at open (SQLite says so, or ``PRAGMA quick_check`` does) fails with
:class:`JournalCorrupt`, or, with ``set_aside_corrupt``, is moved aside and a fresh one started
with what could still be read from it (:class:`SetAside`). exporter.controller.journal_health
turns these into answers, readiness, metrics and logs.

This module is the journal's face (:class:`Journal`, and every name callers use); each job has
its own module: ``thread`` (the connection's thread), ``files`` (opening, file identity),
``schema`` (migrations, transactions), ``salvage`` (a corrupt file set aside), ``ledger`` (the
deliveries and their alerts, de-duplicated), ``decisions``, ``counts`` (counting, pruning),
``records`` and ``errors``.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import Any, Final, TypeVar

from exporter.controller.journal.counts import PRUNE_BATCH, count, prune_batch
from exporter.controller.journal.decisions import (
    read_decision,
    read_decisions,
    read_firing_decided,
    save_decision,
)
from exporter.controller.journal.episodes import read_ended, read_outcomes, write_outcome
from exporter.controller.journal.errors import (
    CLOSED,
    CORRUPT,
    FAILURE_REASONS,
    FULL,
    IO,
    LOCKED,
    OTHER,
    READONLY,
    REPLACED,
    TIMEOUT,
    JournalClosed,
    JournalCorrupt,
    JournalError,
    JournalReplaced,
    JournalTimeout,
)
from exporter.controller.journal.files import connect_read_only, identity, open_file
from exporter.controller.journal.ledger import (
    LAST_SEEN_RESOLUTION,
    read_alert,
    read_alerts_to_decide,
    read_deliveries,
    record,
)
from exporter.controller.journal.records import (
    DECISION_VERDICTS,
    DRY_RUN,
    EMPTY_COUNTS,
    AlertKey,
    AlertRecord,
    DecisionRecord,
    DeliveryRecord,
    JournalCounts,
    RecordResult,
    SetAside,
)
from exporter.controller.journal.schema import SCHEMA_VERSION, transaction
from exporter.controller.journal.thread import DELIVERIES_FIRST_SECONDS, JournalThread
from exporter.model.alerts import FIRING, RESOLVED, WebhookPayload

__all__ = [
    "CLOSED",
    "CORRUPT",
    "DECISION_VERDICTS",
    "DELIVERIES_FIRST_SECONDS",
    "DRY_RUN",
    "EMPTY_COUNTS",
    "FAILURE_REASONS",
    "FULL",
    "IO",
    "LAST_SEEN_RESOLUTION",
    "LOCKED",
    "OTHER",
    "PROBE_BYTES",
    "PRUNE_BATCH",
    "READONLY",
    "REPLACED",
    "SCHEMA_VERSION",
    "TIMEOUT",
    "AlertKey",
    "AlertRecord",
    "DecisionRecord",
    "DeliveryRecord",
    "Journal",
    "JournalClosed",
    "JournalCorrupt",
    "JournalCounts",
    "JournalError",
    "JournalReplaced",
    "JournalTimeout",
    "RecordResult",
    "SetAside",
]

T = TypeVar("T")

#: Bytes the health probe writes (and removes) in one transaction: about a large delivery.
PROBE_BYTES: Final = 64 * 1024

_Opened = tuple[sqlite3.Connection, tuple[tuple[int, int] | None, SetAside | None]]


class Journal:
    """Open with ``await Journal.open(path)``; close with ``await journal.close()``."""

    def __init__(
        self,
        thread: JournalThread,
        clock: Callable[[], float],
        *,
        path: str = ":memory:",
        identity: tuple[int, int] | None = None,
        set_aside: SetAside | None = None,
    ) -> None:
        self._thread = thread
        self._clock = clock
        self._counts = EMPTY_COUNTS
        #: Writes so far that may change firing_decided's answer (every one but a delivery that
        #: brings no new alert and no resolution, and the probe), and its last answer.
        self._changes = 0
        self._firing_decided: tuple[tuple[object, ...], list[tuple[AlertRecord, str, str]]] | None
        self._firing_decided = None
        self._path = path
        self._identity = identity
        #: The corrupt journal this one replaced when it was opened, if any.
        self.set_aside = set_aside

    @classmethod
    async def open(
        cls,
        path: str,
        *,
        clock: Callable[[], float] = time.time,
        busy_timeout: float = 2.0,
        set_aside_corrupt: bool = False,
    ) -> Journal:
        """Open (create, migrate, check) the journal at ``path``. ``busy_timeout``: how long
        a write waits for a lock another connection holds before it fails. A corrupt journal
        raises JournalCorrupt; with ``set_aside_corrupt`` it is moved aside instead (see
        :class:`SetAside`) and a fresh one opened."""

        def opened() -> _Opened:
            conn, found, set_aside = open_file(path, busy_timeout, set_aside_corrupt)
            return conn, (found, set_aside)

        return await cls._open(opened, path, clock)

    @classmethod
    async def open_read_only(cls, path: str, *, busy_timeout: float = 2.0) -> Journal:
        """Open the existing journal at ``path`` for reading only: nothing is created or
        migrated, and every write method fails with JournalError. Safe beside the controller
        that writes it (WAL: a reader neither blocks the writer nor waits for it), for tools
        and benchmarks that look at its plans. Raises JournalError when there is no journal
        at ``path`` or its schema is not this nodesync's."""

        def opened() -> _Opened:
            return connect_read_only(path, busy_timeout), (None, None)

        return await cls._open(opened, path)

    @classmethod
    async def _open(
        cls, connect: Callable[[], _Opened], path: str, clock: Callable[[], float] = time.time
    ) -> Journal:
        thread, (found, set_aside) = await JournalThread.start(connect)
        journal = cls(thread, clock, path=path, identity=found, set_aside=set_aside)
        try:
            journal._counts = await journal._run(count)
        except BaseException:
            await journal.close()
            raise
        return journal

    @property
    def path(self) -> str:
        return self._path

    @property
    def closed(self) -> bool:
        return self._thread.closed

    @property
    def last_counts(self) -> JournalCounts:
        """``counts()`` as of the last committed write (no I/O: for metrics)."""
        return self._counts

    def busy_for(self) -> float | None:
        """How long the journal's thread has been in its current call (None: idle)."""
        return self._thread.busy_for()

    async def close(self) -> None:
        await self._thread.close()

    async def _run(
        self,
        fn: Callable[..., T],
        *args: Any,
        within: float | None = None,
        delivery: bool = False,
    ) -> T:
        """``fn(conn, *args)`` on the journal's thread (see JournalThread.run)."""
        return await self._thread.run(fn, *args, within=within, delivery=delivery)

    def _verify(self) -> None:
        """Raise JournalReplaced unless the file at the path is the one open (in the thread)."""
        if self._identity is None:
            return
        try:
            found = identity(self._path)
        except FileNotFoundError:
            raise JournalReplaced(
                f"journal: {self._path} was deleted while the controller ran: not acknowledging "
                "alerts into a file nobody will read; restart the controller to start a new "
                "journal there"
            ) from None
        except OSError as exc:
            raise JournalError(f"journal: cannot check {self._path}: {exc.strerror}", IO) from exc
        if found != self._identity:
            raise JournalReplaced(
                f"journal: {self._path} was replaced by another file while the controller ran: "
                "not acknowledging alerts into a file nobody will read; restart the controller "
                "to use the file now there"
            )

    async def record(
        self, payload: WebhookPayload, *, received_at: float, within: float | None = None
    ) -> RecordResult:
        """Record one delivery and its alerts in one transaction, committed before returning
        (JournalTimeout when it has not committed ``within`` seconds)."""
        return await self._run(self._record, payload, received_at, within=within, delivery=True)

    def _record(
        self, conn: sqlite3.Connection, payload: WebhookPayload, received_at: float
    ) -> RecordResult:
        self._verify()
        result = record(conn, payload, received_at)
        c = self._counts
        resolved_known = result.resolved - (result.new - result.new_firing)
        alerts = dict(c.alerts)
        alerts[FIRING] += result.new_firing - resolved_known
        alerts[RESOLVED] += result.resolved
        self._counts = JournalCounts(alerts, c.decisions, c.deliveries + 1)
        self._changes += bool(result.new or result.resolved)
        self._verify()  # replaced meanwhile: what was just committed, nobody will read
        return result

    async def probe(self, within: float) -> None:
        """A write like a large delivery's (committed, then removed): returns once the journal
        takes writes again; raises the JournalError a delivery would meet."""
        await self._run(self._probe, within=within)

    def _probe(self, conn: sqlite3.Connection) -> None:
        self._verify()
        with transaction(conn):
            conn.execute("INSERT INTO probe (data) VALUES (zeroblob(?))", (PROBE_BYTES,))
            conn.execute("DELETE FROM probe")
        self._verify()

    async def check(self, within: float) -> None:
        """Raises JournalReplaced if the file at the path is not the one open (no write)."""
        await self._run(lambda _conn: self._verify(), within=within)

    async def alerts_to_decide(self, limit: int = 1000) -> list[AlertRecord]:
        """Alerts without a decision, oldest first: the firing ones, and those that arrived
        resolved or resolved before they were decided (each is refused, ``resolved``)."""
        return await self._run(read_alerts_to_decide, limit)

    async def alert(self, key: AlertKey) -> AlertRecord | None:
        """The alert of this episode (its startsAt within EPISODE_TOLERANCE of the key's)."""
        return await self._run(read_alert, key)

    async def deliveries(self, limit: int = 1000) -> list[DeliveryRecord]:
        """The latest deliveries, newest first."""
        return await self._run(read_deliveries, limit)

    async def save_decision(self, decision: DecisionRecord) -> DecisionRecord:
        """Store the decision about an alert; returns the stored one. Idempotent: if the alert
        has a decision already, that one is returned unchanged. Raises KeyError for an
        unknown alert, ValueError for an unknown verdict."""
        if decision.verdict not in DECISION_VERDICTS:
            raise ValueError(f"unknown verdict {decision.verdict!r}")
        return await self._run(self._save_decision, decision)

    def _save_decision(self, conn: sqlite3.Connection, decision: DecisionRecord) -> DecisionRecord:
        stored, new = save_decision(conn, decision)
        self._changes += 1
        if new:
            c = self._counts
            decisions = dict(c.decisions)
            decisions[stored.verdict] += 1
            self._counts = JournalCounts(c.alerts, decisions, c.deliveries)
        return stored

    async def decision(self, key: AlertKey) -> DecisionRecord | None:
        return await self._run(read_decision, key)

    async def decisions(self, verdict: str | None = None) -> list[DecisionRecord]:
        """Decisions (with this verdict), in the order they were made."""
        return await self._run(read_decisions, verdict)

    async def firing_decided(
        self, verdicts: tuple[str, ...], limit: int = 1000
    ) -> list[tuple[AlertRecord, str, str]]:
        """Firing alerts whose decision has one of ``verdicts`` (oldest first, at most
        ``limit``), each with the decision's verdict and reason. Read again only after a write
        that may change it (an executor pass with nothing new reads nothing): each record's
        ``last_seen_at`` is as of that read."""
        key = (self._changes, verdicts, limit)
        if self._firing_decided is None or self._firing_decided[0] != key:
            self._firing_decided = (key, await self._run(read_firing_decided, verdicts, limit))
        return list(self._firing_decided[1])

    async def ended_episodes(self, limit: int = 1000) -> list[tuple[AlertRecord, DecisionRecord]]:
        """Resolved alerts whose decision has no outcome yet (oldest decision first, at most
        ``limit``), each with its decision."""
        return await self._run(read_ended, limit)

    async def write_outcome(self, key: AlertKey, outcome: str) -> bool:
        """The episode's outcome, written once; False when it had one already."""
        written = await self._run(write_outcome, key, outcome)
        self._changes += 1  # after it: a read that overtook the write is not kept as newer
        return written

    async def outcomes(self) -> list[tuple[DecisionRecord, str]]:
        """The decisions whose episode ended with a counted outcome, each with it."""
        return await self._run(read_outcomes)

    async def counts(self) -> JournalCounts:
        """Counted again from the tables (``last_counts`` is what the writes kept)."""
        return await self._run(count)

    async def prune(self, before: float, *, batch: int = PRUNE_BATCH) -> int:
        """Forget deliveries received before ``before``, and alerts last seen before it (with
        their decisions), ``batch`` of each per transaction. Returns the alerts removed."""
        removed = 0
        while True:
            alerts, more = await self._run(self._prune_batch, before, batch)
            removed += alerts
            if not more:
                return removed

    def _prune_batch(self, conn: sqlite3.Connection, before: float, batch: int) -> tuple[int, bool]:
        gone = prune_batch(conn, before, batch)
        self._changes += 1
        c = self._counts
        alerts = {s: n - gone.alerts.get(s, 0) for s, n in c.alerts.items()}
        decisions = {v: n - gone.decisions.get(v, 0) for v, n in c.decisions.items()}
        self._counts = JournalCounts(alerts, decisions, c.deliveries - gone.deliveries)
        return sum(gone.alerts.values()), gone.more
