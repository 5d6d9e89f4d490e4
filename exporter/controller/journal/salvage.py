"""A corrupt journal set aside: the file (and its ``-wal`` and ``-shm``) renamed, and what SQLite
can still read from it copied into the fresh journal."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from typing import Any, Final

from exporter.controller.journal.schema import transaction


def move_aside(path: str) -> str:
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


def salvage(moved_to: str, conn: sqlite3.Connection) -> tuple[int, int, int]:
    """Copy what can be read from the journal moved aside into the fresh one: alerts,
    decisions (of alerts copied), deliveries. Returns how many of each."""
    try:
        old = sqlite3.connect(f"file:{moved_to}?mode=ro", uri=True)
    except sqlite3.Error:
        return 0, 0, 0
    counts = {table: 0 for table in _SALVAGED_TABLES}
    try:
        with transaction(conn):
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
            conn.execute(  # episodes that had ended are not counted again
                """UPDATE decisions SET outcome = '' WHERE EXISTS (SELECT 1 FROM alerts AS a
                    WHERE a.fingerprint = decisions.fingerprint
                    AND a.starts_at = decisions.starts_at AND a.status = 'resolved')"""
            )
    finally:
        old.close()
    return counts["alerts"], counts["decisions"], counts["deliveries"]
