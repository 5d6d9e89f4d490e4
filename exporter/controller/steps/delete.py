"""DELETE_NODE: deletes the Node with a precondition on the uid it was decided for."""

from __future__ import annotations

from exporter.controller.steps.context import StepContext
from exporter.model.kube import NodeInfo
from exporter.model.rollback import NodeRollback, StepState
from exporter.model.rollback_state import StepResult


async def delete_node(
    ctx: StepContext, rollback: NodeRollback, index: int, node: NodeInfo
) -> StepResult:
    result = await ctx.writer.delete_node(node.name, node.uid)
    return StepResult(StepState.DONE, result.detail)
