"""The controller's durable journal: the webhook's intake. Every received alert, and what was
decided about it.

One SQLite file (WAL), one connection used by one dedicated thread: every method runs its SQL
there, so the event loop never waits for a disk flush, and writes are serialised. A write method
returns only after its transaction committed: what it reported survives a crash or a SIGKILL,
and a transaction that did not commit leaves nothing behind. Every commit waits for the disk
(``synchronous=FULL``: the WAL fsynced), but one: a delivery that brings no new alert and no
resolution writes only its audit row (and "last seen"), without waiting for the disk, since its
alerts are there already (:func:`_record`). Other processes may read the file beside the writer
(:meth:`Journal.open_read_only`): WAL readers see committed transactions and take no lock the
writer waits for.

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
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import os
import sqlite3
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from exporter.model.alerts import (
    EPISODE_TOLERANCE,
    FIRING,
    RESOLVED,
    Alert,
    WebhookPayload,
)
from exporter.model.decision import VERDICTS, WAITS
from exporter.tasks import wait_set

T = TypeVar("T")

AlertKey = tuple[str, float]

#: A decision's verdict, beyond those of exporter.model.decision: planned in a dry run.
DRY_RUN = "dry_run"
#: The verdicts a decision is stored with (a wait is not a decision: it is decided again).
DECISION_VERDICTS = (*(v for v in VERDICTS if v != WAITS), DRY_RUN)

_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (  # version 1
        """CREATE TABLE deliveries (
            id INTEGER PRIMARY KEY,
            received_at REAL NOT NULL,
            group_key TEXT NOT NULL,
            receiver TEXT NOT NULL,
            status TEXT NOT NULL,
            alerts INTEGER NOT NULL,
            truncated INTEGER NOT NULL,
            new INTEGER NOT NULL DEFAULT 0,
            duplicates INTEGER NOT NULL DEFAULT 0,
            resolved INTEGER NOT NULL DEFAULT 0
        )""",
        "CREATE INDEX deliveries_by_time ON deliveries (received_at)",
        """CREATE TABLE alerts (
            fingerprint TEXT NOT NULL,
            starts_at REAL NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('firing', 'resolved')),
            labels TEXT NOT NULL,
            annotations TEXT NOT NULL,
            ends_at REAL,
            generator_url TEXT NOT NULL,
            first_delivery INTEGER NOT NULL,
            received_at REAL NOT NULL,
            last_seen_at REAL NOT NULL,
            resolved_at REAL,
            PRIMARY KEY (fingerprint, starts_at)
        )""",
        "CREATE INDEX alerts_by_status ON alerts (status, received_at)",
        """CREATE TABLE plans (
            id INTEGER PRIMARY KEY,
            fingerprint TEXT NOT NULL,
            starts_at REAL NOT NULL,
            action TEXT NOT NULL,
            node TEXT NOT NULL,
            wave TEXT NOT NULL,
            state TEXT NOT NULL,
            reason TEXT NOT NULL,
            dry_run INTEGER NOT NULL,
            refusal_reason TEXT,
            refusal_detail TEXT,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            UNIQUE (fingerprint, starts_at),
            FOREIGN KEY (fingerprint, starts_at)
                REFERENCES alerts (fingerprint, starts_at) ON DELETE CASCADE
        )""",
        "CREATE INDEX plans_by_state ON plans (state)",
        """CREATE TABLE steps (
            plan_id INTEGER NOT NULL REFERENCES plans (id) ON DELETE CASCADE,
            idx INTEGER NOT NULL,
            kind TEXT NOT NULL,
            node TEXT NOT NULL,
            namespace TEXT NOT NULL,
            pod TEXT NOT NULL,
            pod_uid TEXT NOT NULL,
            state TEXT NOT NULL,
            detail TEXT NOT NULL,
            attempts INTEGER NOT NULL,
            updated_at REAL NOT NULL,
            PRIMARY KEY (plan_id, idx)
        )""",
    ),
    (  # version 2: rollbacks live in the API server (NodeRollback objects); the journal keeps
        # the intake and the decisions. A plan of version 1 becomes its alert's decision (so
        # the alert is not decided again); its steps are not carried over: upgrade with no
        # rollback running (docs/upgrade.md).
        """CREATE TABLE decisions (
            fingerprint TEXT NOT NULL,
            starts_at REAL NOT NULL,
            verdict TEXT NOT NULL,
            reason TEXT NOT NULL,
            detail TEXT NOT NULL,
            rollback TEXT NOT NULL,
            node TEXT NOT NULL,
            action TEXT NOT NULL,
            decided_at REAL NOT NULL,
            wave TEXT NOT NULL,
            PRIMARY KEY (fingerprint, starts_at),
            FOREIGN KEY (fingerprint, starts_at)
                REFERENCES alerts (fingerprint, starts_at) ON DELETE CASCADE
        )""",
        "CREATE INDEX decisions_by_verdict ON decisions (verdict, decided_at)",
        """INSERT INTO decisions
            SELECT fingerprint, starts_at,
                CASE WHEN refusal_reason IS NOT NULL THEN 'refused'
                     WHEN dry_run THEN 'dry_run' ELSE 'plan' END,
                CASE WHEN refusal_reason IS NOT NULL THEN refusal_reason
                     WHEN dry_run THEN 'plan' ELSE '' END,
                COALESCE(refusal_detail, ''), '', node, action, created_at, wave
            FROM plans""",
        "DROP TABLE steps",
        "DROP TABLE plans",
    ),
    (  # version 3: the alerts still to decide, and those to prune, have their own indexes (a
        # write costs the same however many alerts the journal holds); a scratch table for the
        # health probe. Alerts that resolved without a decision before this version stay so
        # (no refusal is made up for them after the fact).
        "ALTER TABLE alerts ADD COLUMN to_decide INTEGER NOT NULL DEFAULT 0",
        """UPDATE alerts SET to_decide = 1 WHERE status = 'firing' AND NOT EXISTS
            (SELECT 1 FROM decisions AS d WHERE d.fingerprint = alerts.fingerprint
             AND d.starts_at = alerts.starts_at)""",
        "CREATE INDEX alerts_to_decide ON alerts (received_at, starts_at, fingerprint)"
        " WHERE to_decide = 1",
        "CREATE INDEX alerts_by_last_seen ON alerts (last_seen_at)",
        "DROP INDEX alerts_by_status",
        "CREATE TABLE probe (data BLOB NOT NULL)",
    ),
)

#: The schema version this code writes; a journal with a newer one is refused.
SCHEMA_VERSION = len(_MIGRATIONS)

# Why a journal operation failed: a bounded word, for metrics and readiness.
LOCKED: Final = "locked"  # another connection holds the write lock (SQLITE_BUSY, SQLITE_LOCKED)
FULL: Final = "full"  # the disk (or the filesystem's quota) is full
IO: Final = "io"  # an I/O error, or a file that cannot be opened
READONLY: Final = "readonly"  # the file or its filesystem is read-only
CORRUPT: Final = "corrupt"  # SQLite found the file damaged, or it is not a database
TIMEOUT: Final = "timeout"  # a commit did not finish within its deadline
REPLACED: Final = "replaced"  # the file at the path is no longer the one open
CLOSED: Final = "closed"
OTHER: Final = "other"
FAILURE_REASONS: Final = (LOCKED, FULL, IO, READONLY, CORRUPT, TIMEOUT, REPLACED, CLOSED, OTHER)

#: How much newer than an alert's ``last_seen_at`` a copy must be to move it. last_seen_at
#: serves retention (``--journal.retention``, hours to days); a group's re-sends come every
#: ``group_interval`` (minutes), and would otherwise rewrite every alert of the group.
LAST_SEEN_RESOLUTION: Final = 60.0
#: How long a journal call other than a delivery waits for the deliveries before it, at most.
DELIVERIES_FIRST_SECONDS: Final = 0.05
#: A transaction's safety level: its commit waits for the disk, or for the write only (WAL mode).
_DURABLE: Final = "PRAGMA synchronous=FULL"
_WRITTEN: Final = "PRAGMA synchronous=NORMAL"
#: Values bound in one statement stay well under SQLite's limit (32766 since 3.32, 999 before).
_QUERY_CHUNK: Final = 400

#: Bytes the health probe writes (and removes) in one transaction: about a large delivery.
PROBE_BYTES: Final = 64 * 1024
#: Alerts (and deliveries) removed per pruning transaction, so that webhook writes get in
#: between the transactions of a large prune.
PRUNE_BATCH: Final = 500

_SQLITE_REASONS: Final = {
    sqlite3.SQLITE_BUSY: LOCKED,
    sqlite3.SQLITE_LOCKED: LOCKED,
    sqlite3.SQLITE_FULL: FULL,
    sqlite3.SQLITE_IOERR: IO,
    sqlite3.SQLITE_CANTOPEN: IO,
    sqlite3.SQLITE_READONLY: READONLY,
    sqlite3.SQLITE_CORRUPT: CORRUPT,
    sqlite3.SQLITE_NOTADB: CORRUPT,
}


class JournalError(Exception):
    """The journal could not do what was asked (storage error, locked, newer schema).
    ``reason``: one of FAILURE_REASONS."""

    def __init__(self, message: str, reason: str = OTHER) -> None:
        super().__init__(message)
        self.reason = reason


class JournalClosed(JournalError):
    """The journal was closed."""

    def __init__(self, message: str = "the journal is closed") -> None:
        super().__init__(message, CLOSED)


class JournalTimeout(JournalError):
    """A write did not commit within its deadline (it may still commit later)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, TIMEOUT)


class JournalReplaced(JournalError):
    """The file at the journal's path was deleted or replaced while the journal was open."""

    def __init__(self, message: str) -> None:
        super().__init__(message, REPLACED)


class JournalCorrupt(JournalError):
    """SQLite found the journal damaged (or the file is not a database)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, CORRUPT)


@dataclass(frozen=True, slots=True)
class SetAside:
    """A corrupt journal found at open, moved to ``moved_to`` (its ``-wal`` and ``-shm``
    files beside it); what could still be read from it was carried into the fresh journal."""

    path: str
    moved_to: str
    error: str
    alerts: int
    decisions: int
    deliveries: int


@dataclass(frozen=True, slots=True)
class RecordResult:
    """What one delivery changed. ``new``: alert keys seen for the first time (``new_firing`` of
    them firing); ``duplicates``: copies of known alerts that changed nothing; ``resolved``:
    alerts that became resolved (known or new); ``truncated``: the payload's truncatedAlerts."""

    new: int
    duplicates: int
    resolved: int
    truncated: int
    new_firing: int = 0


@dataclass(frozen=True, slots=True)
class AlertRecord:
    fingerprint: str
    starts_at: float
    status: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    received_at: float
    last_seen_at: float
    resolved_at: float | None
    ends_at: float | None = None
    generator_url: str = ""

    @property
    def key(self) -> AlertKey:
        return (self.fingerprint, self.starts_at)

    @property
    def alert(self) -> Alert:
        return Alert(
            fingerprint=self.fingerprint,
            status=self.status,
            labels=self.labels,
            starts_at=self.starts_at,
            ends_at=self.ends_at,
            annotations=self.annotations,
            generator_url=self.generator_url,
        )


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """What was decided about one alert episode: the verdict (exporter.model.decision's, or
    ``dry_run``), the refusal's reason and detail, the NodeRollback it made or joined."""

    alert_key: AlertKey
    verdict: str
    reason: str
    detail: str
    rollback: str
    node: str
    action: str
    decided_at: float
    wave: str = ""


@dataclass(frozen=True, slots=True)
class DeliveryRecord:
    """The audit row of one accepted webhook call."""

    id: int
    received_at: float
    group_key: str
    receiver: str
    status: str
    alerts: int
    truncated: int
    new: int
    duplicates: int
    resolved: int


@dataclass(frozen=True, slots=True)
class JournalCounts:
    """Alerts by status (``firing``, ``resolved``), decisions by verdict (every verdict),
    deliveries."""

    alerts: Mapping[str, int]
    decisions: Mapping[str, int]
    deliveries: int


EMPTY_COUNTS = JournalCounts(
    alerts={FIRING: 0, RESOLVED: 0}, decisions=dict.fromkeys(DECISION_VERDICTS, 0), deliveries=0
)


class Journal:
    """Open with ``await Journal.open(path)``; close with ``await journal.close()``."""

    def __init__(
        self,
        executor: ThreadPoolExecutor,
        conn: sqlite3.Connection,
        clock: Callable[[], float],
        *,
        path: str = ":memory:",
        identity: tuple[int, int] | None = None,
        set_aside: SetAside | None = None,
    ) -> None:
        self._executor = executor
        self._conn = conn
        self._clock = clock
        self._closed = False
        self._counts = EMPTY_COUNTS
        self._path = path
        self._identity = identity
        self._busy_since: float | None = None  # when the thread began its current call
        # Deliveries go first: they are what an acknowledgement waits for. Every other call
        # (the intake's reads and decisions, pruning, probes) waits its turn one at a time,
        # and while a delivery waits, up to DELIVERIES_FIRST_SECONDS (see _run).
        self._deliveries = 0  # recording now, or waiting to
        self._no_deliveries = asyncio.Event()
        self._no_deliveries.set()
        self._others = asyncio.Lock()
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
        opened = functools.partial(_open_file, path, busy_timeout, set_aside_corrupt)
        return await cls._open(opened, path, clock)

    @classmethod
    async def open_read_only(cls, path: str, *, busy_timeout: float = 2.0) -> Journal:
        """Open the existing journal at ``path`` for reading only: nothing is created or
        migrated, and every write method fails with JournalError. Safe beside the controller
        that writes it (WAL: a reader neither blocks the writer nor waits for it), for tools
        and benchmarks that look at its plans. Raises JournalError when there is no journal
        at ``path`` or its schema is not this nodesync's."""

        def opened() -> tuple[sqlite3.Connection, None, None]:
            return _connect_read_only(path, busy_timeout), None, None

        return await cls._open(opened, path)

    @classmethod
    async def _open(
        cls,
        connect: Callable[[], tuple[sqlite3.Connection, tuple[int, int] | None, SetAside | None]],
        path: str,
        clock: Callable[[], float] = time.time,
    ) -> Journal:
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="journal")
        loop = asyncio.get_running_loop()
        try:
            conn, identity, set_aside = await loop.run_in_executor(executor, _guarded(connect))
        except BaseException:
            executor.shutdown(wait=False)
            raise
        journal = cls(executor, conn, clock, path=path, identity=identity, set_aside=set_aside)
        try:
            journal._counts = await journal._run(_counts)
        except BaseException:
            await journal.close()
            raise
        return journal

    @property
    def path(self) -> str:
        return self._path

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def last_counts(self) -> JournalCounts:
        """``counts()`` as of the last committed write (no I/O: for metrics)."""
        return self._counts

    def busy_for(self) -> float | None:
        """How long the journal's thread has been in its current call (None: idle)."""
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
            return _guarded(call)()
        finally:
            self._busy_since = None

    async def _run(
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

    def _verify(self) -> None:
        """Raise JournalReplaced unless the file at the path is the one open (in the thread)."""
        if self._identity is None:
            return
        try:
            found = _identity(self._path)
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
        result = _record(conn, payload, received_at)
        c = self._counts
        resolved_known = result.resolved - (result.new - result.new_firing)
        alerts = dict(c.alerts)
        alerts[FIRING] += result.new_firing - resolved_known
        alerts[RESOLVED] += result.resolved
        self._counts = JournalCounts(alerts, c.decisions, c.deliveries + 1)
        self._verify()  # replaced meanwhile: what was just committed, nobody will read
        return result

    async def probe(self, within: float) -> None:
        """A write like a large delivery's (committed, then removed): returns once the journal
        takes writes again; raises the JournalError a delivery would meet."""
        await self._run(self._probe, within=within)

    def _probe(self, conn: sqlite3.Connection) -> None:
        self._verify()
        with _transaction(conn):
            conn.execute("INSERT INTO probe (data) VALUES (zeroblob(?))", (PROBE_BYTES,))
            conn.execute("DELETE FROM probe")
        self._verify()

    async def check(self, within: float) -> None:
        """Raises JournalReplaced if the file at the path is not the one open (no write)."""
        await self._run(lambda _conn: self._verify(), within=within)

    async def alerts_to_decide(self, limit: int = 1000) -> list[AlertRecord]:
        """Alerts without a decision, oldest first: the firing ones, and those that arrived
        resolved or resolved before they were decided (each is refused, ``resolved``)."""
        return await self._run(_alerts_to_decide, limit)

    async def alert(self, key: AlertKey) -> AlertRecord | None:
        """The alert of this episode (its startsAt within EPISODE_TOLERANCE of the key's)."""
        return await self._run(_alert, key)

    async def deliveries(self, limit: int = 1000) -> list[DeliveryRecord]:
        """The latest deliveries, newest first."""
        return await self._run(_deliveries, limit)

    async def save_decision(self, decision: DecisionRecord) -> DecisionRecord:
        """Store the decision about an alert; returns the stored one. Idempotent: if the alert
        has a decision already, that one is returned unchanged. Raises KeyError for an
        unknown alert, ValueError for an unknown verdict."""
        if decision.verdict not in DECISION_VERDICTS:
            raise ValueError(f"unknown verdict {decision.verdict!r}")
        return await self._run(self._save_decision, decision)

    def _save_decision(self, conn: sqlite3.Connection, decision: DecisionRecord) -> DecisionRecord:
        stored, new = _save_decision(conn, decision)
        if new:
            c = self._counts
            decisions = dict(c.decisions)
            decisions[stored.verdict] += 1
            self._counts = JournalCounts(c.alerts, decisions, c.deliveries)
        return stored

    async def decision(self, key: AlertKey) -> DecisionRecord | None:
        return await self._run(_decision, key)

    async def decisions(self, verdict: str | None = None) -> list[DecisionRecord]:
        """Decisions (with this verdict), in the order they were made."""
        return await self._run(_decisions, verdict)

    async def counts(self) -> JournalCounts:
        """Counted again from the tables (``last_counts`` is what the writes kept)."""
        return await self._run(_counts)

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
        gone = _prune_batch(conn, before, batch)
        c = self._counts
        alerts = {s: n - gone.alerts.get(s, 0) for s, n in c.alerts.items()}
        decisions = {v: n - gone.decisions.get(v, 0) for v, n in c.decisions.items()}
        self._counts = JournalCounts(alerts, decisions, c.deliveries - gone.deliveries)
        return sum(gone.alerts.values()), gone.more


def _consume(future: asyncio.Future[Any]) -> None:
    """Retrieve the outcome of a write nobody waits for any longer."""
    if not future.cancelled():
        future.exception()


def _reason(exc: sqlite3.Error) -> str:
    code = getattr(exc, "sqlite_errorcode", None)
    return OTHER if code is None else _SQLITE_REASONS.get(code & 0xFF, OTHER)


def _guarded(fn: Callable[[], T]) -> Callable[[], T]:
    def call() -> T:
        try:
            return fn()
        except JournalError:
            raise
        except sqlite3.Error as exc:
            reason = _reason(exc)
            if reason == CORRUPT:
                raise JournalCorrupt(f"journal: {exc}") from exc
            raise JournalError(f"journal: {exc}", reason) from exc
        except OSError as exc:  # e.g. creating the directory
            raise JournalError(f"journal: {exc}", IO) from exc

    return call


def _identity(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return (st.st_dev, st.st_ino)


def _open_file(
    path: str, busy_timeout: float, set_aside_corrupt: bool
) -> tuple[sqlite3.Connection, tuple[int, int] | None, SetAside | None]:
    """The connection, the file's identity, and the corrupt journal moved aside (if any)."""
    try:
        conn = _guarded(functools.partial(_connect, path, busy_timeout))()
    except JournalCorrupt as exc:
        if not set_aside_corrupt or path == ":memory:":
            raise JournalCorrupt(
                f"{exc}: the journal {path} is damaged; move it aside (or delete it) and start "
                "the controller again"
            ) from exc
        try:
            moved_to = _move_aside(path)
        except OSError as move:
            raise JournalCorrupt(
                f"{exc}; it cannot be moved aside ({move.strerror}): move {path} aside (or "
                "delete it) and start the controller again"
            ) from exc
        conn = _guarded(functools.partial(_connect, path, busy_timeout))()
        alerts, decisions, deliveries = _salvage(moved_to, conn)
        set_aside = SetAside(path, moved_to, str(exc), alerts, decisions, deliveries)
        return conn, _identity(path), set_aside
    return conn, None if path == ":memory:" else _identity(path), None


def _connect(path: str, busy_timeout: float) -> sqlite3.Connection:
    if path != ":memory:":
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)
    conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None)
    try:
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if path != ":memory:" and str(mode).lower() != "wal":
            raise JournalError(f"journal: cannot use WAL mode for {path} (got {mode})")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        problems = [row[0] for row in conn.execute("PRAGMA quick_check(3)")]
        if problems != ["ok"]:
            raise JournalCorrupt(f"journal: {'; '.join(str(p) for p in problems)}")
        _migrate(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def _connect_read_only(path: str, busy_timeout: float) -> sqlite3.Connection:
    """A connection that cannot write (``mode=ro``, ``query_only``) to an existing journal of
    this schema version."""
    uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=busy_timeout, isolation_level=None)
    try:
        conn.execute("PRAGMA query_only=ON")
        row = conn.execute("SELECT version FROM schema_version").fetchone()
        version = 0 if row is None else int(row[0])
        if version != SCHEMA_VERSION:
            raise JournalError(
                f"journal schema version {version} at {path} is not this nodesync's "
                f"({SCHEMA_VERSION}): read it with the nodesync that wrote it"
            )
    except BaseException:
        conn.close()
        raise
    return conn


def _move_aside(path: str) -> str:
    """Rename the journal and its -wal and -shm files to ``<path>.corrupt-<UTC time>``."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    moved_to = f"{path}.corrupt-{stamp}"
    n = 1
    while os.path.exists(moved_to):
        n += 1
        moved_to = f"{path}.corrupt-{stamp}-{n}"
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.rename(path + suffix, moved_to + suffix)
    return moved_to


_SALVAGED_TABLES: Final = {
    "deliveries": "id, received_at, group_key, receiver, status, alerts, truncated, new,"
    " duplicates, resolved",
    "alerts": "fingerprint, starts_at, status, labels, annotations, ends_at, generator_url,"
    " first_delivery, received_at, last_seen_at, resolved_at",
    "decisions": "fingerprint, starts_at, verdict, reason, detail, rollback, node, action,"
    " decided_at, wave",
}


def _readable_rows(conn: sqlite3.Connection, table: str, columns: str) -> Iterator[tuple[Any, ...]]:
    """The rows of ``table`` SQLite can still read, in rowid order: past a damaged page, the
    scan starts again further on (1, 2, 4, ... rowids), until a row is read again."""
    last = -(2**62)
    step = 1
    while last < 2**62:
        try:
            for row in conn.execute(
                f"SELECT rowid, {columns} FROM {table} WHERE rowid > ? ORDER BY rowid", (last,)
            ):
                last, step = row[0], 1
                yield row[1:]
            return
        except sqlite3.Error:
            last += step
            step *= 2


def _salvage(moved_to: str, conn: sqlite3.Connection) -> tuple[int, int, int]:
    """Copy what can be read from the journal moved aside into the fresh one: alerts,
    decisions (of alerts copied), deliveries. Returns how many of each."""
    try:
        old = sqlite3.connect(f"file:{moved_to}?mode=ro", uri=True)
    except sqlite3.Error:
        return 0, 0, 0
    counts = {table: 0 for table in _SALVAGED_TABLES}
    try:
        with _transaction(conn):
            for table, columns in _SALVAGED_TABLES.items():
                marks = ", ".join("?" * (columns.count(",") + 1))
                insert = f"INSERT OR IGNORE INTO {table} ({columns}) VALUES ({marks})"
                if table == "decisions":
                    insert = (
                        f"INSERT OR IGNORE INTO {table} ({columns}) SELECT {marks} WHERE EXISTS"
                        " (SELECT 1 FROM alerts WHERE fingerprint = ? AND starts_at = ?)"
                    )
                for row in _readable_rows(old, table, columns):
                    args = (*row, *row[:2]) if table == "decisions" else row
                    try:
                        counts[table] += conn.execute(insert, args).rowcount
                    except sqlite3.Error:  # a damaged value: the row is lost
                        continue
            conn.execute(
                """UPDATE alerts SET to_decide = 1 WHERE status = 'firing' AND NOT EXISTS
                    (SELECT 1 FROM decisions AS d WHERE d.fingerprint = alerts.fingerprint
                     AND d.starts_at = alerts.starts_at)"""
            )
    finally:
        old.close()
    return counts["alerts"], counts["decisions"], counts["deliveries"]


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection, *, durable: bool = True) -> Iterator[None]:
    """A write transaction (the write lock taken at once), committed on success: with
    ``durable``, its commit returns once the write-ahead log is on disk (fsynced); without, once
    it is written (it survives the process, not a power cut, until the next durable commit).
    Every transaction sets its own level, so a failure between two cannot leave the connection
    at the weaker one."""
    conn.execute(_DURABLE if durable else _WRITTEN)
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            # the original error matters; a connection that cannot roll back does on close
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        raise


def _migrate(conn: sqlite3.Connection) -> None:
    with _transaction(conn):
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        row = conn.execute("SELECT version FROM schema_version").fetchone()
        current = 0 if row is None else int(row[0])
        if current > SCHEMA_VERSION:
            raise JournalError(
                f"journal schema version {current} is newer than this nodesync's "
                f"({SCHEMA_VERSION}): use a newer nodesync or another --journal.path"
            )
        for statements in _MIGRATIONS[current:]:
            for statement in statements:
                conn.execute(statement)
        if row is None:
            conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
        elif current != SCHEMA_VERSION:
            conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))


def _json(mapping: Mapping[str, str]) -> str:
    return json.dumps(dict(mapping), sort_keys=True, separators=(",", ":"))


def _stored(conn: sqlite3.Connection, key: AlertKey, columns: str) -> tuple[Any, ...] | None:
    """The row of the alert episode ``key`` names: same fingerprint, the startsAt nearest the
    key's within EPISODE_TOLERANCE (the PRIMARY KEY index makes this one range lookup)."""
    fingerprint, starts_at = key
    row: tuple[Any, ...] | None = conn.execute(
        f"SELECT {columns} FROM alerts WHERE fingerprint = ? AND starts_at BETWEEN ? AND ?"
        " ORDER BY abs(starts_at - ?) LIMIT 1",
        (fingerprint, starts_at - EPISODE_TOLERANCE, starts_at + EPISODE_TOLERANCE, starts_at),
    ).fetchone()
    return row


def _episodes(conn: sqlite3.Connection, fingerprints: set[str]) -> dict[str, list[list[Any]]]:
    """Every recorded episode of these fingerprints, as ``[starts_at, status, last_seen_at]``
    lists by fingerprint, in startsAt order: one indexed query for a whole delivery."""
    found: dict[str, list[list[Any]]] = {}
    names = sorted(fingerprints)
    for at in range(0, len(names), _QUERY_CHUNK):
        chunk = names[at : at + _QUERY_CHUNK]
        marks = ", ".join("?" * len(chunk))
        for fingerprint, *episode in conn.execute(
            "SELECT fingerprint, starts_at, status, last_seen_at FROM alerts"
            f" WHERE fingerprint IN ({marks}) ORDER BY fingerprint, starts_at",
            chunk,
        ):
            found.setdefault(fingerprint, []).append(episode)
    return found


def _nearest(episodes: list[list[Any]], starts_at: float) -> list[Any] | None:
    """The episode whose startsAt is nearest ``starts_at`` within EPISODE_TOLERANCE (as
    :func:`_stored` finds it), or None."""
    best: list[Any] | None = None
    for episode in episodes:
        distance = abs(episode[0] - starts_at)
        if distance <= EPISODE_TOLERANCE and (best is None or distance < abs(best[0] - starts_at)):
            best = episode
    return best


@dataclass(slots=True)
class _Judged:
    """What a delivery changes, judged against the recorded episodes: alerts to insert
    (``new_alerts``), rows to resolve, keys whose ``last_seen_at`` moves, and the counts."""

    new_alerts: list[Alert] = dataclasses.field(default_factory=list)
    resolves: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    seen: list[tuple[str, float]] = dataclasses.field(default_factory=list)
    duplicates: int = 0
    resolved: int = 0
    new_firing: int = 0

    @property
    def records_alerts(self) -> bool:
        """The delivery brings an alert or a resolution the journal does not hold yet."""
        return bool(self.new_alerts or self.resolves)


def _record(conn: sqlite3.Connection, payload: WebhookPayload, received_at: float) -> RecordResult:
    """One delivery, in a few statements whatever its size: its alerts' episodes read in one
    query, then the new ones inserted, the resolved ones updated and the rest (re-sends, HA
    duplicates, retries) marked seen, each kind in one call. Alerts are judged in delivery
    order against what the delivery's earlier alerts did, as if written one by one. A copy
    moves ``last_seen_at`` only once it is LAST_SEEN_RESOLUTION newer: the re-sends of a group
    then write nothing but their delivery row.

    A delivery that brings a new alert or a resolution is judged and written in one
    transaction, committed with the write-ahead log on disk (fsynced) before this returns. One
    that brings nothing new (most of them: Alertmanager sends every alert of a group again with
    each notification, and an HA pair sends each notification twice) has its alerts on disk
    already: its own row and any ``last_seen_at`` are committed in a second transaction that
    does not wait for the disk (``synchronous=NORMAL``). That commit survives the process'
    death (a crash, a SIGKILL) like any other; a power cut or a kernel crash can lose it until
    the next commit that does wait for the disk, which makes it durable with its own."""
    with _transaction(conn):
        judged = _judge(
            payload, _episodes(conn, {a.fingerprint for a in payload.alerts}), received_at
        )
        if judged.records_alerts:
            _write_delivery(conn, payload, received_at, judged)
    if not judged.records_alerts:  # the transaction above wrote nothing, so it flushed nothing
        with _transaction(conn, durable=False):
            _write_delivery(conn, payload, received_at, judged)
    return RecordResult(
        new=len(judged.new_alerts),
        duplicates=judged.duplicates,
        resolved=judged.resolved,
        truncated=payload.truncated_alerts,
        new_firing=judged.new_firing,
    )


def _judge(
    payload: WebhookPayload, episodes: dict[str, list[list[Any]]], received_at: float
) -> _Judged:
    """What each alert of the delivery changes, in order (``episodes`` is updated as it goes)."""
    judged = _Judged()
    for alert in payload.alerts:
        known = episodes.setdefault(alert.fingerprint, [])
        row = _nearest(known, alert.starts_at)
        if row is None:
            is_resolved = alert.status == RESOLVED
            judged.new_alerts.append(alert)
            known.append([alert.starts_at, alert.status, received_at])
            judged.resolved += is_resolved
            judged.new_firing += not is_resolved
            continue
        key = (alert.fingerprint, row[0])  # as first recorded
        if row[1] == FIRING and alert.status == RESOLVED:
            judged.resolves.append((RESOLVED, received_at, alert.ends_at, received_at, *key))
            row[1], row[2] = RESOLVED, max(row[2], received_at)
            judged.resolved += 1
            continue
        # A re-send, an HA duplicate, a retry, or a late firing copy of a resolved one.
        judged.duplicates += 1
        if received_at - row[2] >= LAST_SEEN_RESOLUTION:
            judged.seen.append(key)
            row[2] = received_at
    return judged


def _write_delivery(
    conn: sqlite3.Connection, payload: WebhookPayload, received_at: float, judged: _Judged
) -> None:
    """The delivery's row and what it changes, in the caller's transaction."""
    delivery = conn.execute(
        "INSERT INTO deliveries (received_at, group_key, receiver, status, alerts, truncated,"
        " new, duplicates, resolved) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            received_at,
            payload.group_key,
            payload.receiver,
            payload.status,
            len(payload.alerts),
            payload.truncated_alerts,
            len(judged.new_alerts),
            judged.duplicates,
            judged.resolved,
        ),
    ).lastrowid
    conn.executemany(
        "INSERT INTO alerts (fingerprint, starts_at, status, labels, annotations,"
        " ends_at, generator_url, first_delivery, received_at, last_seen_at,"
        " resolved_at, to_decide) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)",
        [
            (
                alert.fingerprint,
                alert.starts_at,
                alert.status,
                _json(alert.labels),
                _json(alert.annotations),
                alert.ends_at,
                alert.generator_url,
                delivery,
                received_at,
                received_at,
                received_at if alert.status == RESOLVED else None,
            )
            for alert in judged.new_alerts
        ],
    )
    conn.executemany(
        "UPDATE alerts SET status = ?, resolved_at = ?, ends_at = ?, last_seen_at = ?"
        " WHERE fingerprint = ? AND starts_at = ?",
        judged.resolves,
    )
    for at in range(0, len(judged.seen), _QUERY_CHUNK):
        chunk = judged.seen[at : at + _QUERY_CHUNK]
        pairs = ", ".join(["(?, ?)"] * len(chunk))
        conn.execute(
            "UPDATE alerts SET last_seen_at = max(last_seen_at, ?)"
            f" WHERE (fingerprint, starts_at) IN (VALUES {pairs})",
            (received_at, *(value for key in chunk for value in key)),
        )


_ALERT_COLUMNS = (
    "fingerprint, starts_at, status, labels, annotations, received_at, last_seen_at,"
    " resolved_at, ends_at, generator_url"
)


def _alert_record(row: tuple[Any, ...]) -> AlertRecord:
    return AlertRecord(
        fingerprint=row[0],
        starts_at=row[1],
        status=row[2],
        labels=json.loads(row[3]),
        annotations=json.loads(row[4]),
        received_at=row[5],
        last_seen_at=row[6],
        resolved_at=row[7],
        ends_at=row[8],
        generator_url=row[9],
    )


def _alerts_to_decide(conn: sqlite3.Connection, limit: int) -> list[AlertRecord]:
    rows = conn.execute(
        f"SELECT {_ALERT_COLUMNS} FROM alerts INDEXED BY alerts_to_decide WHERE to_decide = 1"
        " ORDER BY received_at, starts_at, fingerprint LIMIT ?",
        (limit,),
    ).fetchall()
    return [_alert_record(r) for r in rows]


def _alert(conn: sqlite3.Connection, key: AlertKey) -> AlertRecord | None:
    row = _stored(conn, key, _ALERT_COLUMNS)
    return None if row is None else _alert_record(row)


def _deliveries(conn: sqlite3.Connection, limit: int) -> list[DeliveryRecord]:
    rows = conn.execute(
        "SELECT id, received_at, group_key, receiver, status, alerts, truncated, new,"
        " duplicates, resolved FROM deliveries ORDER BY id DESC LIMIT ?",
        (limit,),
    ).fetchall()
    return [DeliveryRecord(*r) for r in rows]


_DECISION_COLUMNS = (
    "fingerprint, starts_at, verdict, reason, detail, rollback, node, action, decided_at, wave"
)


def _decision_record(row: tuple[Any, ...]) -> DecisionRecord:
    return DecisionRecord((row[0], row[1]), *row[2:])


def _save_decision(
    conn: sqlite3.Connection, decision: DecisionRecord
) -> tuple[DecisionRecord, bool]:
    with _transaction(conn):
        known = _stored(conn, decision.alert_key, "fingerprint, starts_at")
        if known is None:
            raise KeyError(f"no alert {decision.alert_key!r} in the journal")
        key = (known[0], known[1])
        existing = conn.execute(
            f"SELECT {_DECISION_COLUMNS} FROM decisions WHERE fingerprint = ? AND starts_at = ?",
            key,
        ).fetchone()
        if existing is not None:
            return _decision_record(existing), False
        conn.execute(
            f"INSERT INTO decisions ({_DECISION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                *key,
                decision.verdict,
                decision.reason,
                decision.detail,
                decision.rollback,
                decision.node,
                decision.action,
                decision.decided_at,
                decision.wave,
            ),
        )
        conn.execute("UPDATE alerts SET to_decide = 0 WHERE fingerprint = ? AND starts_at = ?", key)
    if key != decision.alert_key:
        return dataclasses.replace(decision, alert_key=key), True
    return decision, True


def _decision(conn: sqlite3.Connection, key: AlertKey) -> DecisionRecord | None:
    known = _stored(conn, key, "fingerprint, starts_at")
    if known is None:
        return None
    row = conn.execute(
        f"SELECT {_DECISION_COLUMNS} FROM decisions WHERE fingerprint = ? AND starts_at = ?",
        (known[0], known[1]),
    ).fetchone()
    return None if row is None else _decision_record(row)


def _decisions(conn: sqlite3.Connection, verdict: str | None) -> list[DecisionRecord]:
    if verdict is None:
        rows = conn.execute(
            f"SELECT {_DECISION_COLUMNS} FROM decisions ORDER BY decided_at, rowid"
        ).fetchall()
    else:
        rows = conn.execute(
            f"SELECT {_DECISION_COLUMNS} FROM decisions WHERE verdict = ?"
            " ORDER BY decided_at, rowid",
            (verdict,),
        ).fetchall()
    return [_decision_record(r) for r in rows]


def _counts(conn: sqlite3.Connection) -> JournalCounts:
    alerts = dict(EMPTY_COUNTS.alerts)
    alerts.update(conn.execute("SELECT status, count(*) FROM alerts GROUP BY status").fetchall())
    decisions = dict(EMPTY_COUNTS.decisions)
    for verdict, n in conn.execute("SELECT verdict, count(*) FROM decisions GROUP BY verdict"):
        if verdict in decisions:
            decisions[verdict] = n
    (deliveries,) = conn.execute("SELECT count(*) FROM deliveries").fetchone()
    return JournalCounts(alerts=alerts, decisions=decisions, deliveries=deliveries)


@dataclass(frozen=True, slots=True)
class _Pruned:
    alerts: Mapping[str, int]  # by status
    decisions: Mapping[str, int]  # by verdict
    deliveries: int
    more: bool  # a batch was full: there may be more to prune


def _prune_batch(conn: sqlite3.Connection, before: float, batch: int) -> _Pruned:
    """One transaction of pruning: up to ``batch`` alerts last seen before ``before`` (with
    their decisions), up to ``batch`` deliveries received before it; what went, counted."""
    with _transaction(conn):
        rows = conn.execute(
            "SELECT rowid, status FROM alerts INDEXED BY alerts_by_last_seen"
            " WHERE last_seen_at < ? LIMIT ?",
            (before, batch),
        ).fetchall()
        alerts: dict[str, int] = {}
        decisions: dict[str, int] = {}
        if rows:
            ids = [r[0] for r in rows]
            marks = ", ".join("?" * len(ids))
            for status in (r[1] for r in rows):
                alerts[status] = alerts.get(status, 0) + 1
            for verdict, n in conn.execute(
                "SELECT d.verdict, count(*) FROM decisions AS d JOIN alerts AS a"
                " ON d.fingerprint = a.fingerprint AND d.starts_at = a.starts_at"
                f" WHERE a.rowid IN ({marks}) GROUP BY d.verdict",
                ids,
            ):
                decisions[verdict] = n
            conn.execute(f"DELETE FROM alerts WHERE rowid IN ({marks})", ids)  # cascades
        deliveries = conn.execute(
            "DELETE FROM deliveries WHERE id IN (SELECT id FROM deliveries"
            " WHERE received_at < ? ORDER BY received_at LIMIT ?)",
            (before, batch),
        ).rowcount
    return _Pruned(alerts, decisions, deliveries, len(rows) == batch or deliveries == batch)
