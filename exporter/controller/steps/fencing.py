"""CORDON and TAINT, the fencing steps, and giving a node back (undoing them).

The writer does nothing when the node is already so. Whether this rollback made the change is
what the intent recorded (the node before the step) says; a node given back loses exactly the
taint and the cordon the rollback's record says it made, or may have made.
"""

from __future__ import annotations

from exporter.controller.audit import node_ref
from exporter.controller.steps.context import StepContext
from exporter.controller.steps.outcome import StepError
from exporter.kube.errors import KubeError
from exporter.model.kube import TAINT_NODESYNC, NodeInfo, Taint
from exporter.model.rollback import ROLLBACK_TAINT_EFFECT, NodeRollback, StepKind, StepState
from exporter.model.rollback_state import (
    BEFORE_ABSENT,
    BEFORE_PRESENT,
    OBSERVED_BEFORE,
    StepResult,
    to_undo,
)

ROLLBACK_TAINT = Taint(TAINT_NODESYNC, ROLLBACK_TAINT_EFFECT)


def _before(present: bool) -> dict[str, str]:
    return {OBSERVED_BEFORE: BEFORE_PRESENT if present else BEFORE_ABSENT}


def observed_before(kind: StepKind, node: NodeInfo) -> dict[str, str]:
    """What the intent of a step of ``kind`` records of the node before it acts: whether the
    fencing it makes was there already (other kinds record nothing)."""
    if kind is StepKind.CORDON:
        return _before(node.unschedulable)
    if kind is StepKind.TAINT:
        return _before(any(t.key == ROLLBACK_TAINT.key for t in node.taints))
    return {}


def _made_before(rollback: NodeRollback, index: int) -> bool:
    """The intent says the change was absent before this step: it is this rollback's."""
    observed = rollback.status.steps[index].observed
    return observed.get(OBSERVED_BEFORE) == BEFORE_ABSENT


async def cordon(
    ctx: StepContext, rollback: NodeRollback, index: int, node: NodeInfo
) -> StepResult:
    result = await ctx.writer.cordon(node.name)
    if result.changed:
        return StepResult(StepState.DONE, "cordoned the node", made_change=True)
    mine = _made_before(rollback, index)
    detail = "cordoned the node (before a restart)" if mine else result.detail
    return StepResult(StepState.DONE, detail, made_change=mine)


async def taint(ctx: StepContext, rollback: NodeRollback, index: int, node: NodeInfo) -> StepResult:
    result = await ctx.writer.add_taint(node.name, ROLLBACK_TAINT)
    if result.changed:
        return StepResult(StepState.DONE, result.detail, made_change=True)
    mine = _made_before(rollback, index)
    detail = f"tainted the node {ROLLBACK_TAINT.key} (before a restart)" if mine else result.detail
    return StepResult(StepState.DONE, detail, made_change=mine)


async def undo(ctx: StepContext, rollback: NodeRollback) -> list[str]:
    """Remove the taint and the cordon this rollback made (or may have made, as its record
    says). Returns what was given back, also what was found given back already (by a run that
    died before recording it)."""
    kinds = to_undo(rollback.status)
    undone: list[str] = []
    name = rollback.spec.node
    try:
        if StepKind.TAINT in kinds:
            result = await ctx.writer.remove_taint(name, ROLLBACK_TAINT.key)
            key = ROLLBACK_TAINT.key
            undone.append(f"removed taint {key}" if result.changed else f"no taint {key}")
        if StepKind.CORDON in kinds:
            result = await ctx.writer.uncordon(name)
            undone.append("uncordoned" if result.changed else "not cordoned")
    except KubeError as exc:
        raise StepError(exc, node_ref(rollback)) from exc
    return undone
