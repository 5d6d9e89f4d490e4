"""The journal's file: connected (created, in WAL mode, checked and migrated) or opened read
only, its identity (device and inode) to tell when it was replaced, and a corrupt one refused or
set aside (exporter.controller.journal.salvage)."""

from __future__ import annotations

import functools
import os
import sqlite3
import urllib.parse

from exporter.controller.journal.errors import JournalCorrupt, JournalError, guarded
from exporter.controller.journal.records import SetAside
from exporter.controller.journal.salvage import move_aside, salvage
from exporter.controller.journal.schema import SCHEMA_VERSION, migrate


def identity(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return (st.st_dev, st.st_ino)


def open_file(
    path: str, busy_timeout: float, set_aside_corrupt: bool
) -> tuple[sqlite3.Connection, tuple[int, int] | None, SetAside | None]:
    """The connection, the file's identity, and the corrupt journal moved aside (if any)."""
    try:
        conn = guarded(functools.partial(connect, path, busy_timeout))()
    except JournalCorrupt as exc:
        if not set_aside_corrupt or path == ":memory:":
            raise JournalCorrupt(
                f"{exc}: the journal {path} is damaged; move it aside (or delete it) and start "
                "the controller again"
            ) from exc
        try:
            moved_to = move_aside(path)
        except OSError as move:
            raise JournalCorrupt(
                f"{exc}; it cannot be moved aside ({move.strerror}): move {path} aside (or "
                "delete it) and start the controller again"
            ) from exc
        conn = guarded(functools.partial(connect, path, busy_timeout))()
        alerts, decisions, deliveries = salvage(moved_to, conn)
        set_aside = SetAside(path, moved_to, str(exc), alerts, decisions, deliveries)
        return conn, identity(path), set_aside
    return conn, None if path == ":memory:" else identity(path), None


def connect(path: str, busy_timeout: float) -> sqlite3.Connection:
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
        migrate(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def connect_read_only(path: str, busy_timeout: float) -> sqlite3.Connection:
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
