"""One step of a NodeRollback against the live cluster: re-check, act idempotently, say what
happened (or that the step must wait).

Before every step the Node is read again (an alert is a hint, not a command): a node that is
gone or another object ends the rollback, one that became untouchable or recovered stops it,
a paused rollback or the correlated-failure guard makes the step wait (``recheck``).

Every action is idempotent, so a step run again after a restart changes nothing the first run
did, and finds out what the first run did. Each step kind has its own module, and
:data:`HANDLERS` says which acts for which kind:

- CORDON, TAINT (``fencing``, which also gives a node back);
- DRAIN, EVICT_POD (``drain``): what the drain policy evicts, through the Eviction API; a
  PodDisruptionBudget's refusal waits, then fails: nothing is forced;
- CLEANUP_RUNTIME (``cleanup``): asks the node's agent through a Node annotation and waits for
  its answer, or for proof that none can come;
- VERIFY (``verify``): the node is cordoned and its runtime clean, as the agent's answer says;
- DELETE_NODE (``delete``).

Timeouts count from the step's first attempt (recorded in the status), across retries and
restarts of the controller. What a step says besides its result is in ``outcome``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from exporter.controller.audit import ObjectRef, node_ref, subject
from exporter.controller.coordination import Pause
from exporter.controller.settings import ExecutorSettings
from exporter.controller.steps import cleanup, delete, drain, fencing, verify
from exporter.controller.steps.cleanup import cleanup_status, request_id
from exporter.controller.steps.context import Handler, NodeHandler, StepContext
from exporter.controller.steps.outcome import (
    AGENT_UNREACHABLE,
    ALERT_RESOLVED,
    API_ERROR,
    CLEANUP_FAILED,
    CLEANUP_TIMEOUT,
    CORRELATED_FAILURE,
    NODE_GONE,
    NOT_VERIFIED,
    PAUSED,
    PDB_BLOCKED,
    REASONS,
    RECOVERED,
    RUNTIME_NOT_CLEAN,
    RUNTIME_UNAVAILABLE,
    WAITING_FOR_AGENT,
    Go,
    StepError,
    Wait,
)
from exporter.controller.steps.recheck import gone, precheck
from exporter.kube.errors import KubeError
from exporter.kube.writer import KubeWriter
from exporter.model.rollback import NodeRollback, StepKind
from exporter.model.rollback_state import StepResult

__all__ = [
    "AGENT_UNREACHABLE",
    "ALERT_RESOLVED",
    "API_ERROR",
    "CLEANUP_FAILED",
    "CLEANUP_TIMEOUT",
    "CORRELATED_FAILURE",
    "HANDLERS",
    "NODE_GONE",
    "NOT_VERIFIED",
    "PAUSED",
    "PDB_BLOCKED",
    "REASONS",
    "RECOVERED",
    "RUNTIME_NOT_CLEAN",
    "RUNTIME_UNAVAILABLE",
    "WAITING_FOR_AGENT",
    "Go",
    "StepError",
    "StepRunner",
    "Wait",
    "cleanup_status",
    "request_id",
]


def on_node(handler: NodeHandler) -> Handler:
    """A kind that acts on the Node: read it live first (gone: the rollback ends); a failed
    API call is about the node."""

    async def run(ctx: StepContext, rollback: NodeRollback, index: int) -> StepResult | Wait:
        node = await ctx.node(rollback)
        if node is None:
            return gone(rollback, rollback.status.steps[index], None)
        try:
            return await handler(ctx, rollback, index, node)
        except KubeError as exc:
            raise StepError(exc, node_ref(rollback)) from exc

    return run


#: Which handler acts for each step kind.
HANDLERS: Mapping[StepKind, Handler] = {
    StepKind.CORDON: on_node(fencing.cordon),
    StepKind.TAINT: on_node(fencing.taint),
    StepKind.DRAIN: on_node(drain.drain),
    StepKind.EVICT_POD: drain.evict_pod,  # looks the pod up itself; its errors are the pod's
    StepKind.CLEANUP_RUNTIME: on_node(cleanup.cleanup),
    StepKind.VERIFY: on_node(verify.verify),
    StepKind.DELETE_NODE: on_node(delete.delete_node),
}


class StepRunner:
    """Runs the steps of NodeRollbacks. ``lease_renew_time(node)`` reads the node's Lease from
    the controller's cache (the Node itself is read live before every step);
    ``correlated_failure`` tells whether the correlated-failure guard pauses rollbacks now
    (no guard: never)."""

    def __init__(
        self,
        writer: KubeWriter,
        settings: ExecutorSettings,
        *,
        lease_renew_time: Callable[[str], float | None],
        correlated_failure: Pause | None = None,
        clock: Callable[[], float] = time.time,
        poll_interval: float = 1.0,
    ) -> None:
        self._ctx = StepContext(
            writer=writer,
            settings=settings,
            lease=lease_renew_time,
            pause=correlated_failure or Pause(),
            clock=clock,
            poll=poll_interval,
        )

    async def precheck(self, rollback: NodeRollback, index: int) -> StepResult | Wait | Go:
        """Before step ``index`` acts: stop the rollback, make it wait, or let it go."""
        return await precheck(self._ctx, rollback, index)

    async def execute(self, rollback: NodeRollback, index: int) -> StepResult | Wait:
        """Do step ``index`` (its intent recorded). A failed API call raises StepError."""
        handler = HANDLERS[rollback.status.steps[index].kind]
        return await handler(self._ctx, rollback, index)

    async def event_target(self, rollback: NodeRollback, index: int) -> ObjectRef:
        """What the Event of step ``index``'s outcome is about: the pod of an eviction (with
        its uid; the node once the pod is gone), else the node."""
        if rollback.status.steps[index].kind is not StepKind.EVICT_POD:
            return node_ref(rollback)
        return await subject(self._ctx.writer.reads, rollback)

    async def undo(self, rollback: NodeRollback) -> list[str]:
        """Give a node back: remove the taint and the cordon this rollback made (or may have
        made, as its record says). Returns what was given back, also what was found given back
        already (by a run that died before recording it)."""
        return await fencing.undo(self._ctx, rollback)
