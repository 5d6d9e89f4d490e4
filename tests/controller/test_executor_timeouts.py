"""A step's timeout counts from its first attempt, across a restart of the controller (the
start is in the NodeRollback's status, which the next executor reads), and a failed step is
logged at WARNING."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from exporter.model.rollback import Phase, StepKind, StepState
from tests.controller.executor_harness import (
    Bench,
    alert,
    bench,
    running,
    settings,
    step_states,
)
from tests.support.wait import until_async

TIMEOUT = 3.0


@pytest.fixture
async def b(tmp_path: Path) -> AsyncIterator[Bench]:
    async with bench(tmp_path) as made:
        yield made


async def test_the_cleanup_timeout_counts_from_the_first_attempt_across_a_restart(
    b: Bench, caplog: pytest.LogCaptureFixture
) -> None:
    b.add_node("new-1")
    await b.wait_cluster(1)
    b.agent.hold = True  # the agent never answers the cleanup request

    async def renew() -> None:
        while True:  # the node is reachable (its Lease is fresh): the cleanup waits for it
            b.renew_lease("new-1")
            await asyncio.sleep(0.1)

    renewing = asyncio.create_task(renew())
    try:
        policy = settings(cleanup_timeout=TIMEOUT, cleanup_ack_timeout=TIMEOUT)
        await b.deliver(alert("new-1"))

        def cleanup_started() -> float | None:
            for rollback in b.rollbacks():
                for step in rollback.status.steps:
                    if step.kind is StepKind.CLEANUP_RUNTIME and step.state is StepState.RUNNING:
                        return step.started_at
            return None

        async def cleanup_running() -> bool:
            return cleanup_started() is not None

        executor = b.executor(policy)
        async with running(executor):
            await until_async(cleanup_running, timeout=15.0, what="the cleanup step to be running")
            first_start = cleanup_started()
            assert first_start is not None

            async def deadline_seen() -> bool:
                return bool(executor.status().step_deadlines)

            await until_async(deadline_seen, timeout=15.0, what="the step's deadline exported")
            # The deadline the metrics carry: the first attempt and the timeout.
            assert executor.status().step_deadlines == {"cleanup_runtime": first_start + TIMEOUT}

        async def timed_out() -> bool:
            return time.time() > first_start + TIMEOUT

        # The controller is gone while the timeout runs out; another one takes over.
        await until_async(
            timed_out, timeout=15.0, what="the cleanup timeout to pass, from the first attempt"
        )
        taken_over = time.time()
        await b.settled(b.executor(policy))
        [rollback] = b.rollbacks()
        assert (rollback.status.phase, rollback.status.reason) == (
            Phase.FAILED,
            "cleanup_timeout",
        )
        step = next(s for s in rollback.status.steps if s.kind is StepKind.CLEANUP_RUNTIME)
        assert step.started_at == first_start  # not restarted by the resume
        assert step.finished_at is not None
        assert step.finished_at - taken_over < TIMEOUT  # not another full timeout
        assert ("cleanup_runtime", "failed") in step_states(rollback)
    finally:
        renewing.cancel()
    failed = [
        r
        for r in caplog.records
        if r.getMessage() == "step finished" and r.__dict__.get("state") == "failed"
    ]
    assert [r.levelno for r in failed] == [logging.WARNING]
