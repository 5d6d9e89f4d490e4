"""What a step says besides its StepResult: that it must wait (:class:`Wait`), that it may act
(:class:`Go`), that its API call failed (:class:`StepError`), and the bounded reasons of a
step that failed, waited or skipped, or of a rollback that stopped."""

from __future__ import annotations

from dataclasses import dataclass, field

from exporter.controller.audit import ObjectRef
from exporter.kube.errors import KubeError
from exporter.model.rollback import NODE_GONE as NODE_GONE

# Why a step failed, waited or skipped, or a rollback stopped (bounded: status reasons, metrics).
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
