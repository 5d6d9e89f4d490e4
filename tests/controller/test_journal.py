"""The journal on a real SQLite file: recording deliveries once per alert key, the decision
about each alert, counts kept as writes change them, pruning, failures reported as JournalError,
and durability across a SIGKILL."""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import sqlite3
import sys
import threading
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

import pytest

from exporter.controller.journal import (
    DECISION_VERDICTS,
    LAST_SEEN_RESOLUTION,
    SCHEMA_VERSION,
    DecisionRecord,
    Journal,
    JournalClosed,
    JournalError,
    RecordResult,
)
from exporter.controller.journal.schema import MIGRATIONS
from exporter.model.alerts import episode_start
from tests.controller.alert_builders import alert, payload
from tests.controller.builders import T0
from tests.support.wait import until_async

REPO = Path(__file__).resolve().parents[2]


class Clock:
    def __init__(self) -> None:
        self.now = T0 + 100

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def journal(tmp_path: Path, clock: Clock) -> AsyncIterator[Journal]:
    j = await Journal.open(str(tmp_path / "journal.db"), clock=clock)
    yield j
    await j.close()


def a_decision(
    key: tuple[str, float], verdict: str = "plan", node: str = "worker-1", **kw: object
) -> DecisionRecord:
    fields: dict[str, object] = {
        "alert_key": key,
        "verdict": verdict,
        "reason": "",
        "detail": "",
        "rollback": f"{node}-0a1b2c3d4e" if verdict != "refused" else "",
        "node": node,
        "action": "rollback_node",
        "decided_at": T0 + 100,
        "wave": "2026-11-30T01:02:03Z",
    }
    fields.update(kw)
    return DecisionRecord(**fields)  # type: ignore[arg-type]


async def test_a_new_alert_is_recorded_with_everything_it_carried(journal: Journal) -> None:
    a = alert("aaaa", starts_at=T0 + 0.123456)
    result = await journal.record(payload(a, truncated=4), received_at=T0 + 1)
    assert result == RecordResult(new=1, duplicates=0, resolved=0, truncated=4, new_firing=1)
    record = await journal.alert(a.key)
    assert record is not None
    assert record.key == a.key
    assert record.alert == a
    assert (record.status, record.received_at, record.last_seen_at, record.resolved_at) == (
        "firing",
        T0 + 1,
        T0 + 1,
        None,
    )
    [delivery] = await journal.deliveries()
    assert (delivery.group_key, delivery.receiver, delivery.status) == (
        "{}:{}",
        "nodesync-hook",
        "firing",
    )
    assert (delivery.alerts, delivery.truncated, delivery.new, delivery.duplicates) == (1, 4, 1, 0)
    assert await journal.alert(("aaaa", T0 + 1)) is None  # another episode


async def test_resends_duplicates_and_retries_are_recorded_once(journal: Journal) -> None:
    a, b = alert("aaaa"), alert("bbbb", node="worker-2")
    assert await journal.record(payload(a), received_at=T0 + 1) == RecordResult(1, 0, 0, 0, 1)
    # the next flush carries the whole group again, plus a new alert
    assert await journal.record(payload(a, b), received_at=T0 + 61) == RecordResult(1, 1, 0, 0, 1)
    # the HA peer delivers the same notification
    assert await journal.record(payload(a, b), received_at=T0 + 62) == RecordResult(0, 2, 0, 0, 0)
    record = await journal.alert(a.key)
    assert record is not None
    # last_seen_at moves to a minute: the copy a second later leaves it
    assert (record.received_at, record.last_seen_at) == (T0 + 1, T0 + 61)
    assert len(await journal.deliveries()) == 3
    counts = await journal.counts()
    assert counts.alerts == {"firing": 2, "resolved": 0}
    assert counts.deliveries == 3


async def test_the_same_key_twice_in_one_payload_counts_once(journal: Journal) -> None:
    a = alert("aaaa")
    assert await journal.record(payload(a, a), received_at=T0) == RecordResult(1, 1, 0, 0, 1)


async def test_a_resolved_copy_resolves_the_alert_for_good(journal: Journal) -> None:
    a = alert("aaaa")
    gone = alert("aaaa", status="resolved", ends_at=T0 + 300)
    await journal.record(payload(a), received_at=T0 + 1)
    assert await journal.record(payload(gone), received_at=T0 + 310) == RecordResult(0, 0, 1, 0)
    record = await journal.alert(a.key)
    assert record is not None
    assert (record.status, record.resolved_at, record.ends_at) == ("resolved", T0 + 310, T0 + 300)
    # a late firing copy (the HA peer lagging) does not bring it back; a resolved re-send is a dup
    assert await journal.record(payload(a), received_at=T0 + 311) == RecordResult(0, 1, 0, 0)
    assert await journal.record(payload(gone), received_at=T0 + 312) == RecordResult(0, 1, 0, 0)
    record = await journal.alert(a.key)
    assert record is not None
    # ... and copies within a minute of the resolution leave last_seen_at where it was
    assert (record.status, record.resolved_at, record.last_seen_at) == (
        "resolved",
        T0 + 310,
        T0 + 310,
    )
    # a new episode of the same alert has a new startsAt: a new key
    again = alert("aaaa", starts_at=T0 + 900)
    assert await journal.record(payload(again), received_at=T0 + 901) == RecordResult(1, 0, 0, 0, 1)


async def test_an_alert_first_seen_resolved_is_new_resolved_and_to_decide(
    journal: Journal,
) -> None:
    """It gets a decision like every alert: the intake refuses it, ``resolved``."""
    gone = alert("aaaa", status="resolved", ends_at=T0 + 5)
    assert await journal.record(payload(gone), received_at=T0 + 9) == RecordResult(1, 0, 1, 0, 0)
    assert [r.key for r in await journal.alerts_to_decide()] == [gone.key]
    assert (await journal.counts()).alerts == {"firing": 0, "resolved": 1}
    await journal.save_decision(a_decision(gone.key, "refused", reason="resolved"))
    assert await journal.alerts_to_decide() == []


@pytest.mark.parametrize(
    ("firing", "resolving"),
    [
        (0.1234996, 0.1235),  # under a millisecond apart, rounded to neighbouring milliseconds
        (0.1235, 0.1234996),
        (0.123456789, 0.123),  # Alertmanager's nanoseconds, pushed again with milliseconds
        (0.0009999, 0.0),
        (0.999, 0.9995),  # across a second
    ],
)
async def test_a_resolve_whose_start_differs_below_the_millisecond_resolves_the_original(
    journal: Journal, firing: float, resolving: float
) -> None:
    first = alert("aaaa", starts_at=episode_start(T0 + firing))
    await journal.record(payload(first), received_at=T0 + 1)
    again = alert("aaaa", starts_at=episode_start(T0 + resolving))
    assert await journal.record(payload(again), received_at=T0 + 2) == RecordResult(0, 1, 0, 0)
    gone = alert("aaaa", status="resolved", starts_at=episode_start(T0 + resolving))
    assert await journal.record(payload(gone), received_at=T0 + 3) == RecordResult(0, 0, 1, 0)
    record = await journal.alert(first.key)
    assert record is not None
    assert (record.key, record.status) == (first.key, "resolved")  # the original, resolved
    assert await journal.alert(gone.key) == record  # either writing names the episode
    assert (await journal.counts()).alerts == {"firing": 0, "resolved": 1}
    assert journal.last_counts.alerts == {"firing": 0, "resolved": 1}
    decision = await journal.save_decision(a_decision(gone.key, "refused", reason="resolved"))
    assert decision.alert_key == first.key  # stored under the episode's key
    assert await journal.decision(first.key) == decision
    # a start 2 ms away is another episode
    other = alert("aaaa", starts_at=episode_start(T0 + firing + 0.002))
    assert (await journal.record(payload(other), received_at=T0 + 4)).new == 1


async def test_alerts_to_decide_are_the_undecided_oldest_first(journal: Journal) -> None:
    old, mid, young = alert("0003"), alert("0002"), alert("0001")
    await journal.record(payload(old), received_at=T0 + 1)
    await journal.record(payload(young, mid), received_at=T0 + 5)
    await journal.record(payload(alert("0004", status="resolved")), received_at=T0 + 6)
    todo = await journal.alerts_to_decide()
    # same received_at: ordered by startsAt, then fingerprint
    assert [r.fingerprint for r in todo] == ["0003", "0001", "0002", "0004"]
    assert [r.fingerprint for r in await journal.alerts_to_decide(limit=2)] == ["0003", "0001"]
    await journal.save_decision(a_decision(old.key))
    await journal.save_decision(a_decision(mid.key, "refused", reason="blast_radius_absolute"))
    assert [r.fingerprint for r in await journal.alerts_to_decide()] == ["0001", "0004"]
    await journal.save_decision(a_decision(("0004", T0), "refused", reason="resolved"))
    # resolved before it was decided: still to decide (it is refused, resolved)
    await journal.record(payload(alert("0001", status="resolved")), received_at=T0 + 9)
    assert [(r.fingerprint, r.status) for r in await journal.alerts_to_decide()] == [
        ("0001", "resolved")
    ]


async def test_a_decision_is_stored_once(journal: Journal) -> None:
    a = alert("aaaa")
    await journal.record(payload(a), received_at=T0)
    first = a_decision(a.key)
    assert await journal.save_decision(first) == first
    other = a_decision(a.key, "refused", reason="protected", detail="worker-1 is protected")
    assert await journal.save_decision(other) == first  # the first decision stands
    assert await journal.decision(a.key) == first
    assert await journal.decisions() == [first]
    assert await journal.decisions("refused") == []
    assert await journal.decision(("bbbb", T0)) is None
    assert journal.last_counts.decisions["plan"] == 1


async def test_a_decision_needs_its_alert_and_a_known_verdict(journal: Journal) -> None:
    a = alert("aaaa")
    with pytest.raises(KeyError, match="no alert"):
        await journal.save_decision(a_decision(a.key))
    await journal.record(payload(a), received_at=T0)
    with pytest.raises(ValueError, match="unknown verdict"):
        await journal.save_decision(a_decision(a.key, "maybe"))
    assert await journal.decisions() == []


async def test_counts_follow_every_write_and_match_a_recount(journal: Journal) -> None:
    keys = []
    for fp in ("0001", "0002", "0003"):
        a = alert(fp)
        keys.append(a.key)
        await journal.record(payload(a), received_at=T0)
    await journal.record(payload(alert("0004", status="resolved")), received_at=T0)
    await journal.record(payload(alert("0003", status="resolved")), received_at=T0 + 1)
    await journal.save_decision(a_decision(keys[0]))
    await journal.save_decision(a_decision(keys[1], "join"))
    await journal.save_decision(a_decision(keys[2], "refused", reason="protected"))
    counts = await journal.counts()
    assert counts == journal.last_counts  # kept as the writes changed them: the same
    assert counts.alerts == {"firing": 2, "resolved": 2}
    assert counts.decisions == {
        v: {"plan": 1, "join": 1, "refused": 1}.get(v, 0) for v in DECISION_VERDICTS
    }
    assert counts.deliveries == 5


async def test_prune_forgets_alerts_last_seen_before_the_retention(journal: Journal) -> None:
    decided, undecided, recent = alert("0001"), alert("0002"), alert("0004")
    await journal.record(payload(decided, undecided), received_at=T0)
    await journal.record(payload(recent), received_at=T0 + 1000)
    await journal.save_decision(a_decision(decided.key))
    assert await journal.prune(T0 + 500) == 2
    assert await journal.alert(decided.key) is None
    assert await journal.decision(decided.key) is None  # with their decisions
    assert await journal.alert(undecided.key) is None
    assert await journal.alert(recent.key) is not None
    assert [d.received_at for d in await journal.deliveries()] == [T0 + 1000]
    assert journal.last_counts.decisions["plan"] == 0
    assert journal.last_counts.alerts == {"firing": 1, "resolved": 0}
    assert journal.last_counts == await journal.counts()


async def test_a_large_prune_goes_in_batches_and_keeps_the_counts(journal: Journal) -> None:
    old = [alert(f"{i:04x}", status="resolved" if i % 3 == 0 else "firing") for i in range(1, 26)]
    await journal.record(payload(*old), received_at=T0)
    await journal.record(payload(alert("ffff")), received_at=T0 + 1000)
    for a in old[:10]:
        await journal.save_decision(a_decision(a.key, "refused", reason="no_action"))
    assert await journal.prune(T0 + 500, batch=4) == 25
    assert journal.last_counts == await journal.counts()
    assert journal.last_counts.alerts == {"firing": 1, "resolved": 0}
    assert journal.last_counts.deliveries == 1
    assert [r.fingerprint for r in await journal.alerts_to_decide()] == ["ffff"]


async def test_the_journal_survives_a_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "state" / "journal.db")  # the directory is created
    first = await Journal.open(path)
    a = alert("aaaa")
    await first.record(payload(a), received_at=T0)
    decision = await first.save_decision(a_decision(a.key))
    await first.close()
    second = await Journal.open(path)
    try:
        assert second.last_counts.alerts == {"firing": 1, "resolved": 0}
        assert second.last_counts.decisions["plan"] == 1
        assert await second.record(payload(a), received_at=T0 + 60) == RecordResult(0, 1, 0, 0)
        assert await second.decision(a.key) == decision
    finally:
        await second.close()


async def test_a_version_1_journal_is_migrated_its_plans_becoming_decisions(
    tmp_path: Path,
) -> None:
    """Version 1 kept plans and steps; version 2 keeps decisions (the rollbacks are objects in
    the API server). The alerts survive, each plan becomes its alert's decision (so the alert is
    not decided again), the steps go (docs/upgrade.md); a firing alert without a plan still
    waits (version 3 finds it through its own index), a resolved one does not."""
    path = tmp_path / "journal.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO schema_version VALUES (1)")
        for statement in MIGRATIONS[0]:
            conn.execute(statement)
        for fingerprint in ("aaaa", "bbbb", "cccc", "dddd"):
            conn.execute(
                "INSERT INTO alerts VALUES (?, ?, 'firing', '{}', '{}', NULL, '', 1, ?, ?, NULL)",
                (fingerprint, T0, T0, T0),
            )
        # resolved without a plan before the upgrade: no refusal is made up for it later
        conn.execute(
            "INSERT INTO alerts VALUES ('eeee', ?, 'resolved', '{}', '{}', NULL, '', 1, ?, ?, ?)",
            (T0, T0, T0, T0),
        )
        plan = "INSERT INTO plans VALUES (NULL, ?, ?, ?, ?, ?, 'done', '', ?, ?, ?, ?, ?)"
        conn.execute(plan, ("aaaa", T0, "rollback_node", "n1", "w1", 0, None, None, T0 + 1, T0))
        conn.execute(plan, ("bbbb", T0, "none", "n2", "", 0, "no_action", "no label", T0 + 2, T0))
        conn.execute(plan, ("cccc", T0, "cordon", "n3", "", 1, None, None, T0 + 3, T0))
        conn.execute(
            "INSERT INTO steps VALUES (1, 0, 'cordon', 'n1', '', '', '', 'done', '', 1, ?)", (T0,)
        )
    journal = await Journal.open(str(path))
    try:
        assert SCHEMA_VERSION == 4
        [todo] = await journal.alerts_to_decide()
        assert todo.key == ("dddd", T0)
        decided = {
            (d.alert_key[0], d.verdict, d.reason, d.node, d.action, d.wave)
            for d in await journal.decisions()
        }
        assert decided == {
            ("aaaa", "plan", "", "n1", "rollback_node", "w1"),
            ("bbbb", "refused", "no_action", "n2", "none", ""),
            ("cccc", "dry_run", "plan", "n3", "cordon", ""),
        }
        assert journal.last_counts.decisions["plan"] == 1
        with sqlite3.connect(path) as conn:
            tables = {
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
        assert {"plans", "steps"}.isdisjoint(tables)
    finally:
        await journal.close()


async def test_an_episode_s_outcome_is_written_once_and_old_ends_are_not_counted(
    tmp_path: Path,
) -> None:
    """Version 4 keeps each decision's outcome: an episode that had resolved before the upgrade
    has ended uncounted; one that resolves after it is found once, and its outcome written
    once."""
    path = tmp_path / "journal.db"
    journal = await Journal.open(str(path))
    old, later = alert("aaaa"), alert("bbbb")
    await journal.record(payload(old, later), received_at=T0 + 1)
    for a in (old, later):
        await journal.save_decision(a_decision(a.key))
    await journal.record(payload(dataclasses.replace(old, status="resolved")), received_at=T0 + 2)
    await journal.close()
    with sqlite3.connect(path) as conn:  # as version 3 left it
        conn.execute("DROP INDEX decisions_open")
        conn.execute("ALTER TABLE decisions DROP COLUMN outcome")
        conn.execute("UPDATE schema_version SET version = 3")
    journal = await Journal.open(str(path))
    try:
        assert await journal.ended_episodes() == []
        await journal.record(
            payload(dataclasses.replace(later, status="resolved")), received_at=T0 + 3
        )
        [(record, decision)] = await journal.ended_episodes()
        assert (record.key, decision.alert_key) == (later.key, later.key)
        assert await journal.write_outcome(later.key, "remediated")
        assert not await journal.write_outcome(later.key, "remediated")  # counted once
        assert await journal.ended_episodes() == []
    finally:
        await journal.close()


async def test_the_outcomes_written_are_read_back_per_decision(tmp_path: Path) -> None:
    """Only counted outcomes: an episode still going on (NULL) or ended uncounted ('') is not
    listed; a reader beside the writer sees them."""
    path = str(tmp_path / "journal.db")
    journal = await Journal.open(path)
    counted, uncounted, going_on = alert("aaaa"), alert("bbbb"), alert("cccc")
    await journal.record(payload(counted, uncounted, going_on), received_at=T0 + 1)
    for a in (counted, uncounted, going_on):
        await journal.save_decision(a_decision(a.key))
    assert await journal.write_outcome(counted.key, "dry_run_outlasted")
    assert await journal.write_outcome(uncounted.key, "")
    reader = await Journal.open_read_only(path)
    try:
        [(decision, outcome)] = await reader.outcomes()
        assert (decision.alert_key, outcome) == (counted.key, "dry_run_outlasted")
    finally:
        await reader.close()
        await journal.close()


async def test_a_closed_journal_refuses_work(tmp_path: Path) -> None:
    journal = await Journal.open(str(tmp_path / "journal.db"))
    await journal.close()
    await journal.close()  # twice is fine
    assert journal.closed
    with pytest.raises(JournalClosed):
        await journal.record(payload(), received_at=T0)
    with pytest.raises(JournalClosed):
        await journal.counts()


async def test_a_newer_schema_a_foreign_file_or_a_bad_path_is_refused(tmp_path: Path) -> None:
    newer = tmp_path / "newer.db"
    with sqlite3.connect(newer) as conn:
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION + 1,))
    conn.close()
    with pytest.raises(JournalError, match="newer"):
        await Journal.open(str(newer))
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    with pytest.raises(JournalError, match="File exists"):
        await Journal.open(str(blocked / "journal.db"))
    foreign = tmp_path / "foreign.db"
    foreign.write_bytes(b"this is not a database" * 100)
    with pytest.raises(JournalError, match="not a database"):
        await Journal.open(str(foreign))


async def test_a_locked_journal_fails_the_write_and_keeps_nothing(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    journal = await Journal.open(str(path), busy_timeout=0.05)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another writer holds the lock
        with pytest.raises(JournalError, match="locked"):
            await journal.record(payload(), received_at=T0)
        other.execute("ROLLBACK")
        assert (await journal.counts()).deliveries == 0
        assert await journal.record(payload(), received_at=T0) == RecordResult(1, 0, 0, 0, 1)
    finally:
        other.close()
        await journal.close()


def _transactions(statements: list[str]) -> list[tuple[str, str]]:
    """Each committed transaction's safety level (the PRAGMA before its BEGIN) and its SQL."""
    found: list[tuple[str, str]] = []
    level, current = "", None
    for statement in statements:
        if statement.startswith("PRAGMA synchronous="):
            level = statement.removeprefix("PRAGMA synchronous=")
        elif statement == "BEGIN IMMEDIATE":
            current = []
        elif statement == "COMMIT" and current is not None:
            found.append((level, " ".join(current)))
            current = None
        elif current is not None:
            current.append(statement)
    return found


async def test_only_a_delivery_with_nothing_new_commits_without_waiting_for_the_disk(
    journal: Journal,
) -> None:
    """New alerts, resolutions and decisions commit with the WAL fsynced (FULL); a re-send,
    whose alerts are on disk already, writes its row without (NORMAL); the next write after it
    waits for the disk again."""
    statements: list[str] = []
    await journal._run(lambda conn: conn.set_trace_callback(statements.append))
    a, b = alert("aaaa"), alert("bbbb")
    await journal.record(payload(a), received_at=T0)
    await journal.record(payload(a), received_at=T0 + 1)  # a re-send
    await journal.record(payload(a, b), received_at=T0 + 2)  # one of them new
    await journal.record(payload(a, b), received_at=T0 + LAST_SEEN_RESOLUTION + 3)  # last seen
    await journal.save_decision(a_decision(a.key))
    await journal.record(payload(alert("aaaa", status="resolved")), received_at=T0 + 70)
    await journal._run(lambda conn: conn.set_trace_callback(None))

    def kind(sql: str) -> str:
        if "INSERT INTO alerts" in sql or "SET status" in sql or "INTO decisions" in sql:
            return "records"
        if "SELECT" in sql and "INSERT" not in sql:
            return "reads"  # a delivery is judged first, under the write lock
        return "re-send" if "last_seen_at = max" not in sql else "re-send, last seen"

    assert [(level, kind(sql)) for level, sql in _transactions(statements)] == [
        ("FULL", "records"),
        ("FULL", "reads"),
        ("NORMAL", "re-send"),
        ("FULL", "records"),
        ("FULL", "reads"),
        ("NORMAL", "re-send, last seen"),
        ("FULL", "records"),  # the decision
        ("FULL", "records"),  # the resolution
    ]
    assert [(d.new, d.duplicates, d.resolved) for d in await journal.deliveries()] == [
        (0, 0, 1),
        (0, 2, 0),
        (1, 1, 0),
        (0, 1, 0),
        (1, 0, 0),
    ]
    record = await journal.alert(a.key)
    assert record is not None
    assert record.last_seen_at == T0 + 70


WRITER = """
import asyncio, sys
from exporter.controller.journal import Journal
from exporter.model.alerts import Alert, WebhookPayload

async def main(path: str, start: int) -> None:
    journal = await Journal.open(path)
    i = start
    while True:
        alerts = tuple(
            Alert(f"{i:08x}{j:08x}", "firing", {"i": str(i)}, starts_at=1000.0 + i)
            for j in range(3)
        )
        group = WebhookPayload("4", f"g{i}", "firing", "hook", alerts, truncated_alerts=i)
        await journal.record(group, received_at=float(i))
        print(f"g{i}", flush=True)
        # the same alerts again (a re-send: nothing new), a commit that does not wait for the disk
        again = WebhookPayload("4", f"r{i}", "firing", "hook", alerts, truncated_alerts=i)
        await journal.record(again, received_at=i + 0.5)
        print(f"r{i}", flush=True)
        i += 1

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


async def _write_until_killed(path: Path, start: int, commits: int) -> list[str]:
    """Run a writer process; SIGKILL it once ``commits`` records returned; the group keys whose
    record() returned (as far as the writer could report before it died): ``g<i>`` brought three
    new alerts, ``r<i>`` the same three again."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WRITER, str(path), str(start),
        cwd=REPO, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    done: list[str] = []
    try:
        while len(done) < commits:
            line = await asyncio.wait_for(proc.stdout.readline(), timeout=20)
            assert line, "the writer exited early"
            done.append(line.decode().strip())
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    assert proc.returncode == -signal.SIGKILL
    done += [line.decode() for line in (await proc.stdout.read()).split()]
    return done


async def test_every_returned_record_survives_sigkill_and_none_is_half_written(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.db"
    returned: list[str] = []
    ends: set[int] = set()  # the last group of each writer
    start = 0
    for _ in range(3):  # kill, reopen and continue, three times
        returned += await _write_until_killed(path, start, commits=60)
        journal = await Journal.open(str(path))
        try:
            deliveries = await journal.deliveries(limit=100_000)
            # every record() that returned is there, re-sends too; at most the one in flight
            # is extra
            assert set(returned) <= {d.group_key for d in deliveries}
            new = sorted(int(d.group_key[1:]) for d in deliveries if d.group_key[0] == "g")
            again = sorted(int(d.group_key[1:]) for d in deliveries if d.group_key[0] == "r")
            assert new == list(range(len(new)))
            # a re-send follows its group; only a kill can come between the two
            ends.add(len(new) - 1)
            assert set(again) <= set(new)
            assert set(new) - set(again) <= ends
            # nothing half-written: each delivery with all three of its alerts, and no others
            assert all((d.alerts, d.new, d.duplicates, d.truncated)
                       == ((3, 3, 0) if d.group_key[0] == "g" else (3, 0, 3))
                       + (int(d.group_key[1:]),)
                       for d in deliveries)  # fmt: skip
            counts = await journal.counts()
            assert counts.alerts["firing"] == 3 * len(new)
            for key in returned:
                i = int(key[1:])
                assert await journal.alert((f"{i:08x}{2:08x}", 1000.0 + i)) is not None
            start = len(new)
        finally:
            await journal.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()


async def test_a_read_only_journal_reads_beside_the_writer_and_never_writes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.db"
    writer = await Journal.open(str(path), busy_timeout=0.05)
    reader = await Journal.open_read_only(str(path))
    try:
        a, b = alert("aaaa"), alert("bbbb")
        await writer.record(payload(a, b), received_at=T0)
        decision = await writer.save_decision(a_decision(a.key))
        # The reader sees what the writer committed, and holds no lock the writer waits for
        # (the writer's busy timeout is 50 ms).
        assert await reader.decisions() == [decision]
        assert (await reader.counts()).alerts == {"firing": 2, "resolved": 0}
        await writer.save_decision(a_decision(b.key, "refused", reason="no_action"))
        assert [d.verdict for d in await reader.decisions()] == ["plan", "refused"]
        await writer.record(payload(alert("aaaa", status="resolved")), received_at=T0 + 1)
        record = await reader.alert(a.key)
        assert record is not None
        assert record.status == "resolved"
        with pytest.raises(JournalError, match="readonly"):
            await reader.record(payload(alert("cccc")), received_at=T0 + 1)
        with pytest.raises(JournalError, match="readonly"):
            await reader.save_decision(a_decision(alert("cccc").key))
    finally:
        await writer.close()
    try:  # ... and after the writer closed (its WAL checkpointed and removed)
        assert [d.verdict for d in await reader.decisions()] == ["plan", "refused"]
    finally:
        await reader.close()
    again = await Journal.open_read_only(str(path))
    try:
        assert await again.decision(a.key) == decision
        assert again.last_counts.decisions["plan"] == 1
    finally:
        await again.close()


async def test_a_read_only_open_creates_nothing_and_refuses_other_schemas(tmp_path: Path) -> None:
    missing = tmp_path / "state" / "journal.db"
    with pytest.raises(JournalError, match="unable to open"):
        await Journal.open_read_only(str(missing))
    assert not missing.parent.exists()
    for version in (SCHEMA_VERSION - 1, SCHEMA_VERSION + 1):
        other = tmp_path / f"v{version}.db"
        with sqlite3.connect(other) as conn:
            conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
            conn.execute("INSERT INTO schema_version VALUES (?)", (version,))
        conn.close()
        with pytest.raises(JournalError, match=f"schema version {version} .* not this"):
            await Journal.open_read_only(str(other))
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    with pytest.raises(JournalError, match="no such table"):
        await Journal.open_read_only(str(empty))
    assert empty.read_bytes() == b""


async def _last_seen(journal: Journal, key: tuple[str, float]) -> float:
    record = await journal.alert(key)
    assert record is not None
    return record.last_seen_at


async def test_last_seen_moves_once_a_copy_is_a_minute_newer(journal: Journal) -> None:
    a, b = alert("aaaa"), alert("bbbb", node="worker-2")
    await journal.record(payload(a, b), received_at=T0)
    for seconds in (1, 30, LAST_SEEN_RESOLUTION - 1):  # re-sends within the minute
        assert await journal.record(payload(a, b), received_at=T0 + seconds) == RecordResult(
            0, 2, 0, 0, 0
        )
    assert await _last_seen(journal, a.key) == T0
    await journal.record(payload(a), received_at=T0 + LAST_SEEN_RESOLUTION)
    assert await _last_seen(journal, a.key) == T0 + LAST_SEEN_RESOLUTION
    assert await _last_seen(journal, b.key) == T0
    # resolving always records when
    resolved = dataclasses.replace(b, status="resolved", ends_at=T0 + 70)
    assert await journal.record(payload(resolved), received_at=T0 + 71) == RecordResult(
        0, 0, 1, 0, 0
    )
    assert await _last_seen(journal, b.key) == T0 + 71


async def test_one_delivery_is_judged_alert_by_alert_in_order(journal: Journal) -> None:
    """A delivery that carries an alert twice, or fires then resolves it, is recorded as if
    its alerts came one by one: the batch keeps the order's meaning."""
    a = alert("aaaa")
    resolved = dataclasses.replace(a, status="resolved", ends_at=T0 + 5)
    again = dataclasses.replace(a, starts_at=a.starts_at + 0.0005)  # the same episode
    result = await journal.record(payload(a, again, resolved, a), received_at=T0 + 10)
    assert result == RecordResult(new=1, duplicates=2, resolved=1, truncated=0, new_firing=1)
    record = await journal.alert(a.key)
    assert record is not None
    assert (record.status, record.resolved_at, record.ends_at) == ("resolved", T0 + 10, T0 + 5)
    counts = await journal.counts()
    assert counts.alerts == {"firing": 0, "resolved": 1}


async def test_a_delivery_overtakes_the_calls_waiting_for_the_thread(journal: Journal) -> None:
    """While the journal's thread is busy, the intake's calls wait their turn one at a time; a
    delivery that arrives after them is recorded before them (the acknowledgement waits for
    the call in the thread, not for a pass's worth of decisions)."""
    gate = threading.Event()
    busy = asyncio.create_task(journal._run(lambda _conn: gate.wait(10)))
    await until_async(  # the thread is in the blocking call
        lambda: journal.busy_for() is not None,
        timeout=10,
        what="the blocking call to start",
        interval=0.005,
    )
    finished: list[str] = []

    async def tracked(name: str, call: Awaitable[object]) -> None:
        await call
        finished.append(name)

    others = [asyncio.create_task(tracked(f"counts-{i}", journal.counts())) for i in range(3)]
    delivery = asyncio.create_task(
        tracked("delivery", journal.record(payload(alert("aaaa")), received_at=T0))
    )
    await asyncio.sleep(0)  # every call has started: the three first
    gate.set()
    await asyncio.gather(busy, delivery, *others)
    assert sorted(finished) == ["counts-0", "counts-1", "counts-2", "delivery"]
    # At most one of the calls that came first is before it (in first-come order: the last).
    assert finished.index("delivery") <= 1, finished


async def test_a_cancelled_caller_is_cancelled_even_as_its_call_returns(journal: Journal) -> None:
    """The executor's loop calls the journal again and again; cancelling it (a lost lead, a
    shutdown) must end it whenever the cancel lands, also in the instant a call returns
    (asyncio.wait_for in Python 3.11 lost such a cancel, and the loop ran on)."""

    async def calling() -> None:
        while True:
            await journal.counts()
            await journal.record(payload(alert("aaaa")), received_at=T0, within=5.0)

    for i in range(60):
        task = asyncio.create_task(calling())
        for _ in range(i % 12):  # land the cancel at every step of a call, in turn
            await asyncio.sleep(0)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=5.0)
        if not done:
            task.cancel()  # a second try, so that the test ends
            await asyncio.wait({task}, timeout=5.0)
        assert done, f"cancel {i} was lost: the caller ran on"
        assert task.cancelled()


async def test_the_firing_decided_alerts_follow_every_change_and_not_re_sends(
    journal: Journal,
) -> None:
    """An executor pass reads them every time; what it reads must change with each decision,
    new alert, resolution, outcome and pruning, and stays the same across a re-send."""

    async def refused() -> list[str]:
        return [r.fingerprint for r, _, _ in await journal.firing_decided(("refused",))]

    a, b = alert("aaaa"), alert("bbbb", node="worker-2")
    await journal.record(payload(a), received_at=T0 + 1)
    assert await refused() == []
    await journal.save_decision(a_decision(a.key, "refused", reason="protected"))
    assert await refused() == ["aaaa"]
    await journal.record(payload(a), received_at=T0 + 2)  # a re-send: nothing changes
    assert await refused() == ["aaaa"]
    await journal.record(payload(a, b), received_at=T0 + 3)
    assert await refused() == ["aaaa"]  # b is not decided yet
    await journal.save_decision(a_decision(b.key, "refused", node="worker-2"))
    assert await refused() == ["aaaa", "bbbb"]
    resolved = dataclasses.replace(a, status="resolved", ends_at=T0 + 4)
    await journal.record(payload(resolved), received_at=T0 + 4)
    assert await refused() == ["bbbb"]
    assert [v for _, v, _ in await journal.firing_decided(("refused", "plan"))] == ["refused"]
    await journal.prune(T0 + 500)
    assert await refused() == []
