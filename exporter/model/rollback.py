"""Rollbacks: what the hook decided to do about a node, and how far it got.

A decision becomes a ``NodeRollback`` object in the API server (nodesync.io/v1alpha1,
cluster-scoped; exporter.kube.noderollbacks converts it): its spec says what was decided and
why, its status is the step state machine (exporter.model.rollback_state). Every controller
replica, kubectl and GitOps see the same record; the leader advances it, each write carrying the
resourceVersion it read, so a step is started by exactly one writer.

A plan (:class:`Plan`) is what the planner makes of one alert before anything exists; a
:class:`NodeRollback` is the object made of it.
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

# nodesync's own taint on a node it rolls back (the key is exporter.model.kube.TAINT_NODESYNC).
ROLLBACK_TAINT_EFFECT = "NoSchedule"

# The cleanup handshake with the node's agent: the controller sets the request annotation to a
# request id (the NodeRollback's uid); the agent answers in the status annotation (JSON with the
# same id).
CLEANUP_REQUEST_ANNOTATION = "nodesync.io/cleanup-request"
CLEANUP_STATUS_ANNOTATION = "nodesync.io/cleanup-status"

# Labels on every NodeRollback, for selectors (kubectl get noderollbacks -l ...).
NODE_LABEL = "nodesync.io/node"
NODE_UID_LABEL = "nodesync.io/node-uid"
ACTION_LABEL = "nodesync.io/action"


class Action(enum.Enum):
    """The ``nodesync_action`` label of an alert."""

    ROLLBACK_NODE = "rollback_node"
    EVICT_POD = "evict_pod"
    CLEANUP_ORPHANS = "cleanup_orphans"
    NONE = "none"


#: How much of a node an action takes: a stronger action on a node with a weaker one running
#: escalates that rollback (exporter.model.decision); a weaker or equal one joins it.
STRENGTH: Mapping[Action, int] = {
    Action.NONE: 0,
    Action.EVICT_POD: 1,
    Action.CLEANUP_ORPHANS: 2,
    Action.ROLLBACK_NODE: 3,
}


class StepKind(enum.Enum):
    CORDON = "cordon"  # spec.unschedulable = true
    TAINT = "taint"  # nodesync.io/rollback:NoSchedule
    DRAIN = "drain"  # evict every evictable pod on the node (live list at execution time)
    EVICT_POD = "evict_pod"  # evict one pod (namespace/name, uid checked)
    CLEANUP_RUNTIME = "cleanup_runtime"  # ask the node's agent to remove drift's orphans
    VERIFY = "verify"  # the node is back in a known state (or gone)
    DELETE_NODE = "delete_node"  # only with --rollback.delete-nodes


#: The steps that only keep new pods off a node: they run as soon as a rollback is decided, and
#: the ones after them (which evict, clean up, delete) wait for a concurrency slot.
FENCING_STEPS = frozenset({StepKind.CORDON, StepKind.TAINT})
#: The reason of a node rollback whose fencing is done and whose next step waits for a slot.
QUEUED = "queued"
#: The reason of a step skipped because the rollback's node (its uid) is gone.
NODE_GONE = "node_gone"


class StepState(enum.Enum):
    PENDING = "pending"
    RUNNING = "running"  # started: its effect may have happened (intent before effect)
    DONE = "done"
    SKIPPED = "skipped"  # nothing to do any more (re-checked live state), or not possible
    FAILED = "failed"


FINISHED_STEP_STATES = frozenset({StepState.DONE, StepState.SKIPPED, StepState.FAILED})


class Phase(enum.Enum):
    """A NodeRollback's phase (``status.phase``)."""

    PENDING = "Pending"  # decided, no step started
    RUNNING = "Running"  # a step runs
    WAITING = "Waiting"  # between attempts (the agent, a PodDisruptionBudget, a pause); queued
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"  # stopped before it finished: the node recovered, is protected ...


ACTIVE_PHASES = frozenset({Phase.PENDING, Phase.RUNNING, Phase.WAITING})


@dataclass(frozen=True, slots=True)
class Step:
    kind: StepKind
    node: str
    namespace: str = ""
    pod: str = ""
    pod_uid: str = ""


@dataclass(frozen=True, slots=True)
class Plan:
    """What the planner made of one alert (before any object exists)."""

    action: Action
    node: str
    steps: tuple[Step, ...]
    alert_fingerprint: str
    alert_starts_at: float
    wave: str = ""
    node_uid: str = ""
    alertname: str = ""


@dataclass(frozen=True, slots=True)
class Refusal:
    """A guard (or the planner) declined to act; ``reason`` is a bounded metric label value."""

    reason: str
    detail: str


def rollback_steps(action: Action, *, delete_node: bool) -> tuple[StepKind, ...]:
    """The steps of an action, in order."""
    if action is Action.ROLLBACK_NODE:
        kinds = [
            StepKind.CORDON,
            StepKind.TAINT,
            StepKind.DRAIN,
            StepKind.CLEANUP_RUNTIME,
            StepKind.VERIFY,
        ]
        if delete_node:
            kinds.append(StepKind.DELETE_NODE)
        return tuple(kinds)
    if action is Action.EVICT_POD:
        return (StepKind.EVICT_POD,)
    if action is Action.CLEANUP_ORPHANS:
        return (StepKind.CLEANUP_RUNTIME, StepKind.VERIFY)
    return ()


# ---------------------------------------------------------------- the object


@dataclass(frozen=True, slots=True)
class Trigger:
    """An alert episode that asked for (or joined) a rollback."""

    alertname: str
    fingerprint: str
    starts_at: float


@dataclass(frozen=True, slots=True)
class PodTarget:
    namespace: str
    name: str
    uid: str = ""


@dataclass(frozen=True, slots=True)
class Verdicts:
    """What the guards saw when they allowed the rollback (``spec.decision``)."""

    decided_at: float
    decided_by: str = ""
    node_created_at: float = 0.0
    failing_since: float | None = None
    absolute_used: int = 0
    absolute_limit: int = 0
    window_seconds: float = 0.0
    wave_size: int = 0
    wave_used: int = 0
    wave_limit: int = 0
    established_nodes: int = 0
    established_failing: int = 0


@dataclass(frozen=True, slots=True)
class RollbackSpec:
    node: str
    node_uid: str
    action: Action
    trigger: Trigger
    decision: Verdicts
    wave: str = ""
    delete_node: bool = False
    pod: PodTarget | None = None
    paused: bool = False  # an operator's hold: no further step starts while true


@dataclass(frozen=True, slots=True)
class StepStatus:
    kind: StepKind
    state: StepState = StepState.PENDING
    reason: str = ""
    message: str = ""
    attempts: int = 0
    started_at: float | None = None  # the first attempt: timeouts count from here
    finished_at: float | None = None
    # The step changed the node (it cordoned or tainted it): a cancelled rollback undoes it.
    made_change: bool = False
    # What the step saw right before its effect (recorded with the intent), e.g. whether the
    # node was already cordoned: after a crash it tells whether the effect was this rollback's.
    observed: Mapping[str, str] = field(default_factory=dict)
    not_before: float | None = None  # while waiting: the next attempt's time
    request: str = ""  # CLEANUP_RUNTIME: the request id sent to the agent


@dataclass(frozen=True, slots=True)
class RollbackStatus:
    phase: Phase = Phase.PENDING
    reason: str = ""
    message: str = ""
    steps: tuple[StepStatus, ...] = ()
    triggers: tuple[Trigger, ...] = ()
    observed_generation: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    # Set when the rollback ended without bringing the node into a known state, e.g. a
    # cleanup that could not run on a node nodesync may not delete: what a person must do.
    action_required: str = ""

    @property
    def step(self) -> str:
        """The current step (the first unfinished one), or the last one once all finished."""
        for s in self.steps:
            if s.state not in FINISHED_STEP_STATES:
                return s.kind.value
        return self.steps[-1].kind.value if self.steps else ""


@dataclass(frozen=True, slots=True)
class NodeRollback:
    name: str
    spec: RollbackSpec
    status: RollbackStatus
    uid: str = ""
    resource_version: str = ""
    generation: int = 1
    created_at: float = 0.0

    @property
    def active(self) -> bool:
        return self.status.phase in ACTIVE_PHASES

    @property
    def node_level(self) -> bool:
        """It takes the node (or its runtime) as a whole: at most one such is active per node."""
        return self.spec.action in (Action.ROLLBACK_NODE, Action.CLEANUP_ORPHANS)

    @property
    def node_gone(self) -> bool:
        """It deleted its node, or found it gone (that uid): whatever a lagging watch of the
        nodes still shows, that node exists no more."""
        return any(
            (s.kind is StepKind.DELETE_NODE and s.state is StepState.DONE)
            or (s.state is StepState.SKIPPED and s.reason == NODE_GONE)
            for s in self.status.steps
        )


# ---------------------------------------------------------------- names

_MAX_NAME = 253
_NOT_NAME = re.compile(r"[^a-z0-9.-]+")


def rollback_name(
    node: str,
    node_uid: str,
    action: Action,
    fingerprint: str,
    starts_at: float,
    target: str = "",
    *,
    attempt: int = 1,
) -> str:
    """The NodeRollback's name: the node's name and a hash of what identifies the decision (the
    node's uid, the action and its target, the alert episode, and from the second on which
    rollback of that episode it is). Two replicas deciding the same thing make the same name,
    so the second create gets 409 AlreadyExists."""
    decision = f"{node_uid}\0{action.value}\0{target}\0{fingerprint}\0{starts_at!r}"
    if attempt > 1:
        decision += f"\0{attempt}"
    digest = hashlib.sha256(decision.encode()).hexdigest()[:10]
    head = _NOT_NAME.sub("-", node.lower()).strip(".-")[: _MAX_NAME - 12] or "node"
    return f"{head}-{digest}"


def cleanup_request_id(rollback_uid: str, attempt: int = 1) -> str:
    """The cleanup request id: the NodeRollback's uid (globally unique, so an answer an earlier
    rollback left on the node is never taken for this one's); ``-2``... for a later request
    of the same rollback."""
    return rollback_uid if attempt <= 1 else f"{rollback_uid}-{attempt}"
