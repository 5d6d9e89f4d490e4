"""The node-local cleanup: which drift items the agent removes, and the status it reports.

The controller asks by setting the Node annotation ``nodesync.io/cleanup-request`` to a request
id; the agent answers with ``nodesync.io/cleanup-status``, JSON with the same id (see
docs/cleanup.md). Both annotation names live in :mod:`exporter.model.rollback`.

What is removed is decided twice. The request is answered from the agent's latest drift (what
the metrics showed when the controller decided). Right before acting, drift is computed again
from a fresh runtime read and a fresh list of the node's pods from the API server, and only the
items found in BOTH are removed (:func:`select`): anything that changed in between (a pod that
is desired again, a sandbox already gone, a sandbox that is no longer superseded) is skipped.

On a node whose kubelet is gone (:func:`exporter.model.drift.kubelet_gone`), a pod being deleted
stops being desired at its ``deletion_timestamp`` and the agent is the one left to remove its
sandboxes. A cleanup then waits (:attr:`Selection.waiting`) while the runtime holds such a pod
whose deletion is not due yet, or whose sandboxes the drift the request is answered from does not
show yet, so that it removes them rather than answer while they still run.

After acting, the agent lists the runtime again and reports what it still holds that nobody
wants (:func:`remaining_after`): the controller's verify step passes only when that is nothing.

The agent's own pod (``own_pod_uid``) is spared throughout: never waited for, never acted on,
never counted as remaining. Deleted while the kubelet is gone (its DaemonSet updated during a
rollback), it stays Terminating and still runs: waiting for it would never end, and removing it
would end the agent before it answers.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from exporter.model.drift import Drift, DriftItem, DriftKind, desired_until
from exporter.model.kube import PodInfo
from exporter.model.rfc3339 import format_time, parse_time
from exporter.model.rollback import CLEANUP_REQUEST_ANNOTATION, CLEANUP_STATUS_ANNOTATION
from exporter.model.runtime import RuntimeSnapshot

#: The kinds a cleanup removes. missing_sandbox (nothing to remove) and kubelet_only (kubelet's
#: own directories) are never touched.
CLEANABLE = (DriftKind.ORPHAN_CONTAINER, DriftKind.ORPHAN_SANDBOX, DriftKind.STALE_SANDBOX)
#: Kinds whose pod must not be desired (a stale sandbox's pod is desired by definition: only its
#: superseded, not-ready sandboxes are removed, never its newest one).
_ORPHANS = frozenset({DriftKind.ORPHAN_CONTAINER, DriftKind.ORPHAN_SANDBOX})


#: How many pods a status names in ``remaining.pods`` at most (the counts are always complete).
REMAINING_PODS_MAX = 10


class CleanupState(enum.Enum):
    RUNNING = "running"  # taken up: the agent acknowledges the request and works on it
    DONE = "done"
    FAILED = "failed"  # a runtime call failed part way
    UNAVAILABLE = "unavailable"  # the runtime cannot be read: nothing was cleaned


#: States that answer a request (RUNNING only acknowledges it).
ANSWERS = frozenset({CleanupState.DONE, CleanupState.FAILED, CleanupState.UNAVAILABLE})


@dataclass(frozen=True, slots=True)
class Remaining:
    """What the runtime still holds, after a cleanup, that nobody wants (:func:`remaining_after`):
    counts of cleanable items (orphan and stale sandboxes, orphan containers). ``pods``:
    ``namespace/name`` (or the uid when the runtime gives no name) of the first
    :data:`REMAINING_PODS_MAX` pods they belong to, sorted."""

    sandboxes: int = 0
    containers: int = 0
    pods: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return self.sandboxes == 0 and self.containers == 0

    @classmethod
    def of_items(cls, items: Sequence[DriftItem]) -> Remaining:
        pods = sorted({f"{i.namespace}/{i.name}" if i.name else i.pod_uid for i in items})
        containers = sum(1 for i in items if i.kind is DriftKind.ORPHAN_CONTAINER)
        return cls(len(items) - containers, containers, tuple(pods[:REMAINING_PODS_MAX]))

    def to_dict(self) -> dict[str, Any]:
        return {"sandboxes": self.sandboxes, "containers": self.containers, "pods": [*self.pods]}

    @classmethod
    def from_dict(cls, data: object) -> Remaining | None:
        """None when ``data`` is not a remaining object (absent: an agent that does not report
        it)."""
        if not isinstance(data, dict):
            return None
        counts = [data.get("sandboxes"), data.get("containers")]
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts):
            return None
        raw = data.get("pods")
        pods = tuple(p for p in raw if isinstance(p, str)) if isinstance(raw, list) else ()
        return cls(int(data["sandboxes"]), int(data["containers"]), pods)


@dataclass(frozen=True, slots=True)
class CleanupStatus:
    """The agent's answer to one request (the ``nodesync.io/cleanup-status`` annotation).
    ``remaining`` is None for answers other than ``done`` and from agents that do not report
    it (the key is absent)."""

    id: str
    state: CleanupState
    removed_sandboxes: int
    removed_containers: int
    finished_at: float
    error: str = ""
    skipped: int = 0  # items of the request's drift that the re-check left alone
    remaining: Remaining | None = None

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "id": self.id,
            "state": self.state.value,
            "removedSandboxes": self.removed_sandboxes,
            "removedContainers": self.removed_containers,
            "skipped": self.skipped,
            "finishedAt": format_time(self.finished_at),
            "error": self.error,
        }
        if self.remaining is not None:
            data["remaining"] = self.remaining.to_dict()
        return json.dumps(data, separators=(",", ":"))

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
            remaining=Remaining.from_dict(data.get("remaining")),
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
    """``act``: remove these, containers first. ``skipped``: (item, why) left alone.
    ``waiting``: (pod, why) whose deletion the cleanup waits for before it acts at all."""

    act: tuple[DriftItem, ...]
    skipped: tuple[tuple[DriftItem, str], ...]
    waiting: tuple[tuple[PodInfo, str], ...] = ()


def desired_uids(
    pods: Iterable[PodInfo], now: float, *, kubelet_gone: bool = False
) -> frozenset[str]:
    """Uids of pods that are desired at ``now`` (see exporter.model.drift)."""
    out = set()
    for pod in pods:
        until = desired_until(pod, kubelet_gone=kubelet_gone)
        if until is None or now < until:
            out.add(pod.uid)
    return frozenset(out)


def held_pods(snapshot: RuntimeSnapshot) -> frozenset[str]:
    """The pod uids the runtime holds a sandbox or a container of."""
    return frozenset(s.uid for s in snapshot.sandboxes) | {c.pod_uid for c in snapshot.containers}


def _waiting(
    requested: Drift,
    fresh: Drift,
    live_pods: Iterable[PodInfo],
    now: float,
    held: Collection[str],
    own_pod_uid: str,
) -> list[tuple[PodInfo, str]]:
    """Pods being deleted, with the kubelet gone, that the runtime holds (``held``: the pod uids
    of its sandboxes and containers) and that this cleanup cannot remove yet but will: their
    deletion is not due, or the requested drift does not show their sandboxes yet."""
    asked = {_key(i) for i in requested.items}
    unseen = {i.pod_uid for i in fresh.items if i.kind in CLEANABLE and _key(i) not in asked}
    waiting: list[tuple[PodInfo, str]] = []
    for pod in sorted(live_pods, key=lambda p: (p.namespace, p.name, p.uid)):
        until = desired_until(pod, kubelet_gone=True)
        if until is None or pod.uid not in held or (own_pod_uid and pod.uid == own_pod_uid):
            continue
        if now < until:
            waiting.append((pod, f"its deletion is due in {until - now:.0f} s"))
        elif pod.uid in unseen:
            waiting.append((pod, "the drift the request is answered from does not show it yet"))
    return waiting


def select(
    requested: Drift,
    fresh: Drift,
    live_pods: Iterable[PodInfo],
    now: float,
    *,
    kubelet_gone: bool = False,
    held: Collection[str] = (),
    own_pod_uid: str = "",
) -> Selection:
    """The cleanable items of ``requested`` that ``fresh`` (computed right now from a fresh
    runtime read and the live pod list) still reports the same way. With ``kubelet_gone``
    (as checked right now), also the pods whose deletion the cleanup must wait for. The pod
    ``own_pod_uid`` (the agent's own; empty: none) is never acted on nor waited for."""
    live_pods = tuple(live_pods)
    still = {_key(i) for i in fresh.items}
    desired = desired_uids(live_pods, now, kubelet_gone=kubelet_gone)
    act: list[DriftItem] = []
    skipped: list[tuple[DriftItem, str]] = []
    for kind in CLEANABLE:
        for item in requested.of(kind):
            if own_pod_uid and item.pod_uid == own_pod_uid:
                skipped.append((item, "the agent's own pod"))
            elif item.kind in _ORPHANS and item.pod_uid in desired:
                skipped.append((item, "its pod is desired now"))
            elif _key(item) not in still:
                skipped.append((item, "no longer drifted"))
            else:
                act.append(item)
    waiting = _waiting(requested, fresh, live_pods, now, held, own_pod_uid) if kubelet_gone else []
    return Selection(tuple(act), tuple(skipped), tuple(waiting))


def remaining_after(
    requested: Drift,
    relisted: Drift,
    live_pods: Iterable[PodInfo],
    now: float,
    *,
    kubelet_gone: bool,
    own_pod_uid: str = "",
) -> Remaining:
    """What a runtime listed again after a cleanup (``relisted``: its drift, computed with the
    same ``kubelet_gone``) still holds that nobody wants. With the kubelet gone, every cleanable
    item of the re-list: nobody else will remove them. With a live kubelet, only what the
    cleanup selected from the drift it acted on (``requested``) and the re-list still finds: an
    item orphaned since that drift was taken (a pod whose deletion the kubelet just confirmed)
    is the kubelet's to collect, as the cleanup itself leaves it. The pod ``own_pod_uid`` (the
    agent's own, which the cleanup spares) never remains."""
    if kubelet_gone:
        items = [i for kind in CLEANABLE for i in relisted.of(kind)]
        return Remaining.of_items([i for i in items if not own_pod_uid or i.pod_uid != own_pod_uid])
    chosen = select(requested, relisted, live_pods, now, own_pod_uid=own_pod_uid)
    return Remaining.of_items(chosen.act)
