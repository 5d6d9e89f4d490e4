"""One step of a plan against the live cluster: re-check, act idempotently, say what happened.

Before every step the Node is read again (an alert is a hint, not a command): a node that is
gone, or was created again under its name after the plan was made (its creation time is later
than the plan's: the API server's clock and the controller's are assumed to agree within the
minutes a failing node needs to raise an alert), ends the plan (nothing left to do); a node
that became protected, control-plane or another remediator's stops it; a node that recovered
(Ready and its Lease fresh) before it was drained stops a rollback. Every action is idempotent,
so a step that is run again after a restart changes nothing the first run did:

- CORDON, TAINT: the writer does nothing when the node is already so (the step is DONE).
- DRAIN: lists the pods bound to the node now and evicts each evictable one (not DaemonSet or
  mirror pods, not finished or terminating ones) through the Eviction API. A PodDisruptionBudget
  that still refuses after ``--eviction-timeout`` fails the step (``pdb_blocked``): nothing is
  forced.
- EVICT_POD: a pod that is gone (or no longer on the node) is done.
- CLEANUP_RUNTIME: sets the Node annotation ``nodesync.io/cleanup-request`` to a request id
  derived from the plan id (setting it again is a no-op) and waits, up to ``--cleanup-timeout``,
  for the agent's ``nodesync.io/cleanup-status`` with that id.
- VERIFY: the agent reported the cleanup done, and a rolled-back node is cordoned (or gone).
- DELETE_NODE: deletes the Node with a precondition on the uid just read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from exporter.controller.settings import ExecutorSettings
from exporter.kube.errors import KubeError
from exporter.kube.writer import EvictionResult, KubeWriter
from exporter.model.cleanup import CleanupState, CleanupStatus
from exporter.model.guards import is_recovered, never_touch
from exporter.model.kube import TAINT_NODESYNC, NodeInfo, PodInfo, Taint
from exporter.model.rollback import (
    CLEANUP_REQUEST_ANNOTATION,
    CLEANUP_STATUS_ANNOTATION,
    ROLLBACK_TAINT_EFFECT,
    Action,
    Plan,
    PlanState,
    Step,
    StepKind,
    StepState,
    cleanup_request_id,
)

log = logging.getLogger(__name__)

# Why a step failed or a plan stopped (bounded; in the journal and in Events).
NODE_GONE = "node_gone"
RECOVERED = "recovered"
PDB_BLOCKED = "pdb_blocked"
CLEANUP_FAILED = "cleanup_failed"
CLEANUP_TIMEOUT = "cleanup_timeout"
NOT_VERIFIED = "not_verified"
API_ERROR = "api_error"

# The detail of a CORDON step that cordoned the node itself (undo uncordons only then).
CORDONED_BY_NODESYNC = "cordoned the node"

ROLLBACK_TAINT = Taint(TAINT_NODESYNC, ROLLBACK_TAINT_EFFECT)


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """What a step's Event is about."""

    kind: str  # Node or Pod
    namespace: str
    name: str
    uid: str


class StepError(Exception):
    """A step's API call failed; ``target`` is what the step was about, as far as it was read
    (its uid, for the Event, once the object was read)."""

    def __init__(self, error: KubeError, target: ObjectRef) -> None:
        super().__init__(str(error))
        self.error = error
        self.target = target


@dataclass(frozen=True, slots=True)
class StepOutcome:
    state: StepState
    detail: str
    target: ObjectRef
    reason: str = ""  # set when the step failed or the plan stops
    stop: PlanState | None = None  # end the plan in this state after this step


def cleanup_status(node: NodeInfo) -> CleanupStatus | None:
    """The agent's answer on the Node, if it is well-formed."""
    return CleanupStatus.from_json(node.annotations.get(CLEANUP_STATUS_ANNOTATION, ""))


def node_ref(node: NodeInfo | None, name: str) -> ObjectRef:
    return ObjectRef("Node", "", name, node.uid if node is not None else "")


def _evictable(pod: PodInfo) -> bool:
    return (
        pod.owner_kind != "DaemonSet"
        and not pod.mirror
        and not pod.terminal
        and pod.deletion_timestamp is None
    )


class StepRunner:
    """Runs one step of a plan. ``lease_renew_time(node)`` reads the node's Lease from the
    controller's cache (the Node itself is read live before every step)."""

    def __init__(
        self,
        writer: KubeWriter,
        settings: ExecutorSettings,
        *,
        lease_renew_time: Callable[[str], float | None],
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        cleanup_poll_interval: float = 1.0,
    ) -> None:
        self._writer = writer
        self._settings = settings
        self._lease = lease_renew_time
        self._clock = clock
        self._monotonic = monotonic
        self._sleep = sleep
        self._poll = cleanup_poll_interval

    async def run(self, plan_id: int, plan: Plan, planned_at: float, step: Step) -> StepOutcome:
        """Re-check the live state, then do the step. A failed API call is raised as a
        StepError (the caller retries what a retry can fix: every step is safe to repeat)."""
        target = (
            ObjectRef("Pod", step.namespace, step.pod, step.pod_uid)
            if step.kind is StepKind.EVICT_POD
            else node_ref(None, step.node)
        )
        try:
            node = await self._writer.get_node(step.node)
        except KubeError as exc:
            raise StepError(exc, target) from exc
        if node is not None and step.kind is not StepKind.EVICT_POD:
            target = node_ref(node, step.node)
        try:
            return await self._run(plan_id, plan, planned_at, step, node)
        except KubeError as exc:
            raise StepError(exc, target) from exc

    async def _run(
        self, plan_id: int, plan: Plan, planned_at: float, step: Step, node: NodeInfo | None
    ) -> StepOutcome:
        if node is None or node.created_at > planned_at:
            return self._gone(step, node)
        refusal = never_touch(node)
        if refusal is not None:
            return StepOutcome(
                StepState.SKIPPED,
                f"stopped: {refusal.detail}",
                node_ref(node, step.node),
                reason=refusal.reason,
                stop=PlanState.CANCELLED,
            )
        if (
            plan.action is Action.ROLLBACK_NODE
            and step.kind in (StepKind.CORDON, StepKind.TAINT, StepKind.DRAIN)
            and is_recovered(
                node.conditions,
                self._lease(node.name),
                self._clock(),
                self._settings.policy.node_monitor_grace_period,
            )
        ):
            return StepOutcome(
                StepState.SKIPPED,
                f"node {node.name} recovered (Ready, Lease fresh) before it was drained",
                node_ref(node, step.node),
                reason=RECOVERED,
                stop=PlanState.CANCELLED,
            )
        request = cleanup_request_id(plan_id)
        if step.kind is StepKind.CORDON:
            return await self._cordon(node)
        if step.kind is StepKind.TAINT:
            return await self._taint(node)
        if step.kind is StepKind.DRAIN:
            return await self._drain(node)
        if step.kind is StepKind.EVICT_POD:
            return await self._evict_pod(node, step)
        if step.kind is StepKind.CLEANUP_RUNTIME:
            return await self._cleanup(node, request)
        if step.kind is StepKind.VERIFY:
            return self._verify(plan, node, request)
        return await self._delete(node)

    # ------------------------------------------------------------------ steps

    def _gone(self, step: Step, node: NodeInfo | None) -> StepOutcome:
        what = "is gone" if node is None else "was created again after the plan was made"
        ref = node_ref(None, step.node)
        if step.kind is StepKind.VERIFY:
            return StepOutcome(StepState.DONE, f"node {step.node} {what}", ref)
        return StepOutcome(
            StepState.SKIPPED,
            f"node {step.node} {what}: nothing left to do",
            ref,
            reason=NODE_GONE,
            stop=PlanState.DONE,
        )

    async def _cordon(self, node: NodeInfo) -> StepOutcome:
        result = await self._writer.cordon(node.name)
        detail = CORDONED_BY_NODESYNC if result.changed else result.detail
        return StepOutcome(StepState.DONE, detail, node_ref(node, node.name))

    async def _taint(self, node: NodeInfo) -> StepOutcome:
        result = await self._writer.add_taint(node.name, ROLLBACK_TAINT)
        return StepOutcome(StepState.DONE, result.detail, node_ref(node, node.name))

    async def _drain(self, node: NodeInfo) -> StepOutcome:
        pods = await self._writer.list_pods_on_node(node.name)
        targets = [p for p in pods if _evictable(p)]
        results = await asyncio.gather(
            *(self._evict(p.namespace, p.name, p.uid) for p in targets), return_exceptions=True
        )
        for r in results:
            if isinstance(r, BaseException):
                raise r  # every eviction finished; the step is retried as a whole
        evictions = [r for r in results if isinstance(r, EvictionResult)]
        blocked = [
            f"{p.namespace}/{p.name}"
            for p, r in zip(targets, evictions, strict=True)
            if r.outcome == "blocked"
        ]
        ref = node_ref(node, node.name)
        if blocked:
            return StepOutcome(
                StepState.FAILED,
                f"{len(blocked)} of {len(targets)} pods could not be evicted: a "
                f"PodDisruptionBudget refused for {self._settings.eviction_timeout:g} s "
                f"({', '.join(sorted(blocked)[:10])}); nothing was forced",
                ref,
                reason=PDB_BLOCKED,
                stop=PlanState.FAILED,
            )
        evicted = sum(1 for r in evictions if r.outcome == "evicted")
        return StepOutcome(
            StepState.DONE,
            f"evicted {evicted} pods; {len(pods) - len(targets)} left alone (DaemonSet, mirror, "
            f"finished or already terminating); {len(targets) - evicted} already gone",
            ref,
        )

    async def _evict(self, namespace: str, name: str, uid: str) -> EvictionResult:
        return await self._writer.evict(
            namespace, name, uid, timeout=self._settings.eviction_timeout
        )

    async def _evict_pod(self, node: NodeInfo, step: Step) -> StepOutcome:
        pods = await self._writer.list_pods_on_node(node.name)
        pod = next((p for p in pods if (p.namespace, p.name) == (step.namespace, step.pod)), None)
        ref = ObjectRef("Pod", step.namespace, step.pod, pod.uid if pod is not None else "")
        if pod is None:
            return StepOutcome(
                StepState.DONE,
                f"pod {step.namespace}/{step.pod} is no longer on node {node.name}",
                ref,
            )
        try:
            result = await self._evict(pod.namespace, pod.name, step.pod_uid or pod.uid)
        except KubeError as exc:
            raise StepError(exc, ref) from exc  # the Event goes on the pod, with its uid
        if result.outcome == "blocked":
            return StepOutcome(
                StepState.FAILED,
                result.detail + "; nothing was forced",
                ref,
                reason=PDB_BLOCKED,
                stop=PlanState.FAILED,
            )
        if result.outcome == "skipped":
            return StepOutcome(StepState.SKIPPED, result.detail, ref)
        return StepOutcome(StepState.DONE, result.detail, ref)

    async def _cleanup(self, node: NodeInfo, request: str) -> StepOutcome:
        name = node.name
        status = cleanup_status(node)
        if status is None or status.id != request:
            await self._writer.annotate_node(name, {CLEANUP_REQUEST_ANNOTATION: request})
        deadline = self._monotonic() + self._settings.cleanup_timeout
        current: NodeInfo | None = node
        while True:
            assert current is not None
            status = cleanup_status(current)
            ref = node_ref(current, name)
            if status is not None and status.id == request:
                if status.state is CleanupState.DONE:
                    return StepOutcome(
                        StepState.DONE,
                        f"the agent removed {status.removed_sandboxes} sandboxes and "
                        f"{status.removed_containers} containers and left {status.skipped} "
                        f"items a re-check no longer confirmed (request {request})",
                        ref,
                    )
                return StepOutcome(
                    StepState.FAILED,
                    f"the agent's cleanup failed: {status.error or 'no error given'}",
                    ref,
                    reason=CLEANUP_FAILED,
                    stop=PlanState.FAILED,
                )
            remaining = deadline - self._monotonic()
            if remaining <= 0:
                return StepOutcome(
                    StepState.FAILED,
                    f"the agent did not report cleanup {request} within "
                    f"{self._settings.cleanup_timeout:g} s",
                    ref,
                    reason=CLEANUP_TIMEOUT,
                    stop=PlanState.FAILED,
                )
            await self._sleep(min(self._poll, remaining))
            current = await self._writer.get_node(name)
            if current is None or current.uid != node.uid:
                return self._gone(Step(StepKind.CLEANUP_RUNTIME, name), current)

    def _verify(self, plan: Plan, node: NodeInfo, request: str) -> StepOutcome:
        status = cleanup_status(node)
        problems = []
        if status is None or status.id != request or status.state is not CleanupState.DONE:
            problems.append(f"no successful cleanup {request} reported")
        if plan.action is Action.ROLLBACK_NODE and not node.unschedulable:
            problems.append("the node is not cordoned")
        ref = node_ref(node, node.name)
        if problems:
            return StepOutcome(
                StepState.FAILED,
                "; ".join(problems),
                ref,
                reason=NOT_VERIFIED,
                stop=PlanState.FAILED,
            )
        what = "cordoned and cleaned up" if plan.action is Action.ROLLBACK_NODE else "cleaned up"
        return StepOutcome(StepState.DONE, f"node {node.name} is {what}", ref)

    async def _delete(self, node: NodeInfo) -> StepOutcome:
        result = await self._writer.delete_node(node.name, node.uid)
        return StepOutcome(StepState.DONE, result.detail, node_ref(node, node.name))


def describe_error(exc: KubeError) -> str:
    return f"API error {exc.code} {exc.reason}: {exc.message}"[:500]
