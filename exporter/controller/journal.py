"""The controller's durable journal: the webhook's intake. Every received alert, and what was
decided about it.

One SQLite file (WAL, ``synchronous=FULL``), one connection used by one dedicated thread: every
method runs its SQL there, so the event loop never waits for a disk flush, and writes are
serialised. A write method returns only after its transaction committed (the WAL was fsynced):
what it reported survives a crash or a SIGKILL, and a transaction that did not commit leaves
nothing behind. Other processes may read the file beside the writer
(:meth:`Journal.open_read_only`): WAL readers see committed transactions and take no lock the
writer waits for.

Alerts are keyed by (fingerprint, startsAt): Alertmanager re-sends every alert of a group with
each notification, HA pairs deliver duplicates, and 5xx answers are retried, but one firing
episode keeps its key. A key is recorded once; later copies only move ``last_seen_at``, or mark
the alert resolved. A resolved alert never fires again (a new episode has a new startsAt).
At most one decision exists per alert key (``save_decision`` is idempotent): the plan, join or
escalation became (or named) a NodeRollback, whose status in the API server is the record of
the rollback itself; a refusal or a dry run is recorded here only. The journal is local to one
controller replica: what it holds that no NodeRollback records yet (alerts acknowledged, not yet
decided) is what a replica's death can delay (docs/install.md).

Counts for the metrics are kept as the writes change them (counted once at open), so a write
costs the same however much the journal holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import sqlite3
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from exporter.model.alerts import FIRING, RESOLVED, Alert, WebhookPayload
from exporter.model.decision import VERDICTS, WAITS

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
)

#: The schema version this code writes; a journal with a newer one is refused.
SCHEMA_VERSION = len(_MIGRATIONS)


class JournalError(Exception):
    """The journal could not do what was asked (storage error, locked, newer schema)."""


class JournalClosed(JournalError):
    """The journal was closed."""


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
        self, executor: ThreadPoolExecutor, conn: sqlite3.Connection, clock: Callable[[], float]
    ) -> None:
        self._executor = executor
        self._conn = conn
        self._clock = clock
        self._closed = False
        self._counts = EMPTY_COUNTS

    @classmethod
    async def open(
        cls, path: str, *, clock: Callable[[], float] = time.time, busy_timeout: float = 2.0
    ) -> Journal:
        """Open (create, migrate) the journal at ``path``. ``busy_timeout``: how long a write
        waits for a lock another connection holds before it fails."""
        return await cls._open(functools.partial(_connect, path, busy_timeout), clock)

    @classmethod
    async def open_read_only(cls, path: str, *, busy_timeout: float = 2.0) -> Journal:
        """Open the existing journal at ``path`` for reading only: nothing is created or
        migrated, and every write method fails with JournalError. Safe beside the controller
        that writes it (WAL: a reader neither blocks the writer nor waits for it), for tools
        and benchmarks that look at its plans. Raises JournalError when there is no journal
        at ``path`` or its schema is not this nodesync's."""
        return await cls._open(functools.partial(_connect_read_only, path, busy_timeout))

    @classmethod
    async def _open(
        cls, connect: Callable[[], sqlite3.Connection], clock: Callable[[], float] = time.time
    ) -> Journal:
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="journal")
        loop = asyncio.get_running_loop()
        try:
            conn = await loop.run_in_executor(executor, _guarded(connect))
        except BaseException:
            executor.shutdown(wait=False)
            raise
        journal = cls(executor, conn, clock)
        try:
            journal._counts = await journal._run(_counts)
        except BaseException:
            await journal.close()
            raise
        return journal

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def last_counts(self) -> JournalCounts:
        """``counts()`` as of the last committed write (no I/O: for metrics)."""
        return self._counts

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self._conn.close)
        finally:
            self._executor.shutdown(wait=False)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        if self._closed:
            raise JournalClosed("the journal is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, _guarded(functools.partial(fn, self._conn, *args))
        )

    async def record(self, payload: WebhookPayload, *, received_at: float) -> RecordResult:
        """Record one delivery and its alerts in one transaction, committed before returning."""
        result = await self._run(_record, payload, received_at)
        c = self._counts
        resolved_known = result.resolved - (result.new - result.new_firing)
        alerts = dict(c.alerts)
        alerts[FIRING] += result.new_firing - resolved_known
        alerts[RESOLVED] += result.resolved
        self._counts = JournalCounts(alerts, c.decisions, c.deliveries + 1)
        return result

    async def alerts_to_decide(self, limit: int = 1000) -> list[AlertRecord]:
        """Firing alerts without a decision, oldest first."""
        return await self._run(_alerts_to_decide, limit)

    async def alert(self, key: AlertKey) -> AlertRecord | None:
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
        stored, new = await self._run(_save_decision, decision)
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
        return await self._run(_counts)

    async def prune(self, before: float) -> int:
        """Forget deliveries received before ``before``, and alerts last seen before it (with
        their decisions). Returns the alerts removed."""
        removed = await self._run(_prune, before)
        self._counts = await self._run(_counts)
        return removed


def _guarded(fn: Callable[[], T]) -> Callable[[], T]:
    def call() -> T:
        try:
            return fn()
        except (sqlite3.Error, OSError) as exc:  # OSError: e.g. creating the directory
            raise JournalError(f"journal: {exc}") from exc

    return call


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


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """A write transaction (the write lock taken at once), committed on success."""
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
                f"({SCHEMA_VERSION}): use a newer nodesync or another --journal-path"
            )
        for statements in _MIGRATIONS[current:]:
            for statement in statements:
                conn.execute(statement)
        if row is None:
            conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
        else:
            conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))


def _json(mapping: Mapping[str, str]) -> str:
    return json.dumps(dict(mapping), sort_keys=True, separators=(",", ":"))


def _record(conn: sqlite3.Connection, payload: WebhookPayload, received_at: float) -> RecordResult:
    new = duplicates = resolved = new_firing = 0
    with _transaction(conn):
        delivery = conn.execute(
            "INSERT INTO deliveries (received_at, group_key, receiver, status, alerts, truncated)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (
                received_at,
                payload.group_key,
                payload.receiver,
                payload.status,
                len(payload.alerts),
                payload.truncated_alerts,
            ),
        ).lastrowid
        for alert in payload.alerts:
            row = conn.execute(
                "SELECT status FROM alerts WHERE fingerprint = ? AND starts_at = ?", alert.key
            ).fetchone()
            if row is None:
                is_resolved = alert.status == RESOLVED
                conn.execute(
                    "INSERT INTO alerts (fingerprint, starts_at, status, labels, annotations,"
                    " ends_at, generator_url, first_delivery, received_at, last_seen_at,"
                    " resolved_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                        received_at if is_resolved else None,
                    ),
                )
                new += 1
                resolved += is_resolved
                new_firing += not is_resolved
            elif row[0] == FIRING and alert.status == RESOLVED:
                conn.execute(
                    "UPDATE alerts SET status = ?, resolved_at = ?, ends_at = ?, last_seen_at = ?"
                    " WHERE fingerprint = ? AND starts_at = ?",
                    (RESOLVED, received_at, alert.ends_at, received_at, *alert.key),
                )
                resolved += 1
            else:  # a re-send, an HA duplicate, a retry, or a late firing copy of a resolved one
                conn.execute(
                    "UPDATE alerts SET last_seen_at = max(last_seen_at, ?)"
                    " WHERE fingerprint = ? AND starts_at = ?",
                    (received_at, *alert.key),
                )
                duplicates += 1
        conn.execute(
            "UPDATE deliveries SET new = ?, duplicates = ?, resolved = ? WHERE id = ?",
            (new, duplicates, resolved, delivery),
        )
    return RecordResult(
        new=new,
        duplicates=duplicates,
        resolved=resolved,
        truncated=payload.truncated_alerts,
        new_firing=new_firing,
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
        f"SELECT {_ALERT_COLUMNS} FROM alerts AS a WHERE status = ? AND NOT EXISTS"
        " (SELECT 1 FROM decisions AS d WHERE d.fingerprint = a.fingerprint"
        " AND d.starts_at = a.starts_at)"
        " ORDER BY received_at, starts_at, fingerprint LIMIT ?",
        (FIRING, limit),
    ).fetchall()
    return [_alert_record(r) for r in rows]


def _alert(conn: sqlite3.Connection, key: AlertKey) -> AlertRecord | None:
    row = conn.execute(
        f"SELECT {_ALERT_COLUMNS} FROM alerts WHERE fingerprint = ? AND starts_at = ?", key
    ).fetchone()
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
    key = decision.alert_key
    with _transaction(conn):
        existing = conn.execute(
            f"SELECT {_DECISION_COLUMNS} FROM decisions WHERE fingerprint = ? AND starts_at = ?",
            key,
        ).fetchone()
        if existing is not None:
            return _decision_record(existing), False
        known = conn.execute(
            "SELECT 1 FROM alerts WHERE fingerprint = ? AND starts_at = ?", key
        ).fetchone()
        if known is None:
            raise KeyError(f"no alert {key!r} in the journal")
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
    return decision, True


def _decision(conn: sqlite3.Connection, key: AlertKey) -> DecisionRecord | None:
    row = conn.execute(
        f"SELECT {_DECISION_COLUMNS} FROM decisions WHERE fingerprint = ? AND starts_at = ?", key
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


def _prune(conn: sqlite3.Connection, before: float) -> int:
    with _transaction(conn):
        conn.execute("DELETE FROM deliveries WHERE received_at < ?", (before,))
        removed = conn.execute("DELETE FROM alerts WHERE last_seen_at < ?", (before,)).rowcount
    return removed
