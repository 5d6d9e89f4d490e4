"""Cordon and taint, and giving a node back (exporter.controller.steps.fencing): each change made
once, claimed only when the intent says it was this rollback's, undone as the record says.

The NodeRollbacks here are built in memory (tests.controller.steps.stage).
"""

from __future__ import annotations

import dataclasses

from exporter.controller.steps import (
    Wait,
)
from exporter.model.kube import TAINT_NODESYNC
from exporter.model.rollback import (
    StepKind,
    StepState,
)
from exporter.model.rollback_state import (
    BEFORE_ABSENT,
    BEFORE_PRESENT,
    OBSERVED_BEFORE,
)
from tests.controller.steps.stage import NODE, Env, at, rollback, started


async def test_cordon_and_taint_change_the_node_once(env: Env) -> None:
    r = started(rollback(env), StepKind.CORDON, {OBSERVED_BEFORE: BEFORE_ABSENT})
    result = await env.runner.execute(r, 0)
    assert not isinstance(result, Wait)
    assert (result.state, result.made_change) == (StepState.DONE, True)
    assert env.store.get("nodes", NODE)["spec"]["unschedulable"] is True
    r = started(r, StepKind.TAINT, {OBSERVED_BEFORE: BEFORE_ABSENT})
    result = await env.runner.execute(r, at(r, StepKind.TAINT))
    assert not isinstance(result, Wait)
    assert (result.state, result.made_change) == (StepState.DONE, True)
    taints = env.store.get("nodes", NODE)["spec"]["taints"]
    assert [t["key"] for t in taints] == [TAINT_NODESYNC]
    patches = env.server.counters.count("patch", "nodes")
    # Run again (a restart after the effect, before its record): no write, and it was ours.
    again = await env.runner.execute(r, at(r, StepKind.TAINT))
    assert not isinstance(again, Wait)
    assert (again.state, again.made_change) == (StepState.DONE, True)
    assert "before a restart" in again.message
    assert env.server.counters.count("patch", "nodes") == patches


async def test_a_cordon_someone_else_made_is_not_claimed(env: Env) -> None:
    env.store.patch("nodes", NODE, {"spec": {"unschedulable": True}})
    r = started(rollback(env), StepKind.CORDON, {OBSERVED_BEFORE: BEFORE_PRESENT})
    result = await env.runner.execute(r, 0)
    assert not isinstance(result, Wait)
    assert (result.state, result.made_change) == (StepState.DONE, False)
    assert "already cordoned" in result.message


async def test_undo_removes_exactly_what_the_record_says_the_rollback_made(env: Env) -> None:
    r = started(rollback(env), StepKind.CORDON, {OBSERVED_BEFORE: BEFORE_ABSENT})
    await env.runner.execute(r, 0)
    r = started(r, StepKind.TAINT, {OBSERVED_BEFORE: BEFORE_ABSENT})
    # Crashed after the taint, before its record: the record says the taint may have been made.
    await env.runner.execute(r, at(r, StepKind.TAINT))
    cordon = dataclasses.replace(r.status.steps[0], made_change=True)
    r = dataclasses.replace(
        r, status=dataclasses.replace(r.status, steps=(cordon, *r.status.steps[1:]))
    )
    assert sorted(await env.runner.undo(r)) == ["removed taint nodesync.io/rollback", "uncordoned"]
    node = env.store.get("nodes", NODE)
    assert not node["spec"].get("unschedulable")
    assert not node["spec"].get("taints")
    # Run again (a restart before the give-back was recorded): nothing is written, and what
    # was found already given back is said.
    patches = env.server.counters.count("patch", "nodes")
    assert sorted(await env.runner.undo(r)) == ["no taint nodesync.io/rollback", "not cordoned"]
    assert env.server.counters.count("patch", "nodes") == patches


async def test_undo_leaves_a_cordon_someone_else_made(env: Env) -> None:
    env.store.patch("nodes", NODE, {"spec": {"unschedulable": True}})
    r = started(rollback(env), StepKind.CORDON, {OBSERVED_BEFORE: BEFORE_PRESENT})
    result = await env.runner.execute(r, 0)
    assert not isinstance(result, Wait)
    done = dataclasses.replace(
        r.status.steps[0], state=StepState.DONE, made_change=result.made_change
    )
    r = dataclasses.replace(
        r, status=dataclasses.replace(r.status, steps=(done, *r.status.steps[1:]))
    )
    assert await env.runner.undo(r) == []
    assert env.store.get("nodes", NODE)["spec"]["unschedulable"] is True
