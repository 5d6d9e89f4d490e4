"""The journal's schema: the migrations from an empty file to :data:`SCHEMA_VERSION`, applied at
open (:func:`migrate`), and the write transaction every change goes through."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from typing import Final

from exporter.controller.journal.errors import JournalError

MIGRATIONS: tuple[tuple[str, ...], ...] = (
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
    (  # version 4: how each decided episode ended (exporter.model.outcomes), written once when
        # its end is known: NULL until then, '' for an end not counted. Episodes that had
        # resolved before this version are not counted after the fact.
        "ALTER TABLE decisions ADD COLUMN outcome TEXT",
        """UPDATE decisions SET outcome = '' WHERE EXISTS (SELECT 1 FROM alerts AS a
            WHERE a.fingerprint = decisions.fingerprint AND a.starts_at = decisions.starts_at
            AND a.status = 'resolved')""",
        "CREATE INDEX decisions_open ON decisions (decided_at) WHERE outcome IS NULL",
    ),
)

#: The schema version this code writes; a journal with a newer one is refused.
SCHEMA_VERSION = len(MIGRATIONS)

#: A transaction's safety level: its commit waits for the disk, or for the write only (WAL mode).
_DURABLE: Final = "PRAGMA synchronous=FULL"
_WRITTEN: Final = "PRAGMA synchronous=NORMAL"


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection, *, durable: bool = True) -> Iterator[None]:
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


def migrate(conn: sqlite3.Connection) -> None:
    with transaction(conn):
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        row = conn.execute("SELECT version FROM schema_version").fetchone()
        current = 0 if row is None else int(row[0])
        if current > SCHEMA_VERSION:
            raise JournalError(
                f"journal schema version {current} is newer than this nodesync's "
                f"({SCHEMA_VERSION}): use a newer nodesync or another --journal.path"
            )
        for statements in MIGRATIONS[current:]:
            for statement in statements:
                conn.execute(statement)
        if row is None:
            conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
        elif current != SCHEMA_VERSION:
            conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))
