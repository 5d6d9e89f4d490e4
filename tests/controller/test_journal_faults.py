"""The journal's fault primitives on a real SQLite file: a write with a deadline that a lock
outlasts, the file deleted or replaced under the open journal, a corrupt journal at open
(refused with what to do, or moved aside with what could be read), and the health that turns
these into readiness."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from pathlib import Path

import pytest

from exporter.controller.journal import (
    Journal,
    JournalCorrupt,
    JournalError,
    JournalReplaced,
    JournalTimeout,
)
from exporter.controller.journal_health import JournalHealth
from tests.controller.alert_builders import alert, fingerprints, payload
from tests.controller.builders import T0
from tests.support.wait import until_async


def exists(path: str) -> bool:
    return os.path.exists(path)


def head(path: str, n: int) -> bytes:
    with open(path, "rb") as f:
        return f.read(n)


async def test_a_write_a_lock_outlasts_fails_at_its_deadline_and_may_commit_later(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.db"
    # SQLite would wait 30 s for the lock: the deadline is what bounds the answer
    journal = await Journal.open(str(path), busy_timeout=30.0)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        started = time.monotonic()
        with pytest.raises(JournalTimeout, match=r"did not commit within 0\.3 s"):
            await journal.record(payload(alert("aaaa")), received_at=T0, within=0.3)
        assert 0.3 <= time.monotonic() - started < 5
        # the thread is still waiting for the lock: the next write waits for its own deadline
        # only while the stuck one is younger than that, then fails at once
        busy = journal.busy_for()
        assert busy is not None
        await asyncio.sleep(max(0.0, 0.3 - busy))
        # At once: the error says the stuck write has not finished, not that this one timed out.
        with pytest.raises(JournalTimeout, match="has not finished"):
            await journal.record(payload(alert("bbbb")), received_at=T0, within=0.3)
        other.execute("ROLLBACK")
    finally:
        other.close()
    await journal.counts()  # waits for the stuck write to end
    assert journal.busy_for() is None
    # the write that timed out committed once the lock was free (a retry is a duplicate)
    assert (await journal.record(payload(alert("aaaa")), received_at=T0 + 1)).duplicates == 1
    assert await journal.alert(alert("bbbb").key) is None  # failed at once: never written
    assert journal.last_counts == await journal.counts()
    await journal.close()


async def test_a_write_that_never_started_is_cancelled(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    journal = await Journal.open(str(path), busy_timeout=1.0)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        first = asyncio.create_task(journal.record(payload(alert("aaaa")), received_at=T0))
        await until_async(
            lambda: journal.busy_for() is not None,
            timeout=10.0,
            what="the first write in the thread",
            interval=0.001,
        )
        # queued behind the first, which waits for the lock: cancelled at its deadline
        with pytest.raises(JournalTimeout, match="could not start"):
            await journal.record(payload(alert("bbbb")), received_at=T0, within=0.2)
        with pytest.raises(JournalError, match="locked"):
            await first
    finally:
        other.close()
    assert await journal.alert(alert("bbbb").key) is None
    assert (await journal.counts()).deliveries == 0
    await journal.close()


async def test_a_deleted_journal_refuses_writes_and_keeps_what_it_holds(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    journal = await Journal.open(str(path))
    try:
        a = alert("aaaa")
        await journal.record(payload(a), received_at=T0)
        path.unlink()
        with pytest.raises(JournalReplaced, match="was deleted"):
            await journal.record(payload(alert("bbbb")), received_at=T0)
        with pytest.raises(JournalReplaced):
            await journal.probe(within=1.0)
        with pytest.raises(JournalReplaced):
            await journal.check(within=1.0)
        assert await journal.alert(a.key) is not None  # still decidable from the open file
        assert await journal.alert(alert("bbbb").key) is None
    finally:
        await journal.close()


async def test_a_replaced_journal_refuses_writes_until_it_is_back(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    journal = await Journal.open(str(path))
    try:
        await journal.record(payload(alert("aaaa")), received_at=T0)
        path.rename(tmp_path / "away.db")
        sqlite3.connect(path).close()  # another file at the path
        with pytest.raises(JournalReplaced, match="replaced by another file"):
            await journal.record(payload(alert("bbbb")), received_at=T0)
        path.unlink()
        (tmp_path / "away.db").rename(path)  # the same file back
        await journal.check(within=1.0)
        assert (await journal.record(payload(alert("bbbb")), received_at=T0)).new == 1
    finally:
        await journal.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM alerts").fetchone() == (2,)
    conn.close()


def _damage(path: Path, pages: list[int]) -> None:
    """Overwrite whole pages of the file."""
    with sqlite3.connect(path) as conn:
        (size,) = conn.execute("PRAGMA page_size").fetchone()
    conn.close()
    with open(path, "r+b") as f:
        for page in pages:
            f.seek((page - 1) * size)
            f.write(os.urandom(size))


def _leaves(path: Path, table: str) -> list[int]:
    """The leaf pages of a table (SQLite's dbstat)."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY pageno",
            (table,),
        ).fetchall()
    conn.close()
    return [r[0] for r in rows]


async def _journal_with(path: Path, n: int) -> list[tuple[str, float]]:
    journal = await Journal.open(str(path))
    alerts = [alert(fp) for fp in fingerprints(n)]
    for i in range(0, n, 50):
        await journal.record(payload(*alerts[i : i + 50]), received_at=T0 + i)
    await journal.close()  # checkpointed: everything in the main file
    return [a.key for a in alerts]


async def test_a_corrupt_journal_is_refused_with_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    await _journal_with(path, 400)
    _damage(path, _leaves(path, "alerts")[1:3])
    with pytest.raises(JournalCorrupt, match=r"move it aside .* and start the controller again"):
        await Journal.open(str(path))
    assert path.exists()  # left alone


async def test_a_corrupt_journal_is_moved_aside_with_what_can_be_read(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    keys = await _journal_with(path, 400)
    _damage(path, _leaves(path, "alerts")[1:3])  # two pages of alerts lost
    journal = await Journal.open(str(path), set_aside_corrupt=True)
    try:
        aside = journal.set_aside
        assert aside is not None
        assert aside.moved_to.startswith(f"{path}.corrupt-")
        assert exists(aside.moved_to)
        assert aside.error
        readable = [k for k in keys if await journal.alert(k) is not None]
        assert len(readable) == aside.alerts
        assert 0 < aside.alerts < 400  # some pages were lost, the rest carried over
        assert journal.last_counts.alerts["firing"] == aside.alerts
        # still to decide: they were firing, undecided
        assert len(await journal.alerts_to_decide()) == aside.alerts
        assert (await journal.record(payload(alert("ffff")), received_at=T0)).new == 1
    finally:
        await journal.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()


async def test_a_file_that_is_not_a_journal_is_moved_aside(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    path.write_bytes(b"not a database, just bytes " * 1000)
    journal = await Journal.open(str(path), set_aside_corrupt=True)
    try:
        aside = journal.set_aside
        assert aside is not None
        assert (aside.alerts, aside.decisions, aside.deliveries) == (0, 0, 0)
        assert "not a database" in aside.error
        assert head(aside.moved_to, 14) == b"not a database"
        assert (await journal.counts()).deliveries == 0
    finally:
        await journal.close()


async def test_health_follows_a_lock_and_recovers_with_a_probe(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    journal = await Journal.open(str(path), busy_timeout=0.2)
    health = JournalHealth(journal, commit_timeout=2.0)  # well past the lock wait
    other = sqlite3.connect(path, isolation_level=None)
    try:
        assert health.not_ready() is None
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(JournalError, match="locked"):
            await health.record(payload(alert("aaaa")), received_at=T0)
        assert health.not_ready() == ("journal not writable (locked): journal: database is locked")
        await health.check_once(write=False)  # still locked: the probe fails too
        assert health.not_ready() is not None
        other.execute("ROLLBACK")
        await health.check_once(write=False)
        assert health.not_ready() is None
        writable = next(f for f in health.families() if f.name == "nodesync_journal_writable")
        assert writable.samples[0].value == 1.0
    finally:
        other.close()
        await journal.close()
