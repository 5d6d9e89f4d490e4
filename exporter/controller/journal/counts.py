"""What the journal holds, counted: from the tables at open, and what one pruning transaction
removes (so that the counts kept as writes change them follow)."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from exporter.controller.journal.records import EMPTY_COUNTS, JournalCounts
from exporter.controller.journal.schema import transaction

#: Alerts (and deliveries) removed per pruning transaction, so that webhook writes get in
#: between the transactions of a large prune.
PRUNE_BATCH: Final = 500


def count(conn: sqlite3.Connection) -> JournalCounts:
    alerts = dict(EMPTY_COUNTS.alerts)
    alerts.update(conn.execute("SELECT status, count(*) FROM alerts GROUP BY status").fetchall())
    decisions = dict(EMPTY_COUNTS.decisions)
    for verdict, n in conn.execute("SELECT verdict, count(*) FROM decisions GROUP BY verdict"):
        if verdict in decisions:
            decisions[verdict] = n
    (deliveries,) = conn.execute("SELECT count(*) FROM deliveries").fetchone()
    return JournalCounts(alerts=alerts, decisions=decisions, deliveries=deliveries)


@dataclass(frozen=True, slots=True)
class Pruned:
    alerts: Mapping[str, int]  # by status
    decisions: Mapping[str, int]  # by verdict
    deliveries: int
    more: bool  # a batch was full: there may be more to prune


def prune_batch(conn: sqlite3.Connection, before: float, batch: int) -> Pruned:
    """One transaction of pruning: up to ``batch`` alerts last seen before ``before`` (with
    their decisions), up to ``batch`` deliveries received before it; what went, counted."""
    with transaction(conn):
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
    return Pruned(alerts, decisions, deliveries, len(rows) == batch or deliveries == batch)
