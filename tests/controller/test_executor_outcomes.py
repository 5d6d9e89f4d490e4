"""How alert episodes end, as the leader counts them (``nodesync_alert_episodes_total``): once
each, when Alertmanager's resolved notification arrives and any rollback of the episode ended;
a duplicate notification, another pass or another executor on the same journal counts nothing
again."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from exporter.controller.executor import Executor
from exporter.model.alerts import Alert
from exporter.model.outcomes import OUTCOMES
from exporter.model.rollback import Phase
from tests.controller.executor_harness import Bench, alert, bench, settings

NAME = "NodesyncNewNodeNotReady"


@pytest.fixture
async def b(tmp_path: Path) -> AsyncIterator[Bench]:
    async with bench(tmp_path) as made:
        yield made


def resolved(firing: Alert, ends_at: float) -> Alert:
    return dataclasses.replace(firing, status="resolved", ends_at=ends_at)


def counted(executor: Executor, alertname: str = NAME) -> dict[str, int]:
    metrics = executor.intake.metrics
    return {o: n for o in OUTCOMES if (n := metrics.episodes(alertname, o))}


async def test_a_dry_run_tells_the_episodes_that_cleared_by_themselves(b: Bench) -> None:
    b.add_node("new-1")
    b.add_node("new-2")
    b.add_node("new-3")
    await b.wait_cluster(3)
    executor = b.executor(settings(dry_run=True, max_rollback_fraction=1.0))
    quick, slow = alert("new-1"), alert("new-2")
    await b.deliver(quick, slow, alert("new-3"))
    await b.settled(executor)
    assert counted(executor) == {}  # decided: the rule's series exist, at 0
    assert executor.intake.metrics.episodes(NAME, "dry_run_cleared") == 0

    decided = {d.node: d.decided_at for d in await b.decisions("dry_run")}
    within = executor.intake.episodes._clear_within
    assert within == 600.0  # --rollback.dry-run-clear-within's default
    await b.deliver(resolved(quick, decided["new-1"] + 30), resolved(slow, decided["new-2"] + 601))
    await b.settled(executor)
    expected = {"dry_run_cleared": 1, "dry_run_outlasted": 1}
    assert counted(executor) == expected

    # Alertmanager's retry, its HA twin, more passes: nothing is counted twice.
    await b.deliver(resolved(quick, decided["new-1"] + 30))
    await b.settled(executor)
    await executor.run_once()
    assert counted(executor) == expected
    # Nor by a restarted controller reading the same journal.
    again = b.executor(settings(dry_run=True, max_rollback_fraction=1.0))
    await b.settled(again)
    assert counted(again) == {}


async def test_remediated_held_refused_and_cleared(b: Bench) -> None:
    b.add_node("new-1")
    b.add_node("cp-1", labels={"node-role.kubernetes.io/control-plane": ""})
    await b.wait_cluster(2)
    executor = b.executor()
    fixed, exempt, unknown = alert("new-1"), alert("cp-1"), alert("ghost-1")
    await b.deliver(fixed, exempt, unknown)
    await b.settled(executor)
    [rollback] = b.rollbacks()
    assert rollback.status.phase is Phase.SUCCEEDED
    assert counted(executor) == {}  # nothing resolved yet

    late = alert("new-1", fingerprint="arrived-resolved")
    now = time.time()
    await b.deliver(
        resolved(fixed, now),
        resolved(exempt, now),
        resolved(unknown, now),
        resolved(late, now),  # resolved before it was decided: no rollback ran
    )
    await b.settled(executor)
    assert counted(executor) == {"remediated": 1, "held": 1, "refused": 1, "cleared": 1}
