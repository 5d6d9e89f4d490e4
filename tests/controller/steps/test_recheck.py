"""The re-check before every step (exporter.controller.steps.recheck): a node gone, untouchable or
recovered ends the rollback; a paused rollback or the correlated-failure guard makes it wait.

The NodeRollbacks here are built in memory (tests.controller.steps.stage).
"""

from __future__ import annotations

import time

import pytest

from exporter.controller.steps import (
    CORRELATED_FAILURE,
    NODE_GONE,
    PAUSED,
    RECOVERED,
    Go,
    Wait,
)
from exporter.model.rollback import (
    Action,
    Phase,
    StepKind,
    StepState,
)
from exporter.model.rollback_state import (
    BEFORE_ABSENT,
    BEFORE_PRESENT,
    OBSERVED_BEFORE,
)
from tests.controller.executor_harness import node_object
from tests.controller.steps.stage import NODE, Env, at, rollback, started


async def test_a_node_that_is_gone_or_another_object_ends_the_rollback(env: Env) -> None:
    r = rollback(env)
    env.store.delete("nodes", NODE)
    result = await env.runner.precheck(r, 0)
    assert not isinstance(result, (Go, Wait))
    assert (result.state, result.reason, result.stop) == (
        StepState.SKIPPED,
        NODE_GONE,
        Phase.SUCCEEDED,
    )
    env.store.create("nodes", node_object(NODE))  # the same name, another uid
    result = await env.runner.precheck(r, 0)
    assert not isinstance(result, (Go, Wait))
    assert result.reason == NODE_GONE
    assert "another object" in result.message


async def test_a_deletion_found_running_and_a_node_gone_is_done_not_node_gone(env: Env) -> None:
    """The deletion was sent before a crash: it is this rollback's, and recorded as done."""
    r = started(rollback(env, delete_node=True), StepKind.DELETE_NODE)
    env.store.delete("nodes", NODE)
    result = await env.runner.precheck(r, at(r, StepKind.DELETE_NODE))
    assert not isinstance(result, (Go, Wait))
    assert (result.state, result.reason, result.stop) == (StepState.DONE, "", None)


@pytest.mark.parametrize(
    ("labels", "taints", "reason"),
    [
        ({"node-role.kubernetes.io/control-plane": ""}, [], "control_plane"),
        ({"nodesync.io/protected": "true"}, [], "protected"),
        ({}, [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}], "other"),
    ],
)
async def test_a_node_that_became_untouchable_stops_the_rollback(
    env: Env, labels: dict[str, str], taints: list[dict[str, str]], reason: str
) -> None:
    r = rollback(env)
    node = env.store.get("nodes", NODE)
    node["metadata"]["labels"] = labels
    node["spec"]["taints"] = taints
    env.store.replace("nodes", node)
    result = await env.runner.precheck(r, 0)
    assert not isinstance(result, (Go, Wait))
    assert (result.state, result.stop) == (StepState.SKIPPED, Phase.CANCELLED)
    assert reason in result.reason


async def test_a_paused_rollback_waits(env: Env) -> None:
    result = await env.runner.precheck(rollback(env, paused=True), 0)
    assert isinstance(result, Wait)
    assert result.reason == PAUSED


async def test_a_recovered_node_stops_a_node_rollback_only(env: Env) -> None:
    node = env.store.get("nodes", NODE)
    node["status"]["conditions"][0].update(status="True", reason="KubeletReady")
    env.store.replace("nodes", node, subresource="status")
    env.leases[NODE] = time.time()
    result = await env.runner.precheck(rollback(env), 0)
    assert not isinstance(result, (Go, Wait))
    assert (result.reason, result.stop) == (RECOVERED, Phase.CANCELLED)
    # Recovery is not a reason to stop a cleanup of orphans, nor a deletion under way.
    assert isinstance(await env.runner.precheck(rollback(env, Action.CLEANUP_ORPHANS), 0), Go)
    deleting = started(rollback(env, delete_node=True), StepKind.DELETE_NODE)
    assert isinstance(await env.runner.precheck(deleting, at(deleting, StepKind.DELETE_NODE)), Go)
    # A stale Lease is not recovered, whatever the condition says.
    env.leases[NODE] = time.time() - 3600
    assert isinstance(await env.runner.precheck(rollback(env), 0), Go)


async def test_the_correlated_failure_guard_holds_steps_not_yet_started(env: Env) -> None:
    env.paused.paused = True
    result = await env.runner.precheck(rollback(env), 0)
    assert isinstance(result, Wait)
    assert result.reason == CORRELATED_FAILURE
    # A step already running goes on (its effect may have happened), as does a cleanup.
    running = started(rollback(env), StepKind.CORDON, {OBSERVED_BEFORE: BEFORE_ABSENT})
    assert isinstance(await env.runner.precheck(running, 0), Go)
    assert isinstance(await env.runner.precheck(rollback(env, Action.CLEANUP_ORPHANS), 0), Go)


async def test_the_intent_records_what_the_node_was_before_the_step(env: Env) -> None:
    r = rollback(env)
    assert await env.runner.precheck(r, at(r, StepKind.CORDON)) == Go(
        {OBSERVED_BEFORE: BEFORE_ABSENT}
    )
    env.store.patch("nodes", NODE, {"spec": {"unschedulable": True}})
    assert await env.runner.precheck(r, at(r, StepKind.CORDON)) == Go(
        {OBSERVED_BEFORE: BEFORE_PRESENT}
    )
    # Resumed after a restart: what the first attempt saw is kept.
    resumed = started(r, StepKind.CORDON, {OBSERVED_BEFORE: BEFORE_ABSENT})
    assert await env.runner.precheck(resumed, 0) == Go(None)
