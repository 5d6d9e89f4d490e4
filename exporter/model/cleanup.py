"""The node-local cleanup: which drift items the agent removes, and the status it reports.

The controller asks by setting the Node annotation ``nodesync.io/cleanup-request`` to a request
id; the agent answers with ``nodesync.io/cleanup-status``, JSON with the same id (see
docs/cleanup.md). Both annotation names live in :mod:`exporter.model.rollback`.

What is removed is decided twice. The request is answered from the agent's latest drift (what
the metrics showed when the controller decided). Right before acting, drift is computed again
from a fresh runtime read and a fresh list of the node's pods from the API server, and only the
items found in BOTH are removed (:func:`select`): anything that changed in between (a pod that
is desired again, a sandbox already gone, a sandbox that is no longer superseded) is skipped.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from exporter.model.drift import Drift, DriftItem, DriftKind, desired_until
from exporter.model.kube import PodInfo
from exporter.model.rfc3339 import format_time, parse_time
from exporter.model.rollback import CLEANUP_REQUEST_ANNOTATION, CLEANUP_STATUS_ANNOTATION

#: The kinds a cleanup removes. missing_sandbox (nothing to remove) and kubelet_only (kubelet's
#: own directories) are never touched.
CLEANABLE = (DriftKind.ORPHAN_CONTAINER, DriftKind.ORPHAN_SANDBOX, DriftKind.STALE_SANDBOX)
#: Kinds whose pod must not be desired (a stale sandbox's pod is desired by definition: only its
#: superseded, not-ready sandboxes are removed, never its newest one).
_ORPHANS = frozenset({DriftKind.ORPHAN_CONTAINER, DriftKind.ORPHAN_SANDBOX})


class CleanupState(enum.Enum):
    RUNNING = "running"  # taken up: the agent acknowledges the request and works on it
    DONE = "done"
    FAILED = "failed"  # a runtime call failed part way
    UNAVAILABLE = "unavailable"  # the runtime cannot be read: nothing was cleaned


#: States that answer a request (RUNNING only acknowledges it).
ANSWERS = frozenset({CleanupState.DONE, CleanupState.FAILED, CleanupState.UNAVAILABLE})


@dataclass(frozen=True, slots=True)
class CleanupStatus:
    """The agent's answer to one request (the ``nodesync.io/cleanup-status`` annotation)."""

    id: str
    state: CleanupState
    removed_sandboxes: int
    removed_containers: int
    finished_at: float
    error: str = ""
    skipped: int = 0  # items of the request's drift that the re-check left alone

    def to_json(self) -> str:
        return json.dumps(
            {
                "id": self.id,
                "state": self.state.value,
                "removedSandboxes": self.removed_sandboxes,
                "removedContainers": self.removed_containers,
                "skipped": self.skipped,
                "finishedAt": format_time(self.finished_at),
                "error": self.error,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> CleanupStatus | None:
        """The status in an annotation; None when it is absent or not one."""
        try:
            data: Any = json.loads(text) if text else None
        except ValueError:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("id"), str):
            return None
        try:
            state = CleanupState(data.get("state"))
        except ValueError:
            return None

        def number(key: str) -> int:
            value = data.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else 0

        finished_at = parse_time(data.get("finishedAt")) or 0.0
        error = data.get("error")
        return cls(
            id=data["id"],
            state=state,
            removed_sandboxes=number("removedSandboxes"),
            removed_containers=number("removedContainers"),
            finished_at=finished_at,
            error=error if isinstance(error, str) else "",
            skipped=number("skipped"),
        )


def pending_request(annotations: Mapping[str, str]) -> str | None:
    """The request id the agent has not answered yet, if any (level triggered: a request whose
    id is already in the status with an answer is answered, however often the Node is seen
    again; one that is only acknowledged is not)."""
    request = annotations.get(CLEANUP_REQUEST_ANNOTATION, "")
    if not request:
        return None
    status = CleanupStatus.from_json(annotations.get(CLEANUP_STATUS_ANNOTATION, ""))
    if status is not None and status.id == request and status.state in ANSWERS:
        return None
    return request


def _key(item: DriftItem) -> tuple[DriftKind, str, str, str]:
    return (item.kind, item.pod_uid, item.sandbox_id, item.container_id)


@dataclass(frozen=True, slots=True)
class Selection:
    """``act``: remove these, containers first. ``skipped``: (item, why) left alone."""

    act: tuple[DriftItem, ...]
    skipped: tuple[tuple[DriftItem, str], ...]


def desired_uids(pods: Iterable[PodInfo], now: float) -> frozenset[str]:
    """Uids of pods that are desired at ``now`` (see exporter.model.drift)."""
    out = set()
    for pod in pods:
        until = desired_until(pod)
        if until is None or now < until:
            out.add(pod.uid)
    return frozenset(out)


def select(requested: Drift, fresh: Drift, live_pods: Iterable[PodInfo], now: float) -> Selection:
    """The cleanable items of ``requested`` that ``fresh`` (computed right now from a fresh
    runtime read and the live pod list) still reports the same way."""
    still = {_key(i) for i in fresh.items}
    desired = desired_uids(live_pods, now)
    act: list[DriftItem] = []
    skipped: list[tuple[DriftItem, str]] = []
    for kind in CLEANABLE:
        for item in requested.of(kind):
            if item.kind in _ORPHANS and item.pod_uid in desired:
                skipped.append((item, "its pod is desired now"))
            elif _key(item) not in still:
                skipped.append((item, "no longer drifted"))
            else:
                act.append(item)
    return Selection(tuple(act), tuple(skipped))
