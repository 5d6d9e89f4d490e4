"""The decision about each alert episode: stored once (idempotent), read back; the firing
alerts with a decision of some verdicts (those a guard holds back)."""

from __future__ import annotations

import dataclasses
import sqlite3
from typing import Any

from exporter.controller.journal.ledger import _ALERT_COLUMNS, _alert_record, stored
from exporter.controller.journal.records import AlertKey, AlertRecord, DecisionRecord
from exporter.controller.journal.schema import transaction

_DECISION_COLUMNS = (
    "fingerprint, starts_at, verdict, reason, detail, rollback, node, action, decided_at, wave"
)


def _decision_record(row: tuple[Any, ...]) -> DecisionRecord:
    return DecisionRecord((row[0], row[1]), *row[2:])


def save_decision(
    conn: sqlite3.Connection, decision: DecisionRecord
) -> tuple[DecisionRecord, bool]:
    with transaction(conn):
        known = stored(conn, decision.alert_key, "fingerprint, starts_at")
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


def read_decision(conn: sqlite3.Connection, key: AlertKey) -> DecisionRecord | None:
    known = stored(conn, key, "fingerprint, starts_at")
    if known is None:
        return None
    row = conn.execute(
        f"SELECT {_DECISION_COLUMNS} FROM decisions WHERE fingerprint = ? AND starts_at = ?",
        (known[0], known[1]),
    ).fetchone()
    return None if row is None else _decision_record(row)


def read_decisions(conn: sqlite3.Connection, verdict: str | None) -> list[DecisionRecord]:
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


def read_firing_decided(
    conn: sqlite3.Connection, verdicts: tuple[str, ...], limit: int
) -> list[tuple[AlertRecord, str, str]]:
    """Firing alerts whose decision has one of ``verdicts``, oldest first, each with the
    decision's verdict and reason."""
    columns = ", ".join(f"a.{c.strip()}" for c in _ALERT_COLUMNS.split(","))
    marks = ", ".join("?" for _ in verdicts)
    rows = conn.execute(
        f"SELECT {columns}, d.verdict, d.reason FROM alerts AS a JOIN decisions AS d"
        " ON d.fingerprint = a.fingerprint AND d.starts_at = a.starts_at"
        f" WHERE a.status = 'firing' AND d.verdict IN ({marks})"
        " ORDER BY a.received_at, a.starts_at, a.fingerprint LIMIT ?",
        (*verdicts, limit),
    ).fetchall()
    return [(_alert_record(r[:-2]), r[-2], r[-1]) for r in rows]
