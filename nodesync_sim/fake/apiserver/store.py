"""The in-memory object store the server and tests use: one facade over the parts that do the
work.

- `history.History`: the etcd-like part (objects, one global resourceVersion, a bounded
  change history, compaction, watch listeners);
- `reads`: lists (selectors, pagination, reads at a version) and watch starts over it;
- `registry.Registry`: the per-kind write rules (`strategy`, `validation`, `deletion`).

Thread safety: every public method takes `lock` (an RLock), so tests may call the store from
their own thread while the server serves from its loop. Hold `lock` to make several calls
atomic. Listeners (the watch hub) are called with each `Change` while the lock is held; they
must only schedule work, never call back into the store.

Besides the API-shaped methods (`create_object`, `list_objects`, ...), the store has short
ones for tests (`create`, `get`, `try_get`, `list`, `replace`, `patch`, `delete`) that take a
resource's plural and plain dicts, and return copies.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from nodesync_sim.fake.apiserver import errors, reads
from nodesync_sim.fake.apiserver.deletion import DeleteOptions, DeleteResult
from nodesync_sim.fake.apiserver.history import DEFAULT_HISTORY_SECONDS, History, Listener
from nodesync_sim.fake.apiserver.objects import Change, JSONObject, StoredObject
from nodesync_sim.fake.apiserver.patch import STRATEGIC_MERGE_PATCH
from nodesync_sim.fake.apiserver.reads import ListResult, WatchStart
from nodesync_sim.fake.apiserver.registry import Registry
from nodesync_sim.fake.apiserver.resources import NAMESPACES, ResourceType, by_plural
from nodesync_sim.fake.apiserver.selectors import (
    FieldSelector,
    LabelSelector,
    parse_field_selector,
    parse_label_selector,
)

__all__ = [
    "DEFAULT_NAMESPACES",
    "DeleteOptions",
    "DeleteResult",
    "ListResult",
    "Store",
    "WatchStart",
]

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class Store:
    """In-memory objects of every served kind, with history and watch hooks.

    `clock` is the server's time in Unix seconds (creation and deletion timestamps);
    `monotonic` measures the age of changes (`history_seconds`, see `history`)."""

    def __init__(
        self,
        *,
        history_limit: int = 20_000,
        history_seconds: float | None = DEFAULT_HISTORY_SECONDS,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        namespaces: tuple[str, ...] = DEFAULT_NAMESPACES,
    ) -> None:
        self._history = History(
            history_limit=history_limit, history_seconds=history_seconds, monotonic=monotonic
        )
        self._registry = Registry(self._history, clock)
        self.clock = clock
        self.lock = self._history.lock
        self.history_limit = history_limit
        for ns in namespaces:
            self.create_object(NAMESPACES, "", {"metadata": {"name": ns}}, from_api=False)

    # ------------------------------------------------------------------ wiring

    def add_listener(self, listener: Listener) -> None:
        self._history.add_listener(listener)

    def remove_listener(self, listener: Listener) -> None:
        self._history.remove_listener(listener)

    # ------------------------------------------------------------------ versions and history

    @property
    def resource_version(self) -> int:
        return self._history.revision

    @property
    def oldest_resource_version(self) -> int:
        """The oldest resourceVersion a watch or exact list may still start from."""
        with self.lock:
            self._history.expire()
            return self._history.floor

    def compact(self) -> int:
        """Forget all history: older watches, exact lists and continue tokens get 410."""
        return self._history.compact()

    # ------------------------------------------------------------------ reads

    def get_object(self, rt: ResourceType, namespace: str, name: str) -> StoredObject:
        return self._registry.get(rt, namespace, name)

    def list_objects(
        self,
        rt: ResourceType,
        namespace: str = "",
        *,
        labels: LabelSelector | None = None,
        fields: FieldSelector | None = None,
        limit: int = 0,
        continue_token: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
    ) -> ListResult:
        return reads.list_objects(
            self._history,
            rt,
            namespace,
            labels=labels,
            fields=fields,
            limit=limit,
            continue_token=continue_token,
            resource_version=resource_version,
            resource_version_match=resource_version_match,
        )

    def open_watch(
        self,
        rt: ResourceType,
        namespace: str,
        resource_version: str | None,
        *,
        send_initial_events: bool = False,
    ) -> WatchStart:
        """Where a new watch starts; 410 Expired when `resource_version` is compacted."""
        return reads.open_watch(
            self._history, rt, namespace, resource_version, send_initial_events=send_initial_events
        )

    def changes_since(self, cursor: int) -> tuple[list[Change], int, int]:
        """Changes from history position `cursor`: (changes, next cursor, current version)."""
        return reads.changes_since(self._history, cursor)

    # ------------------------------------------------------------------ writes

    def create_object(
        self,
        rt: ResourceType,
        namespace: str,
        body: Any,
        *,
        from_api: bool = True,
        dry_run: bool = False,
    ) -> StoredObject:
        """Create; `from_api` applies the API's create strategy (e.g. pod status reset)."""
        return self._registry.create(rt, namespace, body, from_api=from_api, dry_run=dry_run)

    def update_object(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Any,
        *,
        subresource: str = "",
        dry_run: bool = False,
    ) -> tuple[StoredObject, bool]:
        """PUT: (object, created). 409 when body's metadata.resourceVersion is stale."""
        return self._registry.update(
            rt, namespace, name, body, subresource=subresource, dry_run=dry_run
        )

    def patch_object(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        content_type: str,
        patch: Any,
        *,
        subresource: str = "",
        dry_run: bool = False,
    ) -> StoredObject:
        """PATCH; 409 when the patched object's metadata.resourceVersion is stale."""
        return self._registry.patch(
            rt, namespace, name, content_type, patch, subresource=subresource, dry_run=dry_run
        )

    @contextlib.contextmanager
    def creation_time(
        self, resource: str, namespace: str, name: str, seconds: float
    ) -> Iterator[None]:
        """While the context is open, the object ``resource`` ``namespace/name`` is created
        (through the API or here) with creationTimestamp ``seconds`` instead of the server's
        time; every other object keeps the server's time.

        A privilege of the simulator, which no real server grants: its old nodes must have been
        created long ago (the Node, its Lease and its DaemonSet pods), while what the other
        nodes create meanwhile is created now."""
        rt = by_plural(resource)
        self._registry.set_creation_time(rt, namespace, name, seconds)
        try:
            yield
        finally:
            self._registry.set_creation_time(rt, namespace, name, None)

    def delete_object(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        options: DeleteOptions | None = None,
        *,
        dry_run: bool = False,
    ) -> DeleteResult:
        return self._registry.delete(rt, namespace, name, options, dry_run=dry_run)

    # ------------------------------------------------------------------ direct access for tests

    def create(self, resource: str, obj: JSONObject, *, namespace: str = "") -> JSONObject:
        """Create as given (status kept: no API create strategy); returns a copy."""
        rt = by_plural(resource)
        return self.create_object(rt, namespace, obj, from_api=False).to_dict()

    def get(self, resource: str, name: str, *, namespace: str = "") -> JSONObject:
        rt = by_plural(resource)
        return self.get_object(rt, namespace if rt.namespaced else "", name).to_dict()

    def try_get(self, resource: str, name: str, *, namespace: str = "") -> JSONObject | None:
        try:
            return self.get(resource, name, namespace=namespace)
        except errors.APIError as exc:
            if exc.code == 404:
                return None
            raise

    def list(
        self,
        resource: str,
        *,
        namespace: str = "",
        label_selector: str = "",
        field_selector: str = "",
    ) -> list[JSONObject]:
        rt = by_plural(resource)
        result = self.list_objects(
            rt,
            namespace,
            labels=parse_label_selector(label_selector),
            fields=parse_field_selector(field_selector, rt.field_getters()),
        )
        return [o.to_dict() for o in result.items]

    def replace(
        self, resource: str, obj: JSONObject, *, namespace: str = "", subresource: str = ""
    ) -> JSONObject:
        rt = by_plural(resource)
        meta = obj.get("metadata") or {}
        ns = (namespace or meta.get("namespace", "")) if rt.namespaced else ""
        stored, _ = self.update_object(rt, ns, meta.get("name", ""), obj, subresource=subresource)
        return stored.to_dict()

    def patch(
        self,
        resource: str,
        name: str,
        patch: Any,
        *,
        namespace: str = "",
        patch_type: str = STRATEGIC_MERGE_PATCH,
        subresource: str = "",
    ) -> JSONObject:
        rt = by_plural(resource)
        ns = namespace if rt.namespaced else ""
        return self.patch_object(rt, ns, name, patch_type, patch, subresource=subresource).to_dict()

    def delete(
        self,
        resource: str,
        name: str,
        *,
        namespace: str = "",
        grace_period_seconds: int | None = None,
    ) -> JSONObject:
        """Delete; returns the last state (or the pending state of a graceful deletion)."""
        rt = by_plural(resource)
        ns = namespace if rt.namespaced else ""
        result = self.delete_object(rt, ns, name, DeleteOptions(grace_period_seconds))
        return result.obj.to_dict()
