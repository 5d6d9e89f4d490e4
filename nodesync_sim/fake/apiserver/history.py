"""The etcd-like part of the store: the objects, one global revision, and the change history.

- One global resourceVersion counter, bumped by every committed write (as etcd's revision).
- A bounded history of changes: at most about `history_limit` entries, none older than
  `history_seconds` (a real server compacts etcd every 5 minutes and keeps a short window in
  its watch cache, so an old resourceVersion expires even on a quiet server). Every change
  after `floor` is kept, so a watch from any resourceVersion >= floor, a list at an exact
  older version, and a continue token from an older list can be served; older ones are
  expired (410). `compact()` forgets all history.
- Listeners (the watch hub) are told of every committed `Change`.

`History` knows nothing of kinds' rules: it stores what it is given. Thread safety: every
method takes `lock` (an RLock shared with the rest of the store); listeners are called with
the lock held, so they must only schedule work, never call back into the store.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Mapping

from nodesync_sim.fake.apiserver.objects import Change, EventType, JSONObject, StoredObject
from nodesync_sim.fake.apiserver.resources import ALL, ResourceType

Listener = Callable[[Change], None]

#: How long a change is kept by default: kube-apiserver's etcd compaction interval.
DEFAULT_HISTORY_SECONDS = 300.0


def object_key(rt: ResourceType, namespace: str, name: str) -> str:
    """Where an object lives in its kind's bucket: ``namespace/name``, or ``name``."""
    return f"{namespace}/{name}" if rt.namespaced else name


class History:
    """Current objects of every served kind, the revision counter and the change log."""

    def __init__(
        self,
        *,
        history_limit: int = 20_000,
        history_seconds: float | None = DEFAULT_HISTORY_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """`history_seconds` None keeps changes however old; `monotonic` is the clock their
        age is measured by."""
        if history_limit < 1:
            raise ValueError("history_limit must be positive")
        if history_seconds is not None and history_seconds <= 0:
            raise ValueError("history_seconds must be positive")
        self.lock = threading.RLock()
        self.history_limit = history_limit
        self.history_seconds = history_seconds
        self._monotonic = monotonic
        self._rv = 0
        self._objects: dict[str, dict[str, StoredObject]] = {rt.plural: {} for rt in ALL}
        self._log: list[Change] = []
        self._times: list[float] = []  # when each change of _log was committed (monotonic)
        self._log_base = 0  # absolute position of _log[0]
        self._floor = 0  # every change with rv > floor is in the log
        self._listeners: list[Listener] = []

    # ------------------------------------------------------------------ listeners

    def add_listener(self, listener: Listener) -> None:
        with self.lock:
            self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        with self.lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    # ------------------------------------------------------------------ versions

    @property
    def revision(self) -> int:
        """The resourceVersion of the last committed change."""
        return self._rv

    @property
    def floor(self) -> int:
        """The oldest resourceVersion a watch or exact list may still start from."""
        return self._floor

    @property
    def end(self) -> int:
        """The history position right after the last change (where a new watch starts)."""
        return self._log_base + len(self._log)

    def compact(self) -> int:
        """Forget all history: older watches, exact lists and continue tokens expire."""
        with self.lock:
            self._drop(len(self._log))
            self._floor = self._rv
            return self._floor

    def expire(self) -> None:
        """Forget the changes older than `history_seconds` (reads call this before they
        compare a version with `floor`)."""
        with self.lock:
            if self.history_seconds is None or not self._times:
                return
            cutoff = self._monotonic() - self.history_seconds
            self._drop(bisect.bisect_left(self._times, cutoff))

    def _drop(self, count: int) -> None:
        """Forget the `count` oldest changes (lock held)."""
        if count <= 0:
            return
        self._floor = self._log[count - 1].rv
        del self._log[:count]
        del self._times[:count]
        self._log_base += count

    def _trim(self) -> None:
        excess = len(self._log) - self.history_limit
        if excess > max(1, self.history_limit // 4):
            self._drop(excess)
        self.expire()

    # ------------------------------------------------------------------ objects

    def bucket(self, rt: ResourceType) -> Mapping[str, StoredObject]:
        """The current objects of a kind by key (read it with the lock held)."""
        return self._objects[rt.plural]

    def current(self, rt: ResourceType, key: str) -> StoredObject | None:
        with self.lock:
            return self._objects[rt.plural].get(key)

    def commit(
        self,
        rt: ResourceType,
        key: str,
        kind: EventType,
        new: JSONObject | None,
        prev: StoredObject | None,
    ) -> StoredObject:
        """Store `new` (ADDED, MODIFIED) or remove `prev` (DELETED) at the next revision."""
        with self.lock:
            self._rv += 1
            rv = str(self._rv)
            bucket = self._objects[rt.plural]
            if kind == "DELETED":
                assert prev is not None
                stored = StoredObject(
                    {**prev.obj, "metadata": {**prev.obj["metadata"], "resourceVersion": rv}}
                )
                del bucket[key]
            else:
                assert new is not None
                new["metadata"]["resourceVersion"] = rv
                stored = StoredObject(new)
                bucket[key] = stored
            change = Change(self._rv, kind, rt, key, stored, prev)
            self._log.append(change)
            self._times.append(self._monotonic())
            self._trim()
            for listener in self._listeners:
                listener(change)
            return stored

    def snapshot(self, rt: ResourceType, rv: int) -> Mapping[str, StoredObject]:
        """A kind's objects as they were at resourceVersion `rv` (>= floor; lock held)."""
        current = self._objects[rt.plural]
        if rv >= self._rv:
            return current
        snap = dict(current)
        start = bisect.bisect_right(self._log, rv, key=lambda c: c.rv)
        for change in reversed(self._log[start:]):
            if change.rt is not rt:
                continue
            if change.type == "ADDED":
                snap.pop(change.key, None)
            else:
                assert change.prev is not None
                snap[change.key] = change.prev
        return snap

    # ------------------------------------------------------------------ watch cursors

    def position_after(self, rv: int) -> int:
        """The history position of the first change after `rv` (>= floor; lock held)."""
        return self._log_base + bisect.bisect_right(self._log, rv, key=lambda c: c.rv)

    def changes_from(self, cursor: int) -> tuple[list[Change], int, int] | None:
        """Changes from history position `cursor`: (changes, next cursor, current version), or
        None when some of them are no longer kept."""
        with self.lock:
            self.expire()
            if cursor < self._log_base:
                return None
            return self._log[cursor - self._log_base :], self.end, self._rv
