"""Delete (exporter.controller.steps.delete): the Node it was decided for, once.

The NodeRollbacks here are built in memory (tests.controller.steps.stage).
"""

from __future__ import annotations

from exporter.controller.steps import (
    Wait,
)
from exporter.model.rollback import (
    StepKind,
    StepState,
)
from tests.controller.steps.stage import Env, at, rollback, started


async def test_delete_removes_the_node_it_was_decided_for(env: Env) -> None:
    r = started(rollback(env, delete_node=True), StepKind.DELETE_NODE)
    result = await env.runner.execute(r, at(r, StepKind.DELETE_NODE))
    assert not isinstance(result, Wait)
    assert result.state is StepState.DONE
    assert env.node() is None
    # Run again after a restart: nothing to delete, still done.
    result = await env.runner.execute(r, at(r, StepKind.DELETE_NODE))
    assert not isinstance(result, Wait)
    assert result.state is StepState.DONE
