"""Verify (exporter.controller.steps.verify): the node cordoned, its cleanup finished, its
runtime holding nothing unwanted as the agent's answer says.

The NodeRollbacks here are built in memory (tests.controller.steps.stage).
"""

from __future__ import annotations

import dataclasses

from exporter.controller.steps import (
    NOT_VERIFIED,
    RUNTIME_NOT_CLEAN,
    RUNTIME_UNAVAILABLE,
    Wait,
    request_id,
)
from exporter.model.rollback import (
    Action,
    Phase,
    StepKind,
    StepState,
)
from tests.controller.steps.stage import NODE, Env, at, rollback, started

NOTHING_LEFT = {"sandboxes": 0, "containers": 0, "pods": []}


async def test_verify_needs_the_cordon_and_a_finished_cleanup(env: Env) -> None:
    r = started(rollback(env), StepKind.VERIFY)
    env.answer(request_id(r), "done", remaining=NOTHING_LEFT)
    result = await env.runner.execute(r, at(r, StepKind.VERIFY))
    assert not isinstance(result, Wait)
    assert (result.state, result.reason) == (StepState.FAILED, NOT_VERIFIED)
    assert "not cordoned" in result.message
    env.store.patch("nodes", NODE, {"spec": {"unschedulable": True}})
    result = await env.runner.execute(r, at(r, StepKind.VERIFY))
    assert not isinstance(result, Wait)
    assert (result.state, result.action_required) == (StepState.DONE, "")
    assert "holds nothing unwanted" in result.message


async def test_verify_fails_while_the_runtime_still_holds_what_nobody_wants(env: Env) -> None:
    env.store.patch("nodes", NODE, {"spec": {"unschedulable": True}})
    for action in (Action.ROLLBACK_NODE, Action.CLEANUP_ORPHANS):
        r = started(rollback(env, action, delete_node=True), StepKind.VERIFY)
        left = {"sandboxes": 2, "containers": 1, "pods": ["apps/web-0", "apps/web-1"]}
        env.answer(request_id(r), "done", remaining=left)
        result = await env.runner.execute(r, at(r, StepKind.VERIFY))
        assert not isinstance(result, Wait)
        assert (result.state, result.reason, result.stop) == (
            StepState.FAILED,
            RUNTIME_NOT_CLEAN,
            Phase.FAILED,
        )
        assert "still holds 2 sandboxes and 1 containers" in result.message
        assert "apps/web-0, apps/web-1" in result.message
        assert NODE in result.action_required
        # The same rollback once the agent reports the runtime clean: verified.
        env.answer(request_id(r), "done", remaining=NOTHING_LEFT)
        result = await env.runner.execute(r, at(r, StepKind.VERIFY))
        assert not isinstance(result, Wait)
        assert result.state is StepState.DONE


async def test_verify_without_the_agents_answer_on_the_node_is_not_verified(env: Env) -> None:
    env.store.patch("nodes", NODE, {"spec": {"unschedulable": True}})
    r = started(rollback(env, delete_node=True), StepKind.VERIFY)
    for answer in (None, ("someone-else", "done"), (request_id(r), "running")):
        if answer is not None:
            env.answer(*answer, remaining=NOTHING_LEFT)
        result = await env.runner.execute(r, at(r, StepKind.VERIFY))
        assert not isinstance(result, Wait)
        assert (result.state, result.reason) == (StepState.FAILED, RUNTIME_NOT_CLEAN), answer
        assert "no longer on the node" in result.message


async def test_verify_takes_an_answer_without_remaining_as_before_and_says_so(env: Env) -> None:
    # An agent older than the report (a rolling upgrade): its answer has no "remaining".
    env.store.patch("nodes", NODE, {"spec": {"unschedulable": True}})
    r = started(rollback(env), StepKind.VERIFY)
    env.answer(request_id(r), "done")
    result = await env.runner.execute(r, at(r, StepKind.VERIFY))
    assert not isinstance(result, Wait)
    assert (result.state, result.action_required) == (StepState.DONE, "")
    assert "does not report what the runtime still holds" in result.message


async def test_verify_asks_for_a_person_when_a_skipped_cleanup_leaves_the_node(env: Env) -> None:
    env.store.patch("nodes", NODE, {"spec": {"unschedulable": True}})
    r = started(rollback(env), StepKind.VERIFY)
    cleanup = at(r, StepKind.CLEANUP_RUNTIME)
    steps = list(r.status.steps)
    steps[cleanup] = dataclasses.replace(
        steps[cleanup], state=StepState.SKIPPED, reason=RUNTIME_UNAVAILABLE
    )
    r = dataclasses.replace(r, status=dataclasses.replace(r.status, steps=tuple(steps)))
    result = await env.runner.execute(r, at(r, StepKind.VERIFY))
    assert not isinstance(result, Wait)
    assert result.state is StepState.DONE
    assert "delete the Node" in result.action_required
    # With --rollback.delete-nodes the deletion follows: nobody needs to act.
    deleting = dataclasses.replace(r, spec=dataclasses.replace(r.spec, delete_node=True))
    result = await env.runner.execute(deleting, at(r, StepKind.VERIFY))
    assert not isinstance(result, Wait)
    assert result.action_required == ""
