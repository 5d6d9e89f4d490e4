"""Rollback plans: what the hook decided to do for one alert, step by step.

A plan is made once per alert episode (fingerprint + startsAt), stored in the journal, and
executed step by step; each step's state is stored too, so a restarted controller resumes
where it stopped. Every step is idempotent and re-checks live state before acting.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

# nodesync's own taint on a node it rolls back (the key is exporter.model.kube.TAINT_NODESYNC).
ROLLBACK_TAINT_EFFECT = "NoSchedule"

# The cleanup handshake with the node's agent: the controller sets the request annotation to a
# request id; the agent answers in the status annotation (JSON with the same id).
CLEANUP_REQUEST_ANNOTATION = "nodesync.io/cleanup-request"
CLEANUP_STATUS_ANNOTATION = "nodesync.io/cleanup-status"


class Action(enum.Enum):
    """The ``nodesync_action`` label of an alert."""

    ROLLBACK_NODE = "rollback_node"
    EVICT_POD = "evict_pod"
    CLEANUP_ORPHANS = "cleanup_orphans"
    NONE = "none"


class StepKind(enum.Enum):
    CORDON = "cordon"  # spec.unschedulable = true
    TAINT = "taint"  # nodesync.io/rollback:NoSchedule
    DRAIN = "drain"  # evict every evictable pod on the node (live list at execution time)
    EVICT_POD = "evict_pod"  # evict one pod (namespace/name, uid checked)
    CLEANUP_RUNTIME = "cleanup_runtime"  # ask the node's agent to remove drift's orphans
    VERIFY = "verify"  # the node is back in a known state (or gone)
    DELETE_NODE = "delete_node"  # only with --delete-nodes


class StepState(enum.Enum):
    PENDING = "pending"
    DONE = "done"
    SKIPPED = "skipped"  # nothing to do any more (re-checked live state)
    FAILED = "failed"


class PlanState(enum.Enum):
    PENDING = "pending"  # accepted, not started
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    REFUSED = "refused"  # a guard said no; the reason is recorded
    DRY_RUN = "dry_run"  # planned and recorded, nothing changed
    CANCELLED = "cancelled"  # the alert resolved before the plan started


@dataclass(frozen=True, slots=True)
class Step:
    kind: StepKind
    node: str
    namespace: str = ""
    pod: str = ""
    pod_uid: str = ""


@dataclass(frozen=True, slots=True)
class Plan:
    action: Action
    node: str
    steps: tuple[Step, ...]
    alert_fingerprint: str
    alert_starts_at: float
    wave: str = ""


@dataclass(frozen=True, slots=True)
class Refusal:
    """A guard (or the planner) declined to act; ``reason`` is a bounded metric label value."""

    reason: str
    detail: str


def cleanup_request_id(plan_id: object) -> str:
    """The cleanup request id of a plan: derived from the plan id only, so setting the request
    annotation again after a restart writes the same value (a no-op)."""
    return f"nodesync-plan-{plan_id}"
