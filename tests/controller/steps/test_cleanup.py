"""The runtime cleanup (exporter.controller.steps.cleanup): asked with the rollback's request id,
answered by the agent, or skipped or failed when it cannot run.

The NodeRollbacks here are built in memory (tests.controller.steps.stage).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from exporter.controller.steps import (
    AGENT_UNREACHABLE,
    CLEANUP_FAILED,
    CLEANUP_TIMEOUT,
    RUNTIME_UNAVAILABLE,
    WAITING_FOR_AGENT,
    Wait,
    request_id,
)
from exporter.model.rollback import (
    CLEANUP_REQUEST_ANNOTATION,
    Action,
    NodeRollback,
    Phase,
    StepKind,
    StepState,
)
from tests.controller.steps.stage import NODE, SETTINGS, Env, at, rollback, started


async def _cleanup(env: Env, r: NodeRollback) -> Wait | Any:
    return await env.runner.execute(r, at(r, StepKind.CLEANUP_RUNTIME))


async def test_cleanup_asks_with_the_rollbacks_uid_and_takes_only_its_answer(env: Env) -> None:
    r = started(rollback(env), StepKind.CLEANUP_RUNTIME)
    request = request_id(r)
    assert request == r.uid
    # An answer an earlier rollback left on the node is not this one's.
    env.answer("nodesync-plan-1", "done")
    result = await _cleanup(env, r)
    assert isinstance(result, Wait)
    assert result.reason == WAITING_FOR_AGENT
    assert env.annotations()[CLEANUP_REQUEST_ANNOTATION] == request
    env.answer(request, "running")  # taken up: still waiting
    result = await _cleanup(env, r)
    assert isinstance(result, Wait)
    assert "is cleaning up" in result.message
    env.answer(request, "done")
    result = await _cleanup(env, r)
    assert not isinstance(result, Wait)
    assert result.state is StepState.DONE
    assert "removed 1 sandboxes and 2 containers" in result.message


@pytest.mark.parametrize(
    ("state", "reason"), [("unavailable", RUNTIME_UNAVAILABLE), ("failed", CLEANUP_FAILED)]
)
async def test_a_cleanup_that_cannot_run_is_skipped_by_a_node_rollback_and_fails_orphans(
    env: Env, state: str, reason: str
) -> None:
    for action, expected, stop in (
        (Action.ROLLBACK_NODE, StepState.SKIPPED, None),
        (Action.CLEANUP_ORPHANS, StepState.FAILED, Phase.FAILED),
    ):
        r = started(rollback(env, action), StepKind.CLEANUP_RUNTIME)
        env.answer(request_id(r), state, error="runtime: deadline exceeded")
        result = await _cleanup(env, r)
        assert not isinstance(result, Wait)
        assert (result.state, result.reason, result.stop) == (expected, reason, stop)
        assert "deadline exceeded" in result.message


async def test_an_unreachable_node_whose_agent_never_answers_is_skipped_after_the_ack_timeout(
    env: Env,
) -> None:
    r = started(rollback(env), StepKind.CLEANUP_RUNTIME, ago=SETTINGS.cleanup_ack_timeout - 5)
    assert isinstance(await _cleanup(env, r), Wait)  # not yet
    r = started(rollback(env), StepKind.CLEANUP_RUNTIME, ago=SETTINGS.cleanup_ack_timeout + 1)
    result = await _cleanup(env, r)  # no Lease at all: the node is dark
    assert not isinstance(result, Wait)
    assert (result.state, result.reason) == (StepState.SKIPPED, AGENT_UNREACHABLE)
    # With a fresh Lease the node is there: its agent should answer, so the step waits on.
    env.leases[NODE] = time.time()
    assert isinstance(await _cleanup(env, r), Wait)


async def test_a_reachable_node_whose_agent_does_not_finish_fails_and_nothing_is_deleted(
    env: Env,
) -> None:
    env.leases[NODE] = time.time()
    r = started(
        rollback(env, delete_node=True),
        StepKind.CLEANUP_RUNTIME,
        ago=SETTINGS.cleanup_timeout + 1,
    )
    env.answer("an-earlier-rollback", "done")
    result = await _cleanup(env, r)
    assert not isinstance(result, Wait)
    assert (result.state, result.reason, result.stop) == (
        StepState.FAILED,
        CLEANUP_TIMEOUT,
        Phase.FAILED,
    )
    assert "check its nodesync agent" in result.action_required
    assert env.node() is not None


async def test_the_cleanup_step_says_what_the_runtime_still_holds(env: Env) -> None:
    r = started(rollback(env), StepKind.CLEANUP_RUNTIME)
    env.answer(request_id(r), "done", remaining={"sandboxes": 1, "containers": 0, "pods": ["a/b"]})
    result = await _cleanup(env, r)
    assert not isinstance(result, Wait)
    assert result.state is StepState.DONE  # verify judges it
    assert "the runtime still holds 1 sandboxes and 0 containers nobody wants (a/b)" in (
        result.message
    )
