"""The controller's durable journal: every received alert, and the plans made for them.

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
At most one plan exists per alert key (``save_plan`` is idempotent), with its steps' states, so
an executor that restarts resumes where it stopped.
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
from collections.abc import Callable, Collection, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from exporter.model.alerts import ACTION_LABEL, FIRING, NODE_LABEL, RESOLVED, Alert, WebhookPayload
from exporter.model.rollback import Action, Plan, PlanState, Refusal, Step, StepKind, StepState

T = TypeVar("T")

AlertKey = tuple[str, float]

#: Plans in these states are finished: nothing will act on them any more.
TERMINAL_PLAN_STATES = frozenset(
    {PlanState.DONE, PlanState.FAILED, PlanState.REFUSED, PlanState.DRY_RUN, PlanState.CANCELLED}
)

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
class StepRecord:
    index: int
    step: Step
    state: StepState
    detail: str
    attempts: int
    updated_at: float


@dataclass(frozen=True, slots=True)
class PlanRecord:
    id: int
    alert_key: AlertKey
    action: Action  # NONE when the alert's label is not an action (a refusal's alert)
    node: str
    state: PlanState
    reason: str
    dry_run: bool
    created_at: float
    updated_at: float
    steps: tuple[StepRecord, ...]
    refusal: Refusal | None
    wave: str = ""

    @property
    def plan(self) -> Plan | None:
        """The plan as it was saved (None for a refusal)."""
        if self.refusal is not None:
            return None
        return Plan(
            action=self.action,
            node=self.node,
            steps=tuple(s.step for s in self.steps),
            alert_fingerprint=self.alert_key[0],
            alert_starts_at=self.alert_key[1],
            wave=self.wave,
        )


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
    """Alerts by status (``firing``, ``resolved``), plans by state (every state), deliveries."""

    alerts: Mapping[str, int]
    plans: Mapping[PlanState, int]
    deliveries: int


EMPTY_COUNTS = JournalCounts(
    alerts={FIRING: 0, RESOLVED: 0}, plans={s: 0 for s in PlanState}, deliveries=0
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
            await journal._run(_refresh_counts, journal)
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

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a write transaction, then refresh the counts (in the same job)."""

        def job(conn: sqlite3.Connection, *inner: Any) -> T:
            result = fn(conn, *inner)
            _refresh_counts(conn, self)
            return result

        return await self._run(job, *args)

    async def record(self, payload: WebhookPayload, *, received_at: float) -> RecordResult:
        """Record one delivery and its alerts in one transaction, committed before returning."""
        return await self._write(_record, payload, received_at)

    async def alerts_to_plan(self, limit: int = 1000) -> list[AlertRecord]:
        """Firing alerts without a plan, oldest first."""
        return await self._run(_alerts_to_plan, limit)

    async def alert(self, key: AlertKey) -> AlertRecord | None:
        return await self._run(_alert, key)

    async def deliveries(self, limit: int = 1000) -> list[DeliveryRecord]:
        """The latest deliveries, newest first."""
        return await self._run(_deliveries, limit)

    async def save_plan(
        self, alert_key: AlertKey, outcome: Plan | Refusal, *, dry_run: bool, state: PlanState
    ) -> int:
        """Store the plan (or refusal) for an alert, its steps pending; returns the plan id.
        Idempotent: if the alert has a plan already, that plan's id is returned unchanged.
        A refusal's action and node come from the alert's labels; its reason becomes the
        plan's reason. Raises KeyError for an unknown alert."""
        return await self._write(_save_plan, alert_key, outcome, dry_run, state, self._clock())

    async def plan(self, plan_id: int) -> PlanRecord | None:
        return await self._run(_plan, plan_id)

    async def plans(self, states: Collection[PlanState] | None = None) -> list[PlanRecord]:
        """Plans (in these states), in the order they were made."""
        return await self._run(_plans, None if states is None else tuple(states))

    async def update_plan(self, plan_id: int, state: PlanState, reason: str = "") -> None:
        """Raises KeyError for an unknown plan."""
        await self._write(_update_plan, plan_id, state, reason, self._clock())

    async def update_step(
        self,
        plan_id: int,
        index: int,
        state: StepState,
        detail: str = "",
        attempts: int | None = None,
    ) -> None:
        """``attempts`` None keeps the stored count. Raises KeyError for an unknown step."""
        await self._write(_update_step, plan_id, index, state, detail, attempts, self._clock())

    async def counts(self) -> JournalCounts:
        return await self._run(_counts)

    async def prune(self, before: float) -> int:
        """Forget deliveries received before ``before``, and alerts last seen before it whose
        plan is finished (or that have none), with their plans. Returns the alerts removed."""
        return await self._write(_prune, before)


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


def _alerts_to_plan(conn: sqlite3.Connection, limit: int) -> list[AlertRecord]:
    rows = conn.execute(
        f"SELECT {_ALERT_COLUMNS} FROM alerts AS a WHERE status = ? AND NOT EXISTS"
        " (SELECT 1 FROM plans AS p WHERE p.fingerprint = a.fingerprint"
        " AND p.starts_at = a.starts_at)"
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


def _action(value: str) -> Action:
    try:
        return Action(value)
    except ValueError:
        return Action.NONE


def _save_plan(
    conn: sqlite3.Connection,
    key: AlertKey,
    outcome: Plan | Refusal,
    dry_run: bool,
    state: PlanState,
    now: float,
) -> int:
    if isinstance(outcome, Plan) and (outcome.alert_fingerprint, outcome.alert_starts_at) != key:
        raise ValueError(f"the plan is for alert {outcome.alert_fingerprint!r}, not {key!r}")
    with _transaction(conn):
        existing = conn.execute(
            "SELECT id FROM plans WHERE fingerprint = ? AND starts_at = ?", key
        ).fetchone()
        if existing is not None:
            return int(existing[0])
        alert_row = conn.execute(
            "SELECT labels FROM alerts WHERE fingerprint = ? AND starts_at = ?", key
        ).fetchone()
        if alert_row is None:
            raise KeyError(f"no alert {key!r} in the journal")
        refusal: tuple[str | None, str | None]
        if isinstance(outcome, Plan):
            action, node, wave = outcome.action.value, outcome.node, outcome.wave
            steps, reason, refusal = outcome.steps, "", (None, None)
        else:
            labels = json.loads(alert_row[0])
            action, node, wave = labels.get(ACTION_LABEL, ""), labels.get(NODE_LABEL, ""), ""
            steps, reason, refusal = (), outcome.reason, (outcome.reason, outcome.detail)
        plan_id = conn.execute(
            "INSERT INTO plans (fingerprint, starts_at, action, node, wave, state, reason,"
            " dry_run, refusal_reason, refusal_detail, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (*key, action, node, wave, state.value, reason, dry_run, *refusal, now, now),
        ).lastrowid
        conn.executemany(
            "INSERT INTO steps (plan_id, idx, kind, node, namespace, pod, pod_uid, state,"
            " detail, attempts, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, '', 0, ?)",
            [
                (
                    plan_id,
                    i,
                    s.kind.value,
                    s.node,
                    s.namespace,
                    s.pod,
                    s.pod_uid,
                    StepState.PENDING.value,
                    now,
                )
                for i, s in enumerate(steps)
            ],
        )
    assert plan_id is not None
    return plan_id


_PLAN_COLUMNS = (
    "id, fingerprint, starts_at, action, node, wave, state, reason, dry_run, refusal_reason,"
    " refusal_detail, created_at, updated_at"
)


def _plan_records(conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> list[PlanRecord]:
    records = []
    for row in rows:
        steps = conn.execute(
            "SELECT idx, kind, node, namespace, pod, pod_uid, state, detail, attempts, updated_at"
            " FROM steps WHERE plan_id = ? ORDER BY idx",
            (row[0],),
        ).fetchall()
        records.append(
            PlanRecord(
                id=row[0],
                alert_key=(row[1], row[2]),
                action=_action(row[3]),
                node=row[4],
                wave=row[5],
                state=PlanState(row[6]),
                reason=row[7],
                dry_run=bool(row[8]),
                refusal=None if row[9] is None else Refusal(row[9], row[10] or ""),
                created_at=row[11],
                updated_at=row[12],
                steps=tuple(
                    StepRecord(
                        index=s[0],
                        step=Step(StepKind(s[1]), s[2], s[3], s[4], s[5]),
                        state=StepState(s[6]),
                        detail=s[7],
                        attempts=s[8],
                        updated_at=s[9],
                    )
                    for s in steps
                ),
            )
        )
    return records


def _plan(conn: sqlite3.Connection, plan_id: int) -> PlanRecord | None:
    rows = conn.execute(f"SELECT {_PLAN_COLUMNS} FROM plans WHERE id = ?", (plan_id,)).fetchall()
    records = _plan_records(conn, rows)
    return records[0] if records else None


def _plans(conn: sqlite3.Connection, states: tuple[PlanState, ...] | None) -> list[PlanRecord]:
    if states is None:
        rows = conn.execute(f"SELECT {_PLAN_COLUMNS} FROM plans ORDER BY id").fetchall()
    else:
        marks = ", ".join("?" * len(states))
        rows = conn.execute(
            f"SELECT {_PLAN_COLUMNS} FROM plans WHERE state IN ({marks}) ORDER BY id",
            [s.value for s in states],
        ).fetchall()
    return _plan_records(conn, rows)


def _update_plan(
    conn: sqlite3.Connection, plan_id: int, state: PlanState, reason: str, now: float
) -> None:
    with _transaction(conn):
        changed = conn.execute(
            "UPDATE plans SET state = ?, reason = ?, updated_at = ? WHERE id = ?",
            (state.value, reason, now, plan_id),
        ).rowcount
        if changed == 0:
            raise KeyError(f"no plan {plan_id} in the journal")


def _update_step(
    conn: sqlite3.Connection,
    plan_id: int,
    index: int,
    state: StepState,
    detail: str,
    attempts: int | None,
    now: float,
) -> None:
    with _transaction(conn):
        changed = conn.execute(
            "UPDATE steps SET state = ?, detail = ?, attempts = coalesce(?, attempts),"
            " updated_at = ? WHERE plan_id = ? AND idx = ?",
            (state.value, detail, attempts, now, plan_id, index),
        ).rowcount
        if changed == 0:
            raise KeyError(f"no step {index} of plan {plan_id} in the journal")
        conn.execute("UPDATE plans SET updated_at = ? WHERE id = ?", (now, plan_id))


def _counts(conn: sqlite3.Connection) -> JournalCounts:
    alerts = dict(EMPTY_COUNTS.alerts)
    alerts.update(conn.execute("SELECT status, count(*) FROM alerts GROUP BY status").fetchall())
    plans = dict(EMPTY_COUNTS.plans)
    for state, n in conn.execute("SELECT state, count(*) FROM plans GROUP BY state"):
        plans[PlanState(state)] = n
    (deliveries,) = conn.execute("SELECT count(*) FROM deliveries").fetchone()
    return JournalCounts(alerts=alerts, plans=plans, deliveries=deliveries)


def _refresh_counts(conn: sqlite3.Connection, journal: Journal) -> None:
    journal._counts = _counts(conn)


def _prune(conn: sqlite3.Connection, before: float) -> int:
    active = [s.value for s in PlanState if s not in TERMINAL_PLAN_STATES]
    marks = ", ".join("?" * len(active))
    with _transaction(conn):
        conn.execute("DELETE FROM deliveries WHERE received_at < ?", (before,))
        removed = conn.execute(
            "DELETE FROM alerts AS a WHERE last_seen_at < ? AND NOT EXISTS"
            " (SELECT 1 FROM plans AS p WHERE p.fingerprint = a.fingerprint"
            f" AND p.starts_at = a.starts_at AND p.state IN ({marks}))",
            (before, *active),
        ).rowcount
    return removed
