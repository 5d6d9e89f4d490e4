"""The audit trail of the rollback hook: a Kubernetes Event for each decision and each step
outcome, on the Node or Pod it concerns (with its uid, so ``kubectl describe`` shows it).

Each Event is recorded once per key: its name derives from the key (exporter.kube.writer), so a
step resumed after a crash, or an alert decided again, does not record a second one. Nothing is
recorded in a dry run. A failed Event is logged and counted, never fatal: the record of what
happened is the journal, the Event its view in the cluster.
"""

from __future__ import annotations

import logging

from exporter.controller.steps import StepOutcome
from exporter.kube.errors import KubeError
from exporter.kube.writer import KubeWriter
from exporter.model.rollback import StepKind, StepState

log = logging.getLogger(__name__)

EVENT_REASON = {
    StepKind.CORDON: "NodesyncCordon",
    StepKind.TAINT: "NodesyncTaint",
    StepKind.DRAIN: "NodesyncDrain",
    StepKind.EVICT_POD: "NodesyncEvictPod",
    StepKind.CLEANUP_RUNTIME: "NodesyncCleanupRuntime",
    StepKind.VERIFY: "NodesyncVerify",
    StepKind.DELETE_NODE: "NodesyncDeleteNode",
}


def alert_event_key(key: tuple[str, float], what: str) -> str:
    return f"alert/{key[0]}/{key[1]!r}/{what}"


def step_event_key(plan_id: int, index: int, state: StepState) -> str:
    return f"plan/{plan_id}/step/{index}/{state.value}"


class Audit:
    def __init__(self, writer: KubeWriter, *, dry_run: bool) -> None:
        self._writer = writer
        self._dry_run = dry_run

    async def on_node(self, name: str, *, reason: str, message: str, type_: str, key: str) -> None:
        """An Event on the node ``name``, if it exists."""
        if self._dry_run or not name:
            return
        try:
            node = await self._writer.get_node(name)
            if node is None:
                return
            await self._writer.record_event(
                kind="Node",
                namespace="",
                name=name,
                uid=node.uid,
                reason=reason,
                message=message,
                type=type_,
                key=key,
            )
        except KubeError as exc:
            log.warning("could not record an event", extra={"node": name, "error": str(exc)})

    async def step(self, plan_id: int, index: int, kind: StepKind, outcome: StepOutcome) -> None:
        """The Event of a step's outcome, on the object the step was about."""
        failed = outcome.state is StepState.FAILED
        suffix = {StepState.FAILED: "Failed", StepState.SKIPPED: "Skipped"}
        reason = EVENT_REASON[kind] + suffix.get(outcome.state, "")
        target = outcome.target
        try:
            await self._writer.record_event(
                kind=target.kind,
                namespace=target.namespace,
                name=target.name,
                uid=target.uid,
                reason=reason,
                message=f"plan {plan_id} step {index + 1} ({kind.value}): {outcome.detail}",
                type="Warning" if failed else "Normal",
                key=step_event_key(plan_id, index, outcome.state),
            )
        except KubeError as exc:
            log.warning("could not record an event", extra={"plan": plan_id, "error": str(exc)})
