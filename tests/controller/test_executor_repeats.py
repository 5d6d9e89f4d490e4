"""Drift that outlives its cleanup: an alert episode is decided once, and a drift alert keeps
its episode while drift lasts, so the executor repeats the cleanup of orphans for an episode
Alertmanager still sends as firing well after its last cleanup succeeded — once per such
re-send, as a NodeRollback of its own, never while a cleanup of the node runs."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from exporter.controller.executor import Executor
from exporter.controller.journal.ledger import LAST_SEEN_RESOLUTION
from exporter.model.alerts import Alert
from exporter.model.rollback import Action, Phase
from tests.controller.executor_harness import Bench, alert, bench, payload, step_states
from tests.support.wait import until_async

#: The time a test waits after a cleanup before its alert asks again (10 minutes in production).
AFTER = 0.3
DRIFT = alert("new-1", "cleanup_orphans", fingerprint="d1", kind="orphan_sandbox")
CLEANED = [("cleanup_runtime", "done"), ("verify", "done")]


@pytest.fixture
async def b(tmp_path: Path) -> AsyncIterator[Bench]:
    async with bench(tmp_path) as made:
        made.add_node("new-1", ready="True")
        await made.wait_cluster(1)
        yield made


async def cleaned_once(b: Bench) -> Executor:
    executor = b.executor()
    executor.intake._repeats.after = AFTER
    await b.deliver(DRIFT)
    await b.settled(executor)
    return executor


async def resent(b: Bench, sent: Alert, at: float) -> None:
    """Alertmanager sends ``sent`` again at ``at`` (its re-sends within a minute of the last
    are not recorded as seen: LAST_SEEN_RESOLUTION)."""
    await b.journal.record(payload(sent), received_at=at)


async def past(moment: float) -> None:
    await until_async(lambda: time.time() > moment, timeout=5.0, what="the wait after a cleanup")


async def test_drift_still_firing_after_its_cleanup_is_cleaned_again(b: Bench) -> None:
    executor = await cleaned_once(b)
    [first] = b.rollbacks()
    assert first.status.finished_at is not None
    await past(first.status.finished_at + AFTER)
    await resent(b, DRIFT, time.time() + LAST_SEEN_RESOLUTION)
    await b.settled(executor)
    rollbacks = b.rollbacks()
    assert len(rollbacks) == 2
    [again] = [r for r in rollbacks if r.name != first.name]
    assert (again.spec.action, again.spec.trigger) == (Action.CLEANUP_ORPHANS, first.spec.trigger)
    assert again.status.phase is Phase.SUCCEEDED
    assert step_states(again) == CLEANED
    # the agent was asked twice, each request its rollback's own
    assert b.agent.answered == [("new-1", first.uid), ("new-1", again.uid)]
    # the episode has its one decision; the second cleanup's record is its NodeRollback
    assert [d.verdict for d in await b.decisions()] == ["plan"]
    # nothing more without another re-send
    await b.settled(executor)
    assert len(b.rollbacks()) == 2


async def test_a_resend_before_the_wait_or_a_resolved_alert_asks_for_nothing(b: Bench) -> None:
    executor = await cleaned_once(b)
    [first] = b.rollbacks()
    assert first.status.finished_at is not None
    # seen again, but too soon after the cleanup: the drift alert keeps firing for a while
    # after its drift is gone
    executor.intake._repeats.after = 3_600.0
    await resent(b, DRIFT, time.time() + LAST_SEEN_RESOLUTION)
    await b.settled(executor)
    assert len(b.rollbacks()) == 1
    # resolved: its drift is gone
    executor.intake._repeats.after = AFTER
    await past(first.status.finished_at + AFTER)
    resolved = Alert(DRIFT.fingerprint, "resolved", DRIFT.labels, DRIFT.starts_at)
    await resent(b, resolved, time.time() + 2 * LAST_SEEN_RESOLUTION)
    await b.settled(executor)
    assert len(b.rollbacks()) == 1
    assert b.agent.answered == [("new-1", first.uid)]
