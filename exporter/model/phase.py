"""Pod phase as the node's container runtime sees it.

The API server's pod phase is decided by kubelet; this module derives the same five phases from
what containerd lists, so the two views can be compared (``nodesync_pods{source}``).
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence

from exporter.model.runtime import (
    Container,
    ContainerState,
    PodSandbox,
    RuntimeSnapshot,
    SandboxState,
)


class PodPhase(enum.Enum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


def latest_attempts(containers: Sequence[Container]) -> list[Container]:
    """Keep only the latest attempt of each container name (ties: the newest created_at)."""
    latest: dict[str, Container] = {}
    for c in containers:
        seen = latest.get(c.name)
        if seen is None or (c.attempt, c.created_at) > (seen.attempt, seen.created_at):
            latest[c.name] = c
    return [latest[name] for name in sorted(latest)]


def pod_phase(
    sandbox: PodSandbox | None,
    containers: Sequence[Container],
    runtime_reachable: bool,
) -> PodPhase:
    """Derive a pod's phase from its sandbox and containers.

    Only the latest attempt of each container name counts. The first rule that matches wins:

    1. the runtime cannot be asked → Unknown
    2. any container in state UNKNOWN, or exited without a known exit code → Unknown
    3. any container created but not started (waiting) → Pending
    4. any container exited with a non-zero exit code → Failed
    5. containers exist and all exited with exit code 0 → Succeeded
    6. containers exist, all running or exited with 0 (at least one running) → Running
    7. no container yet: sandbox READY → Pending; sandbox NOTREADY (stopped before any
       container ran) → Failed; no sandbox either → Unknown
    """
    if not runtime_reachable:
        return PodPhase.UNKNOWN
    current = latest_attempts(containers)
    if not current:
        if sandbox is None:
            return PodPhase.UNKNOWN
        return PodPhase.PENDING if sandbox.state is SandboxState.READY else PodPhase.FAILED
    if any(
        c.state is ContainerState.UNKNOWN
        or (c.state is ContainerState.EXITED and c.exit_code is None)
        for c in current
    ):
        return PodPhase.UNKNOWN
    if any(c.state is ContainerState.CREATED for c in current):
        return PodPhase.PENDING
    if any(c.state is ContainerState.EXITED and c.exit_code != 0 for c in current):
        return PodPhase.FAILED
    if all(c.state is ContainerState.EXITED for c in current):
        return PodPhase.SUCCEEDED
    return PodPhase.RUNNING


def pods_by_uid(snapshot: RuntimeSnapshot) -> dict[str, tuple[PodSandbox, list[Container]]]:
    """Group the snapshot by pod uid: the newest sandbox of each pod and that sandbox's containers.

    The newest sandbox is the one with the highest attempt, then the latest created_at. Containers
    of older sandboxes of the same pod are left out: a recreated sandbox restarts its containers'
    attempts at 0, so mixing them would make a stale container look like the latest attempt.
    Containers whose sandbox is not listed belong to no pod here.
    """
    newest: dict[str, PodSandbox] = {}
    for s in snapshot.sandboxes:
        seen = newest.get(s.uid)
        if seen is None or (s.attempt, s.created_at) > (seen.attempt, seen.created_at):
            newest[s.uid] = s
    by_sandbox_id: dict[str, list[Container]] = {s.id: [] for s in newest.values()}
    for c in snapshot.containers:
        group = by_sandbox_id.get(c.pod_sandbox_id)
        if group is not None:
            group.append(c)
    return {uid: (s, by_sandbox_id[s.id]) for uid, s in newest.items()}


def phase_counts(
    snapshot: RuntimeSnapshot | None, last_known_pod_uids: Collection[str]
) -> dict[PodPhase, int]:
    """Count pods per phase; every phase is present (0 when none).

    ``snapshot`` is None when the runtime could not be asked: then every pod of
    ``last_known_pod_uids`` (the pods of the last successful snapshot) counts as Unknown.
    """
    counts = dict.fromkeys(PodPhase, 0)
    if snapshot is None:
        counts[PodPhase.UNKNOWN] = len(set(last_known_pod_uids))
        return counts
    for sandbox, containers in pods_by_uid(snapshot).values():
        counts[pod_phase(sandbox, containers, runtime_reachable=True)] += 1
    return counts
