"""The journal on a real SQLite file: recording deliveries once per alert key, plans and their
steps, counts, pruning, failures reported as JournalError, and durability across a SIGKILL."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from exporter.controller.journal import (
    SCHEMA_VERSION,
    Journal,
    JournalClosed,
    JournalError,
    RecordResult,
)
from exporter.model.rollback import (
    Action,
    Plan,
    PlanState,
    Refusal,
    Step,
    StepKind,
    StepState,
)
from tests.controller.alert_builders import alert, payload
from tests.controller.builders import T0

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


def a_plan(key: tuple[str, float], node: str = "worker-1") -> Plan:
    return Plan(
        action=Action.ROLLBACK_NODE,
        node=node,
        steps=(
            Step(StepKind.CORDON, node),
            Step(StepKind.EVICT_POD, node, "default", "web-1", "uid-1"),
            Step(StepKind.VERIFY, node),
        ),
        alert_fingerprint=key[0],
        alert_starts_at=key[1],
        wave="2026-11-30T01:02:03Z",
    )


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
    assert (record.received_at, record.last_seen_at) == (T0 + 1, T0 + 62)
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
    assert (record.status, record.resolved_at, record.last_seen_at) == (
        "resolved",
        T0 + 310,
        T0 + 312,
    )
    # a new episode of the same alert has a new startsAt: a new key
    again = alert("aaaa", starts_at=T0 + 900)
    assert await journal.record(payload(again), received_at=T0 + 901) == RecordResult(1, 0, 0, 0, 1)


async def test_an_alert_first_seen_resolved_is_new_and_resolved(journal: Journal) -> None:
    gone = alert("aaaa", status="resolved", ends_at=T0 + 5)
    assert await journal.record(payload(gone), received_at=T0 + 9) == RecordResult(1, 0, 1, 0, 0)
    assert await journal.alerts_to_plan() == []
    assert (await journal.counts()).alerts == {"firing": 0, "resolved": 1}


async def test_alerts_to_plan_are_firing_unplanned_and_oldest_first(journal: Journal) -> None:
    old, mid, young = alert("0003"), alert("0002"), alert("0001")
    await journal.record(payload(old), received_at=T0 + 1)
    await journal.record(payload(young, mid), received_at=T0 + 5)
    await journal.record(payload(alert("0004", status="resolved")), received_at=T0 + 6)
    todo = await journal.alerts_to_plan()
    # same received_at: ordered by startsAt, then fingerprint
    assert [r.fingerprint for r in todo] == ["0003", "0001", "0002"]
    assert [r.fingerprint for r in await journal.alerts_to_plan(limit=2)] == ["0003", "0001"]
    await journal.save_plan(old.key, a_plan(old.key), dry_run=False, state=PlanState.PENDING)
    await journal.save_plan(mid.key, Refusal("budget", "3 of 3 used"), dry_run=False,
                            state=PlanState.REFUSED)  # fmt: skip
    assert [r.fingerprint for r in await journal.alerts_to_plan()] == ["0001"]
    await journal.record(payload(alert("0001", status="resolved")), received_at=T0 + 9)
    assert await journal.alerts_to_plan() == []


async def test_save_plan_stores_the_plan_once(journal: Journal, clock: Clock) -> None:
    a = alert("aaaa")
    await journal.record(payload(a), received_at=T0)
    plan = a_plan(a.key)
    plan_id = await journal.save_plan(a.key, plan, dry_run=True, state=PlanState.DRY_RUN)
    clock.now += 10
    other = a_plan(a.key, node="worker-9")
    assert await journal.save_plan(a.key, other, dry_run=False, state=PlanState.PENDING) == plan_id
    record = await journal.plan(plan_id)
    assert record is not None
    assert record.plan == plan
    assert (record.id, record.alert_key, record.action, record.node, record.wave) == (
        plan_id,
        a.key,
        Action.ROLLBACK_NODE,
        "worker-1",
        plan.wave,
    )
    assert (record.state, record.reason, record.dry_run, record.refusal) == (
        PlanState.DRY_RUN,
        "",
        True,
        None,
    )
    assert record.created_at == record.updated_at == T0 + 100
    assert [(s.index, s.step, s.state, s.detail, s.attempts) for s in record.steps] == [
        (i, step, StepState.PENDING, "", 0) for i, step in enumerate(plan.steps)
    ]
    assert await journal.plans() == [record]
    assert await journal.plan(plan_id + 1) is None


async def test_a_refusal_takes_action_and_node_from_the_alert(journal: Journal) -> None:
    a, odd = alert("aaaa", node="worker-3"), alert("bbbb", action="reboot_everything")
    await journal.record(payload(a, odd), received_at=T0)
    refused = await journal.save_plan(
        a.key, Refusal("control_plane", "worker-3 is a control-plane node"), dry_run=False,
        state=PlanState.REFUSED,
    )  # fmt: skip
    record = await journal.plan(refused)
    assert record is not None
    assert (record.action, record.node, record.state, record.reason, record.steps) == (
        Action.ROLLBACK_NODE,
        "worker-3",
        PlanState.REFUSED,
        "control_plane",
        (),
    )
    assert record.refusal == Refusal("control_plane", "worker-3 is a control-plane node")
    assert record.plan is None
    unknown = await journal.save_plan(
        odd.key, Refusal("unknown_action", "reboot_everything"), dry_run=False,
        state=PlanState.REFUSED,
    )  # fmt: skip
    record = await journal.plan(unknown)
    assert record is not None
    assert record.action is Action.NONE


async def test_save_plan_refuses_unknown_or_mismatched_alerts(journal: Journal) -> None:
    a = alert("aaaa")
    with pytest.raises(KeyError, match="no alert"):
        await journal.save_plan(a.key, a_plan(a.key), dry_run=False, state=PlanState.PENDING)
    await journal.record(payload(a), received_at=T0)
    with pytest.raises(ValueError, match="not"):
        await journal.save_plan(a.key, a_plan(("bbbb", T0)), dry_run=False, state=PlanState.PENDING)
    assert await journal.plans() == []


async def test_plan_and_step_states_are_updated(journal: Journal, clock: Clock) -> None:
    a = alert("aaaa")
    await journal.record(payload(a), received_at=T0)
    plan_id = await journal.save_plan(a.key, a_plan(a.key), dry_run=False, state=PlanState.PENDING)
    clock.now = T0 + 200
    await journal.update_plan(plan_id, PlanState.RUNNING)
    await journal.update_step(plan_id, 1, StepState.PENDING, "429: PDB", attempts=3)
    clock.now = T0 + 300
    await journal.update_step(plan_id, 1, StepState.DONE, "evicted")
    await journal.update_step(plan_id, 0, StepState.SKIPPED, "already cordoned", attempts=1)
    record = await journal.plan(plan_id)
    assert record is not None
    assert record.state is PlanState.RUNNING
    assert record.updated_at == T0 + 300
    assert [(s.state, s.detail, s.attempts, s.updated_at) for s in record.steps] == [
        (StepState.SKIPPED, "already cordoned", 1, T0 + 300),
        (StepState.DONE, "evicted", 3, T0 + 300),  # attempts kept when not given
        (StepState.PENDING, "", 0, T0 + 100),
    ]
    await journal.update_plan(plan_id, PlanState.FAILED, "verify timed out")
    record = await journal.plan(plan_id)
    assert record is not None
    assert (record.state, record.reason) == (PlanState.FAILED, "verify timed out")
    with pytest.raises(KeyError):
        await journal.update_plan(plan_id + 1, PlanState.DONE)
    with pytest.raises(KeyError):
        await journal.update_step(plan_id, 3, StepState.DONE)


async def test_plans_filtered_by_state_and_counted(journal: Journal) -> None:
    keys = []
    for fp in ("0001", "0002", "0003"):
        a = alert(fp)
        keys.append(a.key)
        await journal.record(payload(a), received_at=T0)
    await journal.record(payload(alert("0004", status="resolved")), received_at=T0)
    ids = [
        await journal.save_plan(k, a_plan(k), dry_run=False, state=PlanState.PENDING) for k in keys
    ]
    await journal.update_plan(ids[1], PlanState.RUNNING)
    await journal.update_plan(ids[2], PlanState.DONE)
    assert [p.id for p in await journal.plans({PlanState.PENDING, PlanState.RUNNING})] == ids[:2]
    assert [p.id for p in await journal.plans([PlanState.DONE])] == ids[2:]
    assert await journal.plans([]) == []
    counts = await journal.counts()
    assert counts == journal.last_counts
    assert counts.alerts == {"firing": 3, "resolved": 1}
    assert counts.plans == {
        s: {PlanState.PENDING: 1, PlanState.RUNNING: 1, PlanState.DONE: 1}.get(s, 0)
        for s in PlanState
    }
    assert counts.deliveries == 4


async def test_prune_forgets_old_finished_alerts_only(journal: Journal) -> None:
    done, running, unplanned, recent = alert("0001"), alert("0002"), alert("0003"), alert("0004")
    await journal.record(payload(done, running, unplanned), received_at=T0)
    await journal.record(payload(recent), received_at=T0 + 1000)
    done_id = await journal.save_plan(
        done.key, a_plan(done.key), dry_run=False, state=PlanState.DONE
    )
    await journal.save_plan(running.key, a_plan(running.key), dry_run=False,
                            state=PlanState.RUNNING)  # fmt: skip
    assert await journal.prune(T0 + 500) == 2
    assert await journal.alert(done.key) is None
    assert await journal.alert(unplanned.key) is None
    assert await journal.plan(done_id) is None
    assert await journal.alert(running.key) is not None
    assert await journal.alert(recent.key) is not None
    assert [d.received_at for d in await journal.deliveries()] == [T0 + 1000]
    assert journal.last_counts.plans[PlanState.DONE] == 0
    assert journal.last_counts.alerts == {"firing": 2, "resolved": 0}


async def test_the_journal_survives_a_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "state" / "journal.db")  # the directory is created
    first = await Journal.open(path)
    a = alert("aaaa")
    await first.record(payload(a), received_at=T0)
    plan_id = await first.save_plan(a.key, a_plan(a.key), dry_run=False, state=PlanState.PENDING)
    await first.close()
    second = await Journal.open(path)
    try:
        assert second.last_counts.alerts == {"firing": 1, "resolved": 0}
        assert await second.record(payload(a), received_at=T0 + 60) == RecordResult(0, 1, 0, 0)
        record = await second.plan(plan_id)
        assert record is not None
        assert record.plan == a_plan(a.key)
    finally:
        await second.close()


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
        print(i, flush=True)
        i += 1

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


async def _write_until_killed(path: Path, start: int, commits: int) -> list[int]:
    """Run a writer process; SIGKILL it once ``commits`` records returned; the indices whose
    record() returned (as far as the writer could report before it died)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WRITER, str(path), str(start),
        cwd=REPO, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    done: list[int] = []
    try:
        while len(done) < commits:
            line = await asyncio.wait_for(proc.stdout.readline(), timeout=20)
            assert line, "the writer exited early"
            done.append(int(line))
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    assert proc.returncode == -signal.SIGKILL
    done += [int(line) for line in (await proc.stdout.read()).split()]
    return done


async def test_every_returned_record_survives_sigkill_and_none_is_half_written(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.db"
    returned: list[int] = []
    start = 0
    for _ in range(3):  # kill, reopen and continue, three times
        returned += await _write_until_killed(path, start, commits=60)
        journal = await Journal.open(str(path))
        try:
            deliveries = await journal.deliveries(limit=100_000)
            stored = sorted(int(d.group_key[1:]) for d in deliveries)
            # every record() that returned is there; at most the one in flight is extra
            assert set(returned) <= set(stored)
            assert stored == list(range(len(stored)))
            # nothing half-written: each delivery with all three of its alerts, and no others
            assert all((d.alerts, d.new, d.truncated) == (3, 3, int(d.group_key[1:]))
                       for d in deliveries)  # fmt: skip
            counts = await journal.counts()
            assert counts.alerts["firing"] == 3 * len(stored)
            for i in returned:
                assert await journal.alert((f"{i:08x}{2:08x}", 1000.0 + i)) is not None
            start = len(stored)
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
        a = alert("aaaa")
        await writer.record(payload(a), received_at=T0)
        plan_id = await writer.save_plan(a.key, a_plan(a.key), dry_run=False, state=PlanState.DONE)
        # The reader sees what the writer committed, and holds no lock the writer waits for
        # (the writer's busy timeout is 50 ms).
        [record] = await reader.plans()
        assert (record.id, record.state, record.plan) == (plan_id, PlanState.DONE, a_plan(a.key))
        assert (await reader.counts()).alerts == {"firing": 1, "resolved": 0}
        await writer.update_step(plan_id, 0, StepState.DONE, attempts=1)
        assert (await reader.plans())[0].steps[0].state == StepState.DONE
        with pytest.raises(JournalError, match="readonly"):
            await reader.record(payload(alert("bbbb")), received_at=T0 + 1)
        with pytest.raises(JournalError, match="readonly"):
            await reader.update_plan(plan_id, PlanState.FAILED)
    finally:
        await writer.close()
    try:  # ... and after the writer closed (its WAL checkpointed and removed)
        assert [p.state for p in await reader.plans()] == [PlanState.DONE]
    finally:
        await reader.close()
    again = await Journal.open_read_only(str(path))
    try:
        assert [p.id for p in await again.plans()] == [plan_id]
        assert again.last_counts.plans[PlanState.DONE] == 1
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
