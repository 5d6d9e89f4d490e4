"""Resolved alerts at the intake: one that arrives already resolved, or resolves before it was
decided, is refused ``resolved`` (the record docs/hook.md and docs/webhook.md promise: a decision
in the journal, the refusal counted, a Warning Event on the node) and makes no NodeRollback; a
resolve whose startsAt was written to another precision resolves the original alert."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from exporter.model.alerts import episode_start
from exporter.model.rollback import Phase
from tests.controller.executor_harness import STARTED, Bench, alert, bench, nodes_patched


@pytest.fixture
async def b(tmp_path: Path) -> AsyncIterator[Bench]:
    async with bench(tmp_path) as made:
        yield made


async def test_an_alert_that_arrives_resolved_is_refused_resolved(b: Bench) -> None:
    b.add_node("new-1")
    await b.wait_cluster(1)
    executor = b.executor()
    await b.deliver(alert("new-1", status="resolved", fingerprint="flapped"))
    await b.settled(executor)
    [refusal] = await b.decisions()
    assert (refusal.verdict, refusal.reason, refusal.node) == ("refused", "resolved", "new-1")
    assert executor.intake.metrics.refusals("resolved") == 1
    assert b.event_reasons("new-1") == ["NodesyncRefused"]
    assert b.rollbacks() == []
    assert nodes_patched(b.server) == 0
    assert await b.journal.alerts_to_decide() == []
    await executor.intake.run_once()  # decided once
    assert len(await b.decisions()) == 1
    assert executor.intake.metrics.refusals("resolved") == 1


async def test_an_alert_resolved_before_it_was_decided_is_refused_resolved(b: Bench) -> None:
    b.add_node("new-1")
    await b.wait_cluster(1)
    executor = b.executor()
    firing = alert("new-1")
    await b.deliver(firing)
    await b.deliver(alert("new-1", status="resolved", starts_at=firing.starts_at))
    await b.settled(executor)
    [refusal] = await b.decisions()
    assert (refusal.alert_key, refusal.reason) == (firing.key, "resolved")
    assert b.rollbacks() == []


async def test_a_resolve_with_another_precision_cancels_the_pending_rollback(b: Bench) -> None:
    b.add_node("new-1")
    await b.wait_cluster(1)
    executor = b.executor()
    # Alertmanager kept nanoseconds; the resolve came back through its API with microseconds:
    # rounded to the millisecond, the two starts land on neighbouring milliseconds.
    firing = alert("new-1", starts_at=episode_start(STARTED + 0.1234996))
    resolving = alert("new-1", status="resolved", starts_at=episode_start(STARTED + 0.1235))
    assert firing.starts_at != resolving.starts_at
    await b.deliver(firing)
    await executor.intake.run_once()
    [pending] = b.rollbacks()
    assert pending.status.phase is Phase.PENDING
    await b.deliver(resolving)
    await b.settled(executor)
    [rollback] = b.rollbacks()
    assert (rollback.status.phase, rollback.status.reason) == (Phase.CANCELLED, "alert_resolved")
    [decision] = await b.decisions()
    assert (decision.alert_key, decision.verdict) == (firing.key, "plan")  # not a second alert
    assert (await b.journal.counts()).alerts == {"firing": 0, "resolved": 1}
    assert nodes_patched(b.server) == 0
