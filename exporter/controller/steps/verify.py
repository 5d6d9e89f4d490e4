"""VERIFY: a rolled-back node is cordoned (or gone) and its cleanup was done or skipped with its
reason.

A skipped cleanup on a node nodesync may not delete is reported as needing a person. A done
cleanup is checked against the runtime, as the agent's answer on the Node reports it after a
re-list (``remaining``): the step fails (``runtime_not_clean``) while the runtime still holds
sandboxes or containers nobody wants, or when the answer is no longer there. An answer without
``remaining`` (an agent older than the report) is taken as before, and says so.
"""

from __future__ import annotations

from exporter.controller.steps.cleanup import cleanup_status, pods_text, request_id
from exporter.controller.steps.context import StepContext
from exporter.controller.steps.outcome import NOT_VERIFIED, RUNTIME_NOT_CLEAN
from exporter.model.cleanup import CleanupState
from exporter.model.kube import NodeInfo
from exporter.model.rollback import Action, NodeRollback, Phase, StepKind, StepState
from exporter.model.rollback_state import StepResult


async def verify(
    ctx: StepContext, rollback: NodeRollback, index: int, node: NodeInfo
) -> StepResult:
    cleanup = next((s for s in rollback.status.steps if s.kind is StepKind.CLEANUP_RUNTIME), None)
    problems = []
    if cleanup is None or cleanup.state not in (StepState.DONE, StepState.SKIPPED):
        problems.append("the runtime cleanup did not finish")
    rollback_node = rollback.spec.action is Action.ROLLBACK_NODE
    if rollback_node and not node.unschedulable:
        problems.append("the node is not cordoned")
    if problems:
        return StepResult(
            StepState.FAILED,
            "; ".join(problems),
            reason=NOT_VERIFIED,
            stop=Phase.FAILED,
        )
    what = "cordoned and cleaned up" if rollback_node else "cleaned up"
    if cleanup is not None and cleanup.state is StepState.SKIPPED:
        what = f"cordoned and drained, not cleaned up ({cleanup.reason})"
        if not rollback.spec.delete_node:
            return StepResult(
                StepState.DONE,
                f"node {node.name} is {what}",
                action_required=f"node {node.name} is cordoned and drained, but its runtime "
                f"was not cleaned up ({cleanup.reason}): delete the Node (nodesync does "
                "with --rollback.delete-nodes) or repair its runtime, then uncordon it",
            )
        return StepResult(StepState.DONE, f"node {node.name} is {what}")
    return _verify_runtime(rollback, node, what)


def _verify_runtime(rollback: NodeRollback, node: NodeInfo, what: str) -> StepResult:
    """A done cleanup: what the agent's answer says the runtime still holds."""
    request = request_id(rollback)
    status = cleanup_status(node)
    if status is None or status.id != request or status.state is not CleanupState.DONE:
        return _not_clean(
            rollback, f"the agent's answer to cleanup {request} is no longer on the node"
        )
    remaining = status.remaining
    if remaining is None:
        return StepResult(
            StepState.DONE,
            f"node {node.name} is {what} (its agent does not report what the runtime still holds)",
        )
    if not remaining.empty:
        return _not_clean(
            rollback,
            f"after cleanup {request} the runtime still holds {remaining.sandboxes} "
            f"sandboxes and {remaining.containers} containers nobody wants"
            f"{pods_text(remaining)}",
        )
    return StepResult(
        StepState.DONE, f"node {node.name} is {what}; its runtime holds nothing unwanted"
    )


def _not_clean(rollback: NodeRollback, message: str) -> StepResult:
    name = rollback.spec.node
    return StepResult(
        StepState.FAILED,
        message,
        reason=RUNTIME_NOT_CLEAN,
        stop=Phase.FAILED,
        action_required=f"node {name} is not known to be clean: read its nodesync agent's "
        "log, ask for a cleanup again (kubectl annotate node "
        f"{name} nodesync.io/cleanup-request=manual-$(date +%s) --overwrite) and read "
        "nodesync.io/cleanup-status, then delete or uncordon the node",
    )
