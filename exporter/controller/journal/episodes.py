"""The ends of decided alert episodes: those resolved whose outcome is not written yet, and the
outcome written once (exporter.model.outcomes), and the outcomes written, per decision. A
decision's ``outcome`` is NULL until its end is known, then the outcome, or '' for an end that
is not counted."""

from __future__ import annotations

import sqlite3

from exporter.controller.journal.decisions import _DECISION_COLUMNS, _decision_record
from exporter.controller.journal.ledger import _ALERT_COLUMNS, _alert_record
from exporter.controller.journal.records import AlertKey, AlertRecord, DecisionRecord
from exporter.controller.journal.schema import transaction


def read_ended(conn: sqlite3.Connection, limit: int) -> list[tuple[AlertRecord, DecisionRecord]]:
    """Resolved alerts whose decision has no outcome yet, by decision time (at most ``limit``),
    each with its decision."""
    alert = ", ".join(f"a.{c.strip()}" for c in _ALERT_COLUMNS.split(","))
    decision = ", ".join(f"d.{c.strip()}" for c in _DECISION_COLUMNS.split(","))
    width = _ALERT_COLUMNS.count(",") + 1
    rows = conn.execute(
        f"SELECT {alert}, {decision} FROM decisions AS d INDEXED BY decisions_open"
        " JOIN alerts AS a ON a.fingerprint = d.fingerprint AND a.starts_at = d.starts_at"
        " WHERE d.outcome IS NULL AND a.status = 'resolved'"
        " ORDER BY d.decided_at, d.fingerprint LIMIT ?",
        (limit,),
    ).fetchall()
    return [(_alert_record(r[:width]), _decision_record(r[width:])) for r in rows]


def write_outcome(conn: sqlite3.Connection, key: AlertKey, outcome: str) -> bool:
    """The episode's outcome, written once: False when it had one already (counted before)."""
    with transaction(conn):
        changed: int = conn.execute(
            "UPDATE decisions SET outcome = ? WHERE fingerprint = ? AND starts_at = ?"
            " AND outcome IS NULL",
            (outcome, *key),
        ).rowcount
    return changed == 1


def read_outcomes(conn: sqlite3.Connection) -> list[tuple[DecisionRecord, str]]:
    """The decisions whose episode ended with a counted outcome, each with it, by decision
    time."""
    rows = conn.execute(
        f"SELECT {_DECISION_COLUMNS}, outcome FROM decisions"
        " WHERE outcome IS NOT NULL AND outcome != '' ORDER BY decided_at, rowid"
    ).fetchall()
    return [(_decision_record(r[:-1]), r[-1]) for r in rows]
