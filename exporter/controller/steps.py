"""One step of a NodeRollback against the live cluster: re-check, act idempotently, say what
happened (or that the step must wait).

Before every step the Node is read again (an alert is a hint, not a command). A node that is
gone, or is another object under its name (another uid), ends the rollback: nothing left to do
— unless the step found running is the deletion, which then finished before a restart. A node
that became protected, control-plane or another remediator's stops it. A node that recovered
(Ready and its Lease fresh) stops a node rollback and is given back (the executor undoes what
the rollback's record says it did, or may have done). A paused rollback (``spec.paused``) and,
for node rollbacks, the correlated-failure guard make the step wait.

Every action is idempotent, so a step run again after a restart changes nothing the first run
did, and finds out what the first run did:

- CORDON, TAINT: the writer does nothing when the node is already so. Whether this rollback
  made the change is what the intent recorded (the node before the step) says.
- DRAIN, EVICT_POD: the pods bound to the node now that the drain policy evicts
  (exporter.model.drain: not mirrors, DaemonSet pods, finished or terminating ones; bare and
  emptyDir pods as ``--drain.force`` and ``--drain.delete-emptydir-data`` say), each evicted
  once per attempt through the Eviction API; a PodDisruptionBudget's refusal makes the step
  wait and try again with backoff until ``--drain.eviction-timeout`` after its first attempt,
  then it fails (``pdb_blocked``): nothing is forced.
- CLEANUP_RUNTIME: sets the Node annotation ``nodesync.io/cleanup-request`` to the request id
  (the NodeRollback's uid) and waits for the agent's ``nodesync.io/cleanup-status`` with that
  id. When the cleanup cannot run — the agent reports that the runtime cannot be read, or the
  node is unreachable (its Lease is stale or missing) and its agent has not taken the request
  up within ``--cleanup.ack-timeout`` — a node rollback goes on without it (the node is going
  away, its runtime state with it) and says so; a cleanup of orphans fails. An agent on a
  reachable node that does not finish within ``--cleanup.timeout`` fails the step: nothing is
  deleted without a cleanup or proof that none can run, and the rollback says what to do.
- VERIFY: a rolled-back node is cordoned (or gone) and its cleanup was done or skipped with its
  reason; a skipped cleanup on a node nodesync may not delete is reported as needing a person.
  A done cleanup is checked against the runtime, as the agent's answer on the Node reports it
  after a re-list (``remaining``): the step fails (``runtime_not_clean``) while the runtime
  still holds sandboxes or containers nobody wants, or when the answer is no longer there. An
  answer without ``remaining`` (an agent older than the report) is taken as before, and says so.
- DELETE_NODE: deletes the Node with a precondition on the uid it was decided for.

Timeouts count from the step's first attempt (recorded in the status), across retries and
restarts of the controller.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from exporter.controller.audit import ObjectRef, node_ref
from exporter.controller.coordination import Pause
from exporter.controller.settings import ExecutorSettings
from exporter.kube.errors import KubeError
from exporter.kube.writer import EvictionResult, KubeWriter
from exporter.model.cleanup import CleanupState, CleanupStatus, Remaining
from exporter.model.drain import disposition
from exporter.model.guards import never_touch
from exporter.model.health import is_recovered
from exporter.model.kube import TAINT_NODESYNC, NodeInfo, Taint
from exporter.model.rollback import (
    CLEANUP_REQUEST_ANNOTATION,
    CLEANUP_STATUS_ANNOTATION,
    ROLLBACK_TAINT_EFFECT,
    Action,
    NodeRollback,
    Phase,
    PodTarget,
    StepKind,
    StepState,
    StepStatus,
    cleanup_request_id,
)
from exporter.model.rollback_state import (
    BEFORE_ABSENT,
    BEFORE_PRESENT,
    OBSERVED_BEFORE,
    StepResult,
    to_undo,
)

log = logging.getLogger(__name__)

# Why a step failed, waited or skipped, or a rollback stopped (bounded: status reasons, metrics).
NODE_GONE = "node_gone"
RECOVERED = "recovered"
PAUSED = "paused"
CORRELATED_FAILURE = "correlated_failure"
PDB_BLOCKED = "pdb_blocked"
WAITING_FOR_AGENT = "waiting_for_agent"
AGENT_UNREACHABLE = "agent_unreachable"
RUNTIME_UNAVAILABLE = "runtime_unavailable"
CLEANUP_FAILED = "cleanup_failed"
CLEANUP_TIMEOUT = "cleanup_timeout"
NOT_VERIFIED = "not_verified"
RUNTIME_NOT_CLEAN = "runtime_not_clean"
API_ERROR = "api_error"
ALERT_RESOLVED = "alert_resolved"

REASONS = (
    NODE_GONE,
    RECOVERED,
    PAUSED,
    CORRELATED_FAILURE,
    PDB_BLOCKED,
    WAITING_FOR_AGENT,
    AGENT_UNREACHABLE,
    RUNTIME_UNAVAILABLE,
    CLEANUP_FAILED,
    CLEANUP_TIMEOUT,
    NOT_VERIFIED,
    RUNTIME_NOT_CLEAN,
    API_ERROR,
    ALERT_RESOLVED,
)

ROLLBACK_TAINT = Taint(TAINT_NODESYNC, ROLLBACK_TAINT_EFFECT)

#: How long a PodDisruptionBudget's refusal waits before the next eviction attempt, at most.
PDB_RETRY_MAX = 60.0


@dataclass(frozen=True, slots=True)
class Wait:
    """The step cannot go on now: try again in ``retry_in`` seconds."""

    reason: str
    message: str
    retry_in: float


@dataclass(frozen=True, slots=True)
class Go:
    """The step may act; ``observed`` is the node as the step's intent records it (None: keep
    what an earlier attempt recorded)."""

    observed: dict[str, str] | None = field(default=None)


class StepError(Exception):
    """A step's API call failed; ``target`` is what the step was about (its uid, for the Event)."""

    def __init__(self, error: KubeError, target: ObjectRef) -> None:
        super().__init__(str(error))
        self.error = error
        self.target = target


def cleanup_status(node: NodeInfo) -> CleanupStatus | None:
    """The agent's answer on the Node, if it is well-formed."""
    return CleanupStatus.from_json(node.annotations.get(CLEANUP_STATUS_ANNOTATION, ""))


def request_id(rollback: NodeRollback) -> str:
    """The cleanup request of the rollback as it stands: its uid, and a suffix when an
    escalation asks the agent again."""
    return cleanup_request_id(rollback.uid, max(1, rollback.status.observed_generation))


def _pods_text(remaining: Remaining) -> str:
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
        f"{remaining.containers} containers nobody wants{_pods_text(remaining)}"
    )


def _before(present: bool) -> dict[str, str]:
    return {OBSERVED_BEFORE: BEFORE_PRESENT if present else BEFORE_ABSENT}


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
        self._writer = writer
        self._settings = settings
        self._lease = lease_renew_time
        self._pause = correlated_failure or Pause()
        self._clock = clock
        self._poll = poll_interval

    async def _node(self, rollback: NodeRollback) -> NodeInfo | None:
        try:
            return await self._writer.get_node(rollback.spec.node)
        except KubeError as exc:
            raise StepError(exc, node_ref(rollback)) from exc

    # ------------------------------------------------------------------ re-check

    async def precheck(self, rollback: NodeRollback, index: int) -> StepResult | Wait | Go:
        """Before step ``index`` acts: stop the rollback, make it wait, or let it go."""
        spec, step = rollback.spec, rollback.status.steps[index]
        node = await self._node(rollback)
        if node is None or (spec.node_uid and node.uid != spec.node_uid):
            return self._gone(rollback, step, node)
        refusal = never_touch(node)
        if refusal is not None:
            return StepResult(
                StepState.SKIPPED,
                f"stopped: {refusal.detail}",
                reason=refusal.reason,
                stop=Phase.CANCELLED,
            )
        if spec.paused:
            return Wait(PAUSED, "held: spec.paused is true", self._poll)
        deleting = step.kind is StepKind.DELETE_NODE and step.state is StepState.RUNNING
        if (
            spec.action is Action.ROLLBACK_NODE
            and not deleting
            and is_recovered(
                node.conditions,
                self._lease(node.name),
                self._clock(),
                self._settings.policy.node_monitor_grace_period,
            )
        ):
            return StepResult(
                StepState.SKIPPED,
                f"node {node.name} recovered (Ready, Lease fresh): given back",
                reason=RECOVERED,
                stop=Phase.CANCELLED,
            )
        if (
            spec.action is Action.ROLLBACK_NODE
            and step.state is StepState.PENDING
            and self._pause.paused
        ):
            return Wait(
                CORRELATED_FAILURE,
                "established nodes are failing together: control-plane trouble suspected, "
                "every rollback waits",
                self._poll,
            )
        if step.state is StepState.RUNNING:
            return Go(None)  # resumed: keep what the first attempt saw before acting
        if step.kind is StepKind.CORDON:
            return Go(_before(node.unschedulable))
        if step.kind is StepKind.TAINT:
            return Go(_before(any(t.key == ROLLBACK_TAINT.key for t in node.taints)))
        return Go({})

    def _gone(self, rollback: NodeRollback, step: StepStatus, node: NodeInfo | None) -> StepResult:
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

    # ------------------------------------------------------------------ the steps

    async def execute(self, rollback: NodeRollback, index: int) -> StepResult | Wait:
        """Do step ``index`` (its intent recorded). A failed API call raises StepError."""
        kind = rollback.status.steps[index].kind
        if kind is StepKind.EVICT_POD:
            return await self._evict_pod(rollback, index)
        node = await self._node(rollback)
        if node is None:
            return self._gone(rollback, rollback.status.steps[index], None)
        try:
            if kind is StepKind.CORDON:
                return await self._cordon(rollback, index, node)
            if kind is StepKind.TAINT:
                return await self._taint(rollback, index, node)
            if kind is StepKind.DRAIN:
                return await self._drain(rollback, index, node)
            if kind is StepKind.CLEANUP_RUNTIME:
                return await self._cleanup(rollback, index, node)
            if kind is StepKind.VERIFY:
                return self._verify(rollback, node)
            result = await self._writer.delete_node(node.name, node.uid)
            return StepResult(StepState.DONE, result.detail)
        except KubeError as exc:
            raise StepError(exc, node_ref(rollback)) from exc

    def _made_before(self, rollback: NodeRollback, index: int) -> bool:
        """The intent says the change was absent before this step: it is this rollback's."""
        observed = rollback.status.steps[index].observed
        return observed.get(OBSERVED_BEFORE) == BEFORE_ABSENT

    async def _cordon(self, rollback: NodeRollback, index: int, node: NodeInfo) -> StepResult:
        result = await self._writer.cordon(node.name)
        if result.changed:
            return StepResult(StepState.DONE, "cordoned the node", made_change=True)
        mine = self._made_before(rollback, index)
        detail = "cordoned the node (before a restart)" if mine else result.detail
        return StepResult(StepState.DONE, detail, made_change=mine)

    async def _taint(self, rollback: NodeRollback, index: int, node: NodeInfo) -> StepResult:
        result = await self._writer.add_taint(node.name, ROLLBACK_TAINT)
        if result.changed:
            return StepResult(StepState.DONE, result.detail, made_change=True)
        mine = self._made_before(rollback, index)
        detail = (
            f"tainted the node {ROLLBACK_TAINT.key} (before a restart)" if mine else result.detail
        )
        return StepResult(StepState.DONE, detail, made_change=mine)

    def _eviction_wait(
        self, rollback: NodeRollback, index: int, blocked: list[str], total: int
    ) -> StepResult | Wait:
        step = rollback.status.steps[index]
        timeout = self._settings.eviction_timeout
        started = step.started_at if step.started_at is not None else self._clock()
        what = f"{len(blocked)} of {total} pods ({', '.join(sorted(blocked)[:10])})"
        if self._clock() - started >= timeout:
            return StepResult(
                StepState.FAILED,
                f"a PodDisruptionBudget refused the eviction of {what} for {timeout:g} s; "
                "nothing was forced",
                reason=PDB_BLOCKED,
                stop=Phase.FAILED,
                action_required=f"node {rollback.spec.node} is cordoned, {what} could not be "
                "evicted: review the PodDisruptionBudgets, then drain or uncordon the node",
            )
        # Back off as the refusal lasts: every poll at first, at most every PDB_RETRY_MAX.
        retry = min(PDB_RETRY_MAX, max(self._poll, (self._clock() - started) / 4))
        return Wait(PDB_BLOCKED, f"a PodDisruptionBudget refuses the eviction of {what}", retry)

    async def _drain(self, rollback: NodeRollback, index: int, node: NodeInfo) -> StepResult | Wait:
        pods = await self._writer.list_pods_on_node(node.name)
        policy = self._settings.policy.drain
        skipped = Counter(r for p in pods if (r := disposition(p, policy)) is not None)
        targets = [p for p in pods if disposition(p, policy) is None]
        results: list[EvictionResult] = []
        for pod in targets:
            results.append(await self._writer.evict(pod.namespace, pod.name, pod.uid, timeout=0))
        blocked = [
            f"{p.namespace}/{p.name}"
            for p, r in zip(targets, results, strict=True)
            if r.outcome == "blocked"
        ]
        if blocked:
            return self._eviction_wait(rollback, index, blocked, len(targets))
        evicted = sum(1 for r in results if r.outcome == "evicted")
        left = ", ".join(f"{n} {reason}" for reason, n in sorted(skipped.items()))
        return StepResult(
            StepState.DONE,
            f"evicted {evicted} pods; {len(pods) - len(targets)} left alone"
            f"{f' ({left})' if left else ''}; {len(targets) - evicted} already gone",
        )

    async def _evict_pod(self, rollback: NodeRollback, index: int) -> StepResult | Wait:
        target = rollback.spec.pod
        assert target is not None
        ref = ObjectRef("Pod", target.namespace, target.name, target.uid)
        try:
            pods = await self._writer.list_pods_on_node(rollback.spec.node)
            pod = next(
                (p for p in pods if (p.namespace, p.name) == (target.namespace, target.name)),
                None,
            )
            if pod is None:
                return StepResult(
                    StepState.DONE,
                    f"pod {target.namespace}/{target.name} is no longer on node "
                    f"{rollback.spec.node}",
                )
            ref = ObjectRef("Pod", pod.namespace, pod.name, pod.uid)
            result = await self._writer.evict(
                pod.namespace, pod.name, target.uid or pod.uid, timeout=0
            )
        except KubeError as exc:
            raise StepError(exc, ref) from exc  # the Event goes on the pod, with its uid
        if result.outcome == "blocked":
            return self._eviction_wait(rollback, index, [f"{pod.namespace}/{pod.name}"], 1)
        about = PodTarget(pod.namespace, pod.name, pod.uid)
        if result.outcome == "skipped":
            return StepResult(StepState.SKIPPED, result.detail, pod=about)
        return StepResult(StepState.DONE, result.detail, pod=about)

    def _cannot_clean(self, rollback: NodeRollback, reason: str, message: str) -> StepResult:
        """A cleanup that cannot run: a node rollback goes on without it; a cleanup of
        orphans fails."""
        if rollback.spec.action is Action.ROLLBACK_NODE:
            return StepResult(
                StepState.SKIPPED, f"{message}; the node is being rolled back", reason=reason
            )
        return StepResult(StepState.FAILED, message, reason=reason, stop=Phase.FAILED)

    async def _cleanup(
        self, rollback: NodeRollback, index: int, node: NodeInfo
    ) -> StepResult | Wait:
        request = request_id(rollback)
        status = cleanup_status(node)
        step = rollback.status.steps[index]
        started = step.started_at if step.started_at is not None else self._clock()
        elapsed = self._clock() - started
        if status is not None and status.id == request:
            if status.state is CleanupState.DONE:
                return StepResult(
                    StepState.DONE,
                    f"the agent removed {status.removed_sandboxes} sandboxes and "
                    f"{status.removed_containers} containers and left {status.skipped} items a "
                    f"re-check no longer confirmed{_remaining_text(status)} (request {request})",
                )
            if status.state is CleanupState.UNAVAILABLE:
                return self._cannot_clean(
                    rollback,
                    RUNTIME_UNAVAILABLE,
                    f"the agent cannot reach the runtime: {status.error or 'no error given'}",
                )
            if status.state is CleanupState.FAILED:
                return self._cannot_clean(
                    rollback,
                    CLEANUP_FAILED,
                    f"the agent's cleanup failed: {status.error or 'no error given'}",
                )
            if elapsed >= self._settings.cleanup_timeout:  # taken up, never finished
                return self._cleanup_timed_out(rollback, request)
            return Wait(WAITING_FOR_AGENT, f"the agent is cleaning up ({request})", self._poll)
        if node.annotations.get(CLEANUP_REQUEST_ANNOTATION) != request:
            await self._writer.annotate_node(node.name, {CLEANUP_REQUEST_ANNOTATION: request})
        if elapsed >= self._settings.cleanup_ack_timeout and self._unreachable(node):
            return self._cannot_clean(
                rollback,
                AGENT_UNREACHABLE,
                f"node {node.name} is unreachable (no fresh Lease) and its agent did not take up "
                f"cleanup {request} within {self._settings.cleanup_ack_timeout:g} s",
            )
        if elapsed >= self._settings.cleanup_timeout:
            return self._cleanup_timed_out(rollback, request)
        return Wait(WAITING_FOR_AGENT, f"waiting for the agent to take up {request}", self._poll)

    def _unreachable(self, node: NodeInfo) -> bool:
        """No Lease, or one older than the grace period: the node (and its agent) is dark."""
        renewed = self._lease(node.name)
        grace = self._settings.policy.node_monitor_grace_period
        return renewed is None or self._clock() - renewed > grace

    def _cleanup_timed_out(self, rollback: NodeRollback, request: str) -> StepResult:
        """A reachable node's agent did not clean up in time: stop (nothing is deleted without
        a cleanup or proof that none can run) and say what to do."""
        name = rollback.spec.node
        return StepResult(
            StepState.FAILED,
            f"the agent of node {name} did not finish cleanup {request} within "
            f"{self._settings.cleanup_timeout:g} s",
            reason=CLEANUP_TIMEOUT,
            stop=Phase.FAILED,
            action_required=f"node {name} is cordoned and drained but its runtime was not "
            "cleaned up: check its nodesync agent (the cleanup-request annotation shows what it "
            "was asked), then delete or uncordon the node",
        )

    def _verify(self, rollback: NodeRollback, node: NodeInfo) -> StepResult:
        cleanup = next(
            (s for s in rollback.status.steps if s.kind is StepKind.CLEANUP_RUNTIME), None
        )
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
        return self._verify_runtime(rollback, node, what)

    def _verify_runtime(self, rollback: NodeRollback, node: NodeInfo, what: str) -> StepResult:
        """A done cleanup: what the agent's answer says the runtime still holds."""
        request = request_id(rollback)
        status = cleanup_status(node)
        if status is None or status.id != request or status.state is not CleanupState.DONE:
            return self._not_clean(
                rollback, f"the agent's answer to cleanup {request} is no longer on the node"
            )
        remaining = status.remaining
        if remaining is None:
            return StepResult(
                StepState.DONE,
                f"node {node.name} is {what} (its agent does not report what the runtime "
                "still holds)",
            )
        if not remaining.empty:
            return self._not_clean(
                rollback,
                f"after cleanup {request} the runtime still holds {remaining.sandboxes} "
                f"sandboxes and {remaining.containers} containers nobody wants"
                f"{_pods_text(remaining)}",
            )
        return StepResult(
            StepState.DONE, f"node {node.name} is {what}; its runtime holds nothing unwanted"
        )

    def _not_clean(self, rollback: NodeRollback, message: str) -> StepResult:
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

    async def event_target(self, rollback: NodeRollback, index: int) -> ObjectRef:
        """What the Event of step ``index``'s outcome is about: the pod of an eviction (with
        its uid, read now when the spec has none, so ``kubectl describe pod`` shows it), else
        the node."""
        target = rollback.spec.pod
        if rollback.status.steps[index].kind is not StepKind.EVICT_POD or target is None:
            return node_ref(rollback)
        uid = target.uid
        if not uid:
            try:
                pods = await self._writer.list_pods_on_node(rollback.spec.node)
            except KubeError:
                pods = []
            uid = next(
                (p.uid for p in pods if (p.namespace, p.name) == (target.namespace, target.name)),
                "",
            )
        return ObjectRef("Pod", target.namespace, target.name, uid)

    # ------------------------------------------------------------------ giving back

    async def undo(self, rollback: NodeRollback) -> list[str]:
        """Give a node back: remove the taint and the cordon this rollback made (or may have
        made, as its record says). Returns what was given back, also what was found given back
        already (by a run that died before recording it)."""
        kinds = to_undo(rollback.status)
        undone: list[str] = []
        name = rollback.spec.node
        try:
            if StepKind.TAINT in kinds:
                result = await self._writer.remove_taint(name, ROLLBACK_TAINT.key)
                key = ROLLBACK_TAINT.key
                undone.append(f"removed taint {key}" if result.changed else f"no taint {key}")
            if StepKind.CORDON in kinds:
                result = await self._writer.uncordon(name)
                undone.append("uncordoned" if result.changed else "not cordoned")
        except KubeError as exc:
            raise StepError(exc, node_ref(rollback)) from exc
        return undone
