"""The webhook when its journal fails (docs/webhook.md, "When the journal fails"): deleted or
replaced while running, corrupt at start, a filesystem frozen, the disk full, the lock held by
another process. Each gives the documented answer (503, /readyz not ready with the reason,
nodesync_journal_writable 0, one WARNING line), never a 2xx for what was not recorded, and
every acknowledged alert is still there afterwards; the controller recovers by itself once
writes commit again (except a journal replaced: until the file is back, or a restart).

Waits poll for the exact condition with a deadline; the tiny filesystems are mounted by the
tests themselves (root; skipped elsewhere, saying why) and unmounted after."""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from exporter.controller.settings import ControllerSettings, WebhookSettings
from exporter.model.alerts import Alert
from tests.controller.alert_builders import alert, body, fingerprints
from tests.controller.conftest import AiohttpClient, Client, scrape
from tests.controller.webhook_support import hook_settings, journal, post, start_hook
from tests.metrics.exposition import labels, series
from tests.support.filesystems import Freezable, fill, freezable_ext4, small_tmpfs
from tests.support.wait import until_async

HEALTH_LOGGER = "exporter.controller.journal_health"


async def metric(client: Client, name: str, **lbls: str) -> float | None:
    return series(await scrape(client), name).get(labels(**lbls))


async def readyz(client: Client) -> tuple[int, str]:
    response = await client.get("/readyz")
    return response.status, (await response.json())["status"]


async def until_ready(client: Client, within: float = 15.0) -> None:
    await until_async(
        lambda: readyz(client),
        accept=lambda answer: answer[0] == 200,
        timeout=within,
        what="/readyz to answer 200",
    )


async def until_not_ready(client: Client, *reasons: str, within: float = 15.0) -> str:
    """Poll /readyz until it fails for one of ``reasons``; its message."""
    _, status = await until_async(
        lambda: readyz(client),
        accept=lambda answer: answer[0] == 503 and any(f"({r})" in answer[1] for r in reasons),
        timeout=within,
        what=f"/readyz to fail with one of {reasons}",
    )
    return status


def on_disk(path: Path) -> set[str]:
    """The fingerprints in the journal file at ``path``, read by another connection."""
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        found = (
            {r[0] for r in conn.execute("SELECT fingerprint FROM alerts")}
            if "alerts" in tables
            else set()
        )
    conn.close()
    return found


def delete(path: Path) -> None:
    path.unlink()


def move(path: Path, to: Path) -> None:
    path.rename(to)


def write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def read(path: Path) -> bytes:
    return path.read_bytes()


def damage_a_page_of_alerts(path: Path) -> None:
    """Overwrite one leaf page of the alerts table with random bytes."""
    with sqlite3.connect(path) as conn:
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        [leaf] = conn.execute(
            "SELECT pageno FROM dbstat WHERE name = 'alerts' AND pagetype = 'leaf'"
            " ORDER BY pageno LIMIT 1 OFFSET 2"
        ).fetchone()
    conn.close()
    with open(path, "r+b") as f:
        f.seek((leaf - 1) * size)
        f.write(os.urandom(size))


def health_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == HEALTH_LOGGER and r.levelno == logging.WARNING]


COMMIT_TIMEOUT = 1.0


@pytest.fixture
def webhook(tmp_path: Path) -> WebhookSettings:
    return hook_settings(tmp_path, journal_commit_timeout=COMMIT_TIMEOUT)


@pytest.fixture
async def hook(
    aiohttp_client: AiohttpClient, settings: ControllerSettings, webhook: WebhookSettings
) -> Client:
    client = await start_hook(aiohttp_client, settings, webhook)
    await until_ready(client)
    return client


async def acknowledged(client: Client, *alerts: Alert) -> None:
    response = await post(client, body(*alerts))
    assert response.status == 200, await response.text()


async def refused(client: Client, *alerts: Alert) -> str:
    """Post; it must be a 503; its error."""
    response = await post(client, body(*alerts))
    assert response.status == 503, await response.text()
    error: str = (await response.json())["error"]
    return error


# ---------------------------------------------------------------- deleted, replaced


async def test_a_journal_deleted_while_running_stops_acknowledging(
    hook: Client, webhook: WebhookSettings, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = alert("aaaa"), alert("bbbb")
    await acknowledged(hook, a)
    delete(Path(webhook.journal_path))  # rm journal.db while the controller runs
    # noticed without a delivery: the checks compare the file with the open one
    status = await until_not_ready(hook, "replaced")
    assert "was deleted" in status
    assert "restart the controller" in status
    assert await metric(hook, "nodesync_journal_writable") == 0.0
    assert await metric(hook, "nodesync_journal_unavailable_total", reason="replaced") == 1.0
    error = await refused(hook, b)
    assert "was deleted" in error
    # what was acknowledged is still decidable from the open journal; nothing more went in
    assert await journal(hook).alert(a.key) is not None
    assert await journal(hook).alert(b.key) is None
    assert len(health_warnings(caplog)) == 1  # one line, not one per request
    assert await refused(hook, b)
    assert len(health_warnings(caplog)) == 1


async def test_a_journal_replaced_while_running_stops_until_the_file_is_back(
    hook: Client, webhook: WebhookSettings
) -> None:
    path = Path(webhook.journal_path)
    a, b = alert("aaaa"), alert("bbbb")
    await acknowledged(hook, a)
    move(path, path.with_name("elsewhere.db"))
    other = path.with_name("restored.db")  # someone puts another database there
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE something (x)")
    conn.close()
    move(other, path)
    assert "replaced by another file" in await refused(hook, b)
    assert "replaced by another file" in await until_not_ready(hook, "replaced")
    assert await journal(hook).alert(b.key) is None  # not acknowledged into a file nobody reads
    delete(path)
    move(path.with_name("elsewhere.db"), path)  # the original back
    await until_ready(hook)
    assert await metric(hook, "nodesync_journal_writable") == 1.0
    await acknowledged(hook, b)
    assert on_disk(path) == {"aaaa", "bbbb"}


# ---------------------------------------------------------------- corrupt at start


async def test_a_corrupt_journal_at_start_is_moved_aside_and_a_fresh_one_used(
    aiohttp_client: AiohttpClient,
    settings: ControllerSettings,
    webhook: WebhookSettings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = Path(webhook.journal_path)
    write(path, b"\0garbage where the journal was\n" * 500)
    client = await start_hook(aiohttp_client, settings, webhook)
    await until_ready(client)
    [line] = [r for r in caplog.records if r.name == HEALTH_LOGGER and r.levelno >= logging.ERROR]
    assert "moved it aside and started a fresh one" in line.getMessage()
    moved_to = Path(line.__dict__["moved_to"])
    assert moved_to.parent == path.parent
    assert moved_to.name.startswith("journal.db.corrupt-")
    assert read(moved_to).startswith(b"\0garbage")  # kept for a look
    assert await metric(client, "nodesync_journal_set_aside_total") == 1.0
    assert await metric(client, "nodesync_journal_writable") == 1.0
    await acknowledged(client, alert("aaaa"))
    assert on_disk(path) == {"aaaa"}


async def test_the_readable_alerts_of_a_corrupt_journal_are_carried_over(
    aiohttp_client: AiohttpClient, settings: ControllerSettings, webhook: WebhookSettings
) -> None:
    path = Path(webhook.journal_path)
    first = await start_hook(aiohttp_client, settings, webhook)
    sent = [alert(fp) for fp in fingerprints(300)]
    for i in range(0, 300, 100):
        await acknowledged(first, *sent[i : i + 100])
    await first.close()  # the controller stops; the journal is checkpointed
    damage_a_page_of_alerts(path)
    client = await start_hook(aiohttp_client, settings, webhook)
    await until_ready(client)
    assert await metric(client, "nodesync_journal_set_aside_total") == 1.0
    kept = on_disk(path)
    assert 250 < len(kept) < 300  # one page of a few dozen alerts lost, the rest kept
    assert kept <= {a.fingerprint for a in sent}
    # a lost one comes back with Alertmanager's next notification of its group
    again = await post(client, body(*sent[:100]))
    assert again.status == 200
    assert on_disk(path) >= {a.fingerprint for a in sent[:100]}


# ---------------------------------------------------------------- lock


LOCK_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("held", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
"""


@pytest.fixture
async def lock_holder(
    hook: Client, webhook: WebhookSettings
) -> AsyncIterator[asyncio.subprocess.Process]:
    """Another process holding the journal's write lock until its stdin gets a line; the
    journal acknowledged one alert, ``aaaa``, before."""
    await acknowledged(hook, alert("aaaa"))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", LOCK_HOLDER, webhook.journal_path,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        assert await asyncio.wait_for(proc.stdout.readline(), 20) == b"held\n"
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


async def release(proc: asyncio.subprocess.Process) -> None:
    assert proc.stdin is not None
    proc.stdin.write(b"\n")
    await proc.stdin.drain()
    assert await asyncio.wait_for(proc.wait(), 20) == 0


async def test_a_lock_another_process_holds_is_a_503_within_the_commit_timeout(
    hook: Client, webhook: WebhookSettings, lock_holder: asyncio.subprocess.Process
) -> None:
    b, c = alert("bbbb"), alert("cccc")

    async def timed(x: Alert) -> tuple[int, float]:
        started = time.monotonic()
        response = await post(hook, body(x))
        return response.status, time.monotonic() - started

    # Two at once (an HA pair): each answered within the timeout, not one after the other
    answers = await asyncio.gather(timed(b), timed(c))
    assert [code for code, _ in answers] == [503, 503]
    for _, seconds in answers:
        assert seconds < COMMIT_TIMEOUT + 0.75, answers
    assert min(s for _, s in answers) >= 0.8 * COMMIT_TIMEOUT, answers  # it waited for the lock
    # locked; or, on a busy machine, a probe that met its deadline a moment before SQLite gave
    # up waiting for the lock
    await until_not_ready(hook, "locked", "timeout")
    assert await metric(hook, "nodesync_journal_writable") == 0.0
    # one outage, counted by the reason it began with (the lock; or the deadline of the
    # second delivery, queued behind the first)
    began = [
        await metric(hook, "nodesync_journal_unavailable_total", reason=r)
        for r in ("locked", "timeout")
    ]
    assert sorted(began) == [0.0, 1.0]
    await release(lock_holder)
    await until_ready(hook)  # the checks' probe committed
    await acknowledged(hook, b, c)  # Alertmanager's retry
    assert on_disk(Path(webhook.journal_path)) == {"aaaa", "bbbb", "cccc"}


# ---------------------------------------------------------------- full


async def test_a_full_disk_is_a_503_and_loses_nothing_acknowledged(
    aiohttp_client: AiohttpClient,
    settings: ControllerSettings,
    tmp_path: Path,
) -> None:
    with small_tmpfs(tmp_path / "small", size_kib=1024) as small:
        webhook = hook_settings(tmp_path, journal_path=str(small / "journal.db"))
        hook = await start_hook(aiohttp_client, settings, webhook)
        try:
            await until_ready(hook)
            sent = [alert(fp) for fp in fingerprints(40)]
            await acknowledged(hook, *sent[:20])
            filler = fill(small)
            error = await refused(hook, *sent[20:])
            assert "full" in error
            assert "(full)" in await until_not_ready(hook, "full")
            assert await metric(hook, "nodesync_journal_unavailable_total", reason="full") == 1.0
            # what was acknowledged is there, read by another connection
            assert on_disk(small / "journal.db") == {a.fingerprint for a in sent[:20]}
            filler.unlink()  # space again
            await until_ready(hook)
            await acknowledged(hook, *sent[20:])  # the retry
            assert on_disk(small / "journal.db") == {a.fingerprint for a in sent}
        finally:
            await hook.close()  # the journal closed before the filesystem goes


# ---------------------------------------------------------------- frozen


@pytest.fixture
def freezable(tmp_path: Path) -> Iterator[Freezable]:
    with freezable_ext4(tmp_path / "ext4.img", tmp_path / "ext4") as fs:
        yield fs


async def test_a_frozen_filesystem_is_a_503_within_the_commit_timeout(
    aiohttp_client: AiohttpClient,
    settings: ControllerSettings,
    tmp_path: Path,
    freezable: Freezable,
) -> None:
    timeout = 1.0
    webhook = hook_settings(
        tmp_path,
        journal_path=str(freezable.mountpoint / "journal.db"),
        journal_commit_timeout=timeout,
    )
    hook = await start_hook(aiohttp_client, settings, webhook)
    try:
        await until_ready(hook)
        a, b, c = alert("aaaa"), alert("bbbb"), alert("cccc")
        await acknowledged(hook, a)
        with freezable.frozen():
            started = time.monotonic()
            error = await refused(hook, b)
            waited = time.monotonic() - started
            assert timeout <= waited < timeout + 0.75
            assert "did not commit within" in error
            assert "(timeout)" in await until_not_ready(hook, "timeout")
            # the journal's thread is stuck in that write: the next is refused at once
            started = time.monotonic()
            assert "has not finished" in await refused(hook, c)
            assert time.monotonic() - started < timeout
            assert await metric(hook, "nodesync_journal_writable") == 0.0
        await until_ready(hook)  # thawed: the stuck write ended, the probe committed
        for x in (b, c):  # Alertmanager's retries (b committed late: a duplicate)
            response = await post(hook, body(x))
            assert response.status == 200
            answer = await response.json()
            assert answer["new"] + answer["duplicates"] == 1
        assert on_disk(freezable.mountpoint / "journal.db") == {"aaaa", "bbbb", "cccc"}
        assert await metric(hook, "nodesync_journal_unavailable_total", reason="timeout") == 1.0
    finally:
        await hook.close()


async def test_a_filesystem_frozen_with_no_delivery_in_flight_is_noticed(
    aiohttp_client: AiohttpClient,
    settings: ControllerSettings,
    tmp_path: Path,
    freezable: Freezable,
) -> None:
    webhook = hook_settings(
        tmp_path,
        journal_path=str(freezable.mountpoint / "journal.db"),
        journal_commit_timeout=0.5,
    )
    hook = await start_hook(aiohttp_client, settings, webhook)
    try:
        await until_ready(hook)
        with freezable.frozen():
            # the checks write every ten seconds; that write gets stuck
            await until_not_ready(hook, "timeout", within=30.0)
        await until_ready(hook, within=30.0)
        await acknowledged(hook, alert("aaaa"))
    finally:
        await hook.close()
