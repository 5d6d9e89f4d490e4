"""The re-check before every step: the Node is read again (an alert is a hint, not a command).

A node that is gone, or is another object under its name (another uid), ends the rollback:
nothing left to do — unless the step found running is the deletion, which then finished before
a restart. A node that became protected, control-plane or another remediator's stops it. A
node that recovered (Ready and its Lease fresh after a failure the API server showed:
exporter.model.health) stops a node rollback and is given back (the executor undoes what the
rollback's record says it did, or may have done). A paused rollback
(``spec.paused``) and, for node rollbacks, the correlated-failure guard make the step wait.
"""

from __future__ import annotations

from exporter.controller.steps.context import StepContext
from exporter.controller.steps.fencing import observed_before
from exporter.controller.steps.outcome import (
    CORRELATED_FAILURE,
    NODE_GONE,
    PAUSED,
    RECOVERED,
    Go,
    Wait,
)
from exporter.model.guards import never_touch
from exporter.model.health import is_recovered
from exporter.model.kube import NodeInfo
from exporter.model.rollback import Action, NodeRollback, Phase, StepKind, StepState, StepStatus
from exporter.model.rollback_state import StepResult


async def precheck(ctx: StepContext, rollback: NodeRollback, index: int) -> StepResult | Wait | Go:
    """Before step ``index`` acts: stop the rollback, make it wait, or let it go."""
    spec, step = rollback.spec, rollback.status.steps[index]
    node = await ctx.node(rollback)
    if node is None or (spec.node_uid and node.uid != spec.node_uid):
        return gone(rollback, step, node)
    refusal = never_touch(node)
    if refusal is not None:
        return StepResult(
            StepState.SKIPPED,
            f"stopped: {refusal.detail}",
            reason=refusal.reason,
            stop=Phase.CANCELLED,
        )
    if spec.paused:
        return Wait(PAUSED, "held: spec.paused is true", ctx.poll)
    deleting = step.kind is StepKind.DELETE_NODE and step.state is StepState.RUNNING
    if (
        spec.action is Action.ROLLBACK_NODE
        and not deleting
        and is_recovered(
            node.conditions,
            ctx.lease(node.name),
            ctx.clock(),
            ctx.settings.policy.node_monitor_grace_period,
            failing_when_decided=spec.decision.failing_since is not None,
            alert_started_at=spec.trigger.starts_at,
        )
    ):
        return StepResult(
            StepState.SKIPPED,
            f"node {node.name} recovered (Ready, Lease fresh): given back",
            reason=RECOVERED,
            stop=Phase.CANCELLED,
        )
    if spec.action is Action.ROLLBACK_NODE and step.state is StepState.PENDING and ctx.pause.paused:
        return Wait(
            CORRELATED_FAILURE,
            "established nodes are failing together: control-plane trouble suspected, "
            "every rollback waits",
            ctx.poll,
        )
    if step.state is StepState.RUNNING:
        return Go(None)  # resumed: keep what the first attempt saw before acting
    return Go(observed_before(step.kind, node))


def gone(rollback: NodeRollback, step: StepStatus, node: NodeInfo | None) -> StepResult:
    """The node is gone (None) or another object under its name: the rollback ends."""
    name = rollback.spec.node
    what = "is gone" if node is None else f"is another object now (uid {node.uid})"
    if step.kind is StepKind.DELETE_NODE and step.state is StepState.RUNNING:
        return StepResult(StepState.DONE, f"deleted node {name}")
    if step.kind is StepKind.VERIFY:
        return StepResult(StepState.DONE, f"node {name} {what}")
    return StepResult(
        StepState.SKIPPED,
        f"node {name} {what}: nothing left to do",
        reason=NODE_GONE,
        stop=Phase.SUCCEEDED,
    )
