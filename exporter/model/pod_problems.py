"""What the API server says about the pods bound to this node: phase counts and per-pod problems.

The API server's pod status is kubelet's last report. Comparing it with the runtime's own view
(exporter.model.phase) shows a node whose status updates lag or stop. The problems found here
become sparse series: a series exists only while its problem lasts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

from exporter.model.kube import PodInfo
from exporter.model.phase import PodPhase
from exporter.model.terminations import (
    REASON_COMPLETED,
    REASON_UNKNOWN,
    bucket_reason,
)

#: Default time a pod may stay Pending before it is reported (normal starts make no series).
DEFAULT_PENDING_GRACE_SECONDS: Final = 60.0

REASON_OTHER: Final = "other"

#: The bounded set of ``reason`` values for waiting containers, in a stable order.
WAITING_REASONS: Final = (
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "InvalidImageName",
    "ContainerCreating",
    "PodInitializing",
    REASON_OTHER,
)

#: The bounded set of ``reason`` values for a container's last termination that is a problem.
LAST_TERMINATED_REASONS: Final = ("OOMKilled", "Error", REASON_OTHER)

ProblemKind = Literal["pending", "waiting", "last_terminated"]


@dataclass(frozen=True, slots=True)
class PodProblem:
    """One problem of one pod (``container`` is empty for ``pending``).

    ``since`` is set for ``pending`` only: when the pod started waiting (scheduled time when known,
    else creation time). ``restart_count`` is set for ``last_terminated`` only.
    """

    kind: ProblemKind
    uid: str
    namespace: str
    pod: str
    container: str = ""
    reason: str = ""
    since: float | None = None
    restart_count: int = 0


def api_phase_counts(pods: Iterable[PodInfo]) -> dict[str, int]:
    """Count pods per API phase; every phase is present (0 when none).

    A pod uid listed twice counts once (the last entry wins). An empty phase (status not written
    yet) is Pending, which is what the API server defaults it to; a phase outside the five known
    ones is Unknown.
    """
    counts = {phase.value: 0 for phase in PodPhase}
    for pod in _unique(pods):
        counts[_phase(pod.phase)] += 1
    return counts


def pod_problems(
    pods: Iterable[PodInfo],
    now: float,
    *,
    pending_grace_seconds: float = DEFAULT_PENDING_GRACE_SECONDS,
) -> list[PodProblem]:
    """The problems of the pods the API server has bound to this node, sorted by identity.

    - ``pending``: the pod's phase is Pending and it has been waiting for more than
      ``pending_grace_seconds`` since it was scheduled (or created, when the scheduled time is
      unknown).
    - ``waiting``: a container (init containers included) is waiting with a reason, bucketed
      into :data:`WAITING_REASONS`.
    - ``last_terminated``: a container's last termination has a reason other than Completed,
      bucketed into :data:`LAST_TERMINATED_REASONS`; carries the container's restart count.

    Pods being deleted and terminal pods (Succeeded, Failed) have no problems. Neither has a
    Pending pod still within its grace period: its containers are normally ContainerCreating or
    PodInitializing then, and reporting them would make a short-lived series per pod start.
    Two pods with the same namespace and name (an old object still cached next to its
    replacement) would give two series with the same labels; only the newer pod's are kept.
    """
    found: dict[tuple[str, str, str, str], tuple[float, PodProblem]] = {}
    for pod in _unique(pods):
        for problem in _problems_of(pod, now, pending_grace_seconds):
            key = (problem.namespace, problem.pod, problem.kind, problem.container)
            seen = found.get(key)
            if seen is None or pod.created_at > seen[0]:
                found[key] = (pod.created_at, problem)
    return [found[key][1] for key in sorted(found)]


def pending_since(pod: PodInfo) -> float:
    """When a pod started waiting: its scheduled time when known, else its creation time."""
    return pod.scheduled_at if pod.scheduled_at is not None else pod.created_at


def waiting_reason(reason: str) -> str:
    """Bucket a container's waiting reason into :data:`WAITING_REASONS`."""
    return reason if reason in WAITING_REASONS else REASON_OTHER


def last_terminated_reason(reason: str, exit_code: int | None) -> str | None:
    """Bucket a last termination into :data:`LAST_TERMINATED_REASONS`; None when there was no
    last termination (neither reason nor exit code) or it completed (Completed, or exit code 0
    without a reason)."""
    bucket = bucket_reason(reason, exit_code)
    if bucket in (REASON_COMPLETED, REASON_UNKNOWN):
        return None
    return bucket if bucket in LAST_TERMINATED_REASONS else REASON_OTHER


def _problems_of(pod: PodInfo, now: float, grace: float) -> list[PodProblem]:
    if pod.deletion_timestamp is not None or pod.terminal:
        return []
    problems: list[PodProblem] = []
    if _phase(pod.phase) == _PENDING:
        since = pending_since(pod)
        if now - since <= grace:
            return []
        problems.append(PodProblem("pending", pod.uid, pod.namespace, pod.name, since=since))
    for c in pod.containers:
        if c.state == "waiting" and c.waiting_reason:
            problems.append(
                PodProblem(
                    "waiting",
                    pod.uid,
                    pod.namespace,
                    pod.name,
                    container=c.name,
                    reason=waiting_reason(c.waiting_reason),
                )
            )
        last = last_terminated_reason(c.last_terminated_reason, c.last_terminated_exit_code)
        if last is not None:
            problems.append(
                PodProblem(
                    "last_terminated",
                    pod.uid,
                    pod.namespace,
                    pod.name,
                    container=c.name,
                    reason=last,
                    restart_count=c.restart_count,
                )
            )
    return problems


#: Read by every cycle for every pod: built once (an enum's members are slow to walk).
_KNOWN_PHASES: Final = frozenset(p.value for p in PodPhase)
_PENDING: Final = PodPhase.PENDING.value
_UNKNOWN: Final = PodPhase.UNKNOWN.value


def _phase(phase: str) -> str:
    if not phase:
        return _PENDING
    return phase if phase in _KNOWN_PHASES else _UNKNOWN


def _unique(pods: Iterable[PodInfo]) -> list[PodInfo]:
    by_uid: dict[str, PodInfo] = {}
    for pod in pods:
        by_uid[pod.uid] = pod
    return list(by_uid.values())
