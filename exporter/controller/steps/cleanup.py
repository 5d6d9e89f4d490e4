"""CLEANUP_RUNTIME: ask the node's agent to clean up its runtime, and wait for its answer.

The step sets the Node annotation ``nodesync.io/cleanup-request`` to the request id (the
NodeRollback's uid) and waits for the agent's ``nodesync.io/cleanup-status`` with that id.
When the cleanup cannot run — the agent reports that the runtime cannot be read, or the node
is unreachable (its Lease is stale or missing) and its agent has not taken the request up
within ``--cleanup.ack-timeout`` — a node rollback goes on without it (the node is going away,
its runtime state with it) and says so; a cleanup of orphans fails. An agent on a reachable
node that does not finish within ``--cleanup.timeout`` fails the step: nothing is deleted
without a cleanup or proof that none can run, and the rollback says what to do.
"""

from __future__ import annotations

from exporter.controller.steps.context import StepContext
from exporter.controller.steps.outcome import (
    AGENT_UNREACHABLE,
    CLEANUP_FAILED,
    CLEANUP_TIMEOUT,
    RUNTIME_UNAVAILABLE,
    WAITING_FOR_AGENT,
    Wait,
)
from exporter.model.cleanup import CleanupState, CleanupStatus, Remaining
from exporter.model.kube import NodeInfo
from exporter.model.rollback import (
    CLEANUP_REQUEST_ANNOTATION,
    CLEANUP_STATUS_ANNOTATION,
    Action,
    NodeRollback,
    Phase,
    StepState,
    cleanup_request_id,
)
from exporter.model.rollback_state import StepResult


def cleanup_status(node: NodeInfo) -> CleanupStatus | None:
    """The agent's answer on the Node, if it is well-formed."""
    return CleanupStatus.from_json(node.annotations.get(CLEANUP_STATUS_ANNOTATION, ""))


def request_id(rollback: NodeRollback) -> str:
    """The cleanup request of the rollback as it stands: its uid, and a suffix when an
    escalation asks the agent again."""
    return cleanup_request_id(rollback.uid, max(1, rollback.status.observed_generation))


def pods_text(remaining: Remaining) -> str:
    """The pods whose leftovers the runtime still holds, for a message."""
    return f" ({', '.join(remaining.pods)})" if remaining.pods else ""


def _remaining_text(status: CleanupStatus) -> str:
    """What the answer says the runtime still holds, for the step's message."""
    remaining = status.remaining
    if remaining is None:
        return ""
    if remaining.empty:
        return "; the runtime holds nothing unwanted"
    return (
        f"; the runtime still holds {remaining.sandboxes} sandboxes and "
        f"{remaining.containers} containers nobody wants{pods_text(remaining)}"
    )


def _cannot_clean(rollback: NodeRollback, reason: str, message: str) -> StepResult:
    """A cleanup that cannot run: a node rollback goes on without it; a cleanup of orphans
    fails."""
    if rollback.spec.action is Action.ROLLBACK_NODE:
        return StepResult(
            StepState.SKIPPED, f"{message}; the node is being rolled back", reason=reason
        )
    return StepResult(StepState.FAILED, message, reason=reason, stop=Phase.FAILED)


def _timed_out(ctx: StepContext, rollback: NodeRollback, request: str) -> StepResult:
    """A reachable node's agent did not clean up in time: stop (nothing is deleted without a
    cleanup or proof that none can run) and say what to do."""
    name = rollback.spec.node
    return StepResult(
        StepState.FAILED,
        f"the agent of node {name} did not finish cleanup {request} within "
        f"{ctx.settings.cleanup_timeout:g} s",
        reason=CLEANUP_TIMEOUT,
        stop=Phase.FAILED,
        action_required=f"node {name} is cordoned and drained but its runtime was not "
        "cleaned up: check its nodesync agent (the cleanup-request annotation shows what it "
        "was asked), then delete or uncordon the node",
    )


async def cleanup(
    ctx: StepContext, rollback: NodeRollback, index: int, node: NodeInfo
) -> StepResult | Wait:
    request = request_id(rollback)
    status = cleanup_status(node)
    started = ctx.started(rollback, index)
    elapsed = ctx.clock() - started
    if status is not None and status.id == request:
        if status.state is CleanupState.DONE:
            return StepResult(
                StepState.DONE,
                f"the agent removed {status.removed_sandboxes} sandboxes and "
                f"{status.removed_containers} containers and left {status.skipped} items a "
                f"re-check no longer confirmed{_remaining_text(status)} (request {request})",
            )
        if status.state is CleanupState.UNAVAILABLE:
            return _cannot_clean(
                rollback,
                RUNTIME_UNAVAILABLE,
                f"the agent cannot reach the runtime: {status.error or 'no error given'}",
            )
        if status.state is CleanupState.FAILED:
            return _cannot_clean(
                rollback,
                CLEANUP_FAILED,
                f"the agent's cleanup failed: {status.error or 'no error given'}",
            )
        if elapsed >= ctx.settings.cleanup_timeout:  # taken up, never finished
            return _timed_out(ctx, rollback, request)
        return Wait(WAITING_FOR_AGENT, f"the agent is cleaning up ({request})", ctx.poll)
    if node.annotations.get(CLEANUP_REQUEST_ANNOTATION) != request:
        await ctx.writer.annotate_node(node.name, {CLEANUP_REQUEST_ANNOTATION: request})
    if elapsed >= ctx.settings.cleanup_ack_timeout and ctx.unreachable(node):
        return _cannot_clean(
            rollback,
            AGENT_UNREACHABLE,
            f"node {node.name} is unreachable (no fresh Lease) and its agent did not take up "
            f"cleanup {request} within {ctx.settings.cleanup_ack_timeout:g} s",
        )
    if elapsed >= ctx.settings.cleanup_timeout:
        return _timed_out(ctx, rollback, request)
    return Wait(WAITING_FOR_AGENT, f"waiting for the agent to take up {request}", ctx.poll)
