"""How the registry deletes: preconditions, graceful pod deletion, finalizers, namespaces.

- Preconditions (uid, resourceVersion) that do not hold answer 409 Conflict.
- A pod bound to a node and not finished is deleted gracefully: it gets deletionTimestamp
  (now plus the grace period) and deletionGracePeriodSeconds, and stays Terminating until
  someone deletes it with grace 0 (its kubelet, once it stopped the containers). Nothing
  expires by itself: past its deletionTimestamp the pod is still there, as on a real server
  whose kubelet is gone. A later delete may shorten a pending grace period, never extend it.
  Unscheduled or finished pods are deleted at once. Every pod deletion that removes the pod
  writes it with its deletionTimestamp and grace 0 first, as the real registry does: watchers
  see a MODIFIED, then the DELETED.
- An object with finalizers is only marked (deletionTimestamp, grace 0) and is removed when
  its last finalizer goes (see `Registry`).
- Deleting a namespace removes the objects in it at once; the default namespaces are
  protected (403).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from exporter.model.rfc3339 import format_time, parse_time
from nodesync_sim.fake.apiserver import errors
from nodesync_sim.fake.apiserver.history import History, object_key
from nodesync_sim.fake.apiserver.objects import StoredObject
from nodesync_sim.fake.apiserver.resources import ALL, NAMESPACES, ResourceType
from nodesync_sim.fake.apiserver.strategy import DEFAULT_GRACE_SECONDS

PROTECTED_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class DeleteOptions:
    grace_period_seconds: int | None = None
    precondition_uid: str | None = None
    precondition_resource_version: str | None = None
    propagation_policy: str | None = None


@dataclass(frozen=True, slots=True)
class DeleteResult:
    obj: StoredObject  # the last state (deleted) or the current state (deletion pending)
    deleted: bool


def check_preconditions(rt: ResourceType, current: StoredObject, options: DeleteOptions) -> None:
    name = current.name
    if options.precondition_uid is not None and options.precondition_uid != current.uid:
        raise errors.conflict(
            rt,
            name,
            f"Precondition failed: UID in precondition: {options.precondition_uid}, "
            f"UID in object meta: {current.uid}",
        )
    want_rv = options.precondition_resource_version
    if want_rv is not None and want_rv != current.resource_version:
        raise errors.conflict(
            rt,
            name,
            f"Precondition failed: ResourceVersion in precondition: {want_rv}, "
            f"ResourceVersion in meta: {current.resource_version}",
        )
    if rt is NAMESPACES and name in PROTECTED_NAMESPACES:
        raise errors.namespace_forbidden(name, "this namespace may not be deleted")


def grace_seconds(rt: ResourceType, current: StoredObject, options: DeleteOptions) -> int:
    """How long the deletion waits: 0 unless a scheduled, unfinished pod."""
    if not rt.graceful_delete:
        return 0
    obj = current.obj
    spec = obj.get("spec") or {}
    if not spec.get("nodeName") or (obj.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return 0  # never scheduled or already finished: nothing to wait for
    if options.grace_period_seconds is not None:
        return max(0, options.grace_period_seconds)
    return int(spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS))


class Deleter:
    """Deletes from a `History`, with server time from `clock` (Unix seconds)."""

    def __init__(self, history: History, clock: Callable[[], float]) -> None:
        self._history = history
        self._clock = clock

    def delete(
        self, rt: ResourceType, current: StoredObject, options: DeleteOptions
    ) -> DeleteResult:
        """Delete `current` (preconditions already checked; lock held)."""
        history = self._history
        meta = current.metadata
        key = object_key(rt, current.namespace, current.name)
        grace = grace_seconds(rt, current, options)
        if grace > 0:
            return self._delete_gracefully(rt, key, current, grace)
        if rt.graceful_delete and meta.get("deletionGracePeriodSeconds") != 0:
            # As the real registry does: the object is written with its deletion first (a
            # MODIFIED that watchers see), then removed.
            current = self._delete_gracefully(rt, key, current, 0).obj
            meta = current.metadata
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp") and meta.get("deletionGracePeriodSeconds") == 0:
                return DeleteResult(current, False)
            held = current.to_dict()
            held["metadata"].setdefault("deletionTimestamp", format_time(self._clock()))
            held["metadata"]["deletionGracePeriodSeconds"] = 0
            return DeleteResult(history.commit(rt, key, "MODIFIED", held, current), False)
        if rt is NAMESPACES:
            self._delete_namespace_contents(current.name)
        return DeleteResult(history.commit(rt, key, "DELETED", None, current), True)

    def _delete_gracefully(
        self, rt: ResourceType, key: str, current: StoredObject, grace: int
    ) -> DeleteResult:
        meta = current.metadata
        old_grace = meta.get("deletionGracePeriodSeconds")
        if meta.get("deletionTimestamp") and old_grace is not None:
            if old_grace <= grace and grace > 0:
                return DeleteResult(current, False)  # can shorten a pending deletion, not extend
            started = _seconds(meta["deletionTimestamp"]) - old_grace
        else:
            started = float(int(self._clock()))
        deadline = started + grace
        updated = current.to_dict()
        updated["metadata"]["deletionTimestamp"] = format_time(deadline)
        updated["metadata"]["deletionGracePeriodSeconds"] = grace
        return DeleteResult(self._history.commit(rt, key, "MODIFIED", updated, current), False)

    def _delete_namespace_contents(self, namespace: str) -> None:
        prefix = namespace + "/"
        history = self._history
        for rt in ALL:
            if not rt.namespaced:
                continue
            bucket = history.bucket(rt)
            for key in [k for k in bucket if k.startswith(prefix)]:
                history.commit(rt, key, "DELETED", None, bucket[key])


def _seconds(timestamp: str) -> float:
    """A timestamp the server wrote, as Unix seconds."""
    seconds = parse_time(timestamp)
    if seconds is None:
        raise errors.internal(f"stored timestamp {timestamp!r} is not RFC 3339")
    return seconds
