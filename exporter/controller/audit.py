"""The audit trail of the rollback hook: a Kubernetes Event for each decision and each step
outcome, on the Node or Pod it concerns (an eviction's decision and step on its Pod), with its
uid (``kubectl describe`` selects Events by
``involvedObject.uid``: an Event without it is invisible there).

Each Event is recorded once per key: its name derives from the key (exporter.kube.writer), and
the keys of a rollback's Events derive from the NodeRollback's uid, so a step resumed after a
crash records no second Event, and no Event of an earlier rollback of the same node is taken for
this one's. Nothing is recorded in a dry run. A failed Event is logged, never fatal: the record
of what happened is the NodeRollback (and the journal for refusals); Events are its view.

Events that can wait (an alert refused or held back: ``EventLane``) go last: one task writes
them in order at write priority ``LATER``, so that the write budget serves every rollback's
writes, fencing first, before them (docs/hook.md, "Fencing first").
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass

from exporter.kube.errors import KubeError
from exporter.kube.ratelimit import write_priority
from exporter.kube.reads import ObjectReads
from exporter.kube.writer import KubeWriter
from exporter.model.names import is_dns1123_subdomain
from exporter.model.rollback import NodeRollback, StepKind, StepState
from exporter.tasks import cancel_and_wait

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
_SUFFIX = {StepState.FAILED: "Failed", StepState.SKIPPED: "Skipped"}
#: The write priority of the Events that can wait: after every step of every rollback (a step's
#: writes wait at its index, exporter.controller.driver).
LATER = 1_000


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """What an Event is about."""

    kind: str  # Node or Pod
    namespace: str
    name: str
    uid: str


def node_ref(rollback: NodeRollback) -> ObjectRef:
    return ObjectRef("Node", "", rollback.spec.node, rollback.spec.node_uid)


async def subject(reads: ObjectReads, rollback: NodeRollback) -> ObjectRef:
    """What the Events about a rollback's action are on: the pod of an eviction, with its uid
    (read now when the spec has none), while it is on the rollback's node; otherwise, or when
    it cannot be read, the node. An Event needs its object's uid: ``kubectl describe``
    selects Events by it."""
    target = rollback.spec.pod
    if target is None:
        return node_ref(rollback)
    uid = target.uid
    if not uid:
        try:
            pod = await reads.get_pod(target.namespace, target.name)
        except KubeError:
            pod = None
        if pod is not None and pod.node_name == rollback.spec.node:
            uid = pod.uid
    if not uid:
        return node_ref(rollback)
    return ObjectRef("Pod", target.namespace, target.name, uid)


def alert_event_key(key: tuple[str, float], what: str) -> str:
    return f"alert/{key[0]}/{key[1]!r}/{what}"


def step_event_key(rollback: NodeRollback, index: int, state: StepState) -> str:
    attempt = rollback.status.observed_generation or 1
    return f"rollback/{rollback.uid}/{attempt}/step/{index}/{state.value}"


class Audit:
    def __init__(self, writer: KubeWriter, *, dry_run: bool) -> None:
        self._writer = writer
        self._dry_run = dry_run

    async def record(
        self, target: ObjectRef, *, reason: str, message: str, type_: str, key: str
    ) -> None:
        if self._dry_run or not target.name:
            return
        try:
            await self._writer.events.record_event(
                kind=target.kind,
                namespace=target.namespace,
                name=target.name,
                uid=target.uid,
                reason=reason,
                message=message,
                type=type_,
                key=key,
            )
        except KubeError as exc:
            log.warning(
                "could not record an event",
                extra={"object": f"{target.kind} {target.name}", "error": str(exc)},
            )

    async def on_node(self, name: str, *, reason: str, message: str, type_: str, key: str) -> None:
        """An Event on the node ``name``, if it exists (its uid read now). A name no node can
        have (an alert's label that is not a DNS-1123 subdomain) is not looked up."""
        if self._dry_run or not is_dns1123_subdomain(name):
            return
        try:
            node = await self._writer.reads.get_node(name)
        except KubeError as exc:
            log.warning("could not record an event", extra={"node": name, "error": str(exc)})
            return
        if node is not None:
            target = ObjectRef("Node", "", name, node.uid)
            await self.record(target, reason=reason, message=message, type_=type_, key=key)

    async def decided(self, rollback: NodeRollback, alertname: str) -> None:
        """The rollback was decided: where to follow it. On what the rollback is about: the
        node, or the pod an eviction is about (:func:`subject`)."""
        if self._dry_run:
            return
        await self.record(
            await subject(self._writer.reads, rollback),
            reason="NodesyncRollback",
            message=f"nodesync decided to {rollback.spec.action.value} (alert {alertname}): "
            f"kubectl get noderollback {rollback.name}",
            type_="Normal",
            key=f"rollback/{rollback.uid}/decided",
        )

    async def step(
        self,
        rollback: NodeRollback,
        index: int,
        state: StepState,
        message: str,
        target: ObjectRef | None = None,
    ) -> None:
        """The Event of a step's outcome, on the object the step was about."""
        kind = rollback.status.steps[index].kind
        await self.record(
            target or node_ref(rollback),
            reason=EVENT_REASON[kind] + _SUFFIX.get(state, ""),
            message=f"{rollback.name} step {index + 1} ({kind.value}): {message}",
            type_="Warning" if state is StepState.FAILED else "Normal",
            key=step_event_key(rollback, index, state),
        )

    async def stopped(self, rollback: NodeRollback, reason: str, message: str) -> None:
        """The rollback stopped before it finished, or needs a person."""
        await self.record(
            node_ref(rollback),
            reason=reason,
            message=f"{rollback.name}: {message}",
            type_="Warning" if reason == "NodesyncActionRequired" else "Normal",
            key=f"rollback/{rollback.uid}/{reason}",
        )


@dataclass(frozen=True, slots=True)
class _NodeEvent:
    node: str
    reason: str
    message: str
    type_: str
    key: str


class EventLane:
    """Events on nodes that can wait (a refused or held-back alert's), written after
    everything else: ``on_node`` queues one and returns at once; one task writes the queue in
    order, each Event (with the read of its node's uid) at write priority ``LATER``. None is
    dropped while the process runs; ``flush`` waits until every queued one is written."""

    def __init__(self, audit: Audit) -> None:
        self._audit = audit
        self._queue: deque[_NodeEvent] = deque()
        self._task: asyncio.Task[None] | None = None

    @property
    def pending(self) -> int:
        """Events queued and not written yet."""
        return len(self._queue)

    def on_node(self, node: str, *, reason: str, message: str, type_: str, key: str) -> None:
        """Queue an Event on node ``node`` (exporter.controller.audit.Audit.on_node)."""
        self._queue.append(_NodeEvent(node, reason, message, type_, key))
        if not self._writing():
            self._task = asyncio.create_task(self._write(), name="events-later")

    def _writing(self) -> bool:
        return self._task is not None and not self._task.done()

    async def _write(self) -> None:
        with write_priority(LATER):
            while self._queue:
                e = self._queue.popleft()
                try:
                    await self._audit.on_node(
                        e.node, reason=e.reason, message=e.message, type_=e.type_, key=e.key
                    )
                except Exception:  # never lose the Events queued behind it
                    log.exception("recording an event failed", extra={"node": e.node})

    async def flush(self) -> None:
        """Wait until every queued Event is written (the writer goes on if the caller is
        cancelled)."""
        while self._writing() or self._queue:
            if not self._writing():
                self._task = asyncio.create_task(self._write(), name="events-later")
            assert self._task is not None
            await asyncio.wait([self._task])

    async def stop(self) -> None:
        """Stop writing; what is still queued is dropped (logged)."""
        if self._task is not None:
            await cancel_and_wait([self._task])
        if self._queue:
            log.warning("events not recorded at shutdown", extra={"events": len(self._queue)})
            self._queue.clear()
