"""How a journal operation fails: a :class:`JournalError` with a bounded ``reason`` (for
metrics and readiness), and :func:`guarded`, which turns SQLite's and the filesystem's errors
into one."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Final, TypeVar

T = TypeVar("T")

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


def reason_of(exc: sqlite3.Error) -> str:
    code = getattr(exc, "sqlite_errorcode", None)
    return OTHER if code is None else _SQLITE_REASONS.get(code & 0xFF, OTHER)


def guarded(fn: Callable[[], T]) -> Callable[[], T]:
    def call() -> T:
        try:
            return fn()
        except JournalError:
            raise
        except sqlite3.Error as exc:
            reason = reason_of(exc)
            if reason == CORRUPT:
                raise JournalCorrupt(f"journal: {exc}") from exc
            raise JournalError(f"journal: {exc}", reason) from exc
        except OSError as exc:  # e.g. creating the directory
            raise JournalError(f"journal: {exc}", IO) from exc

    return call
