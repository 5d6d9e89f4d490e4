"""The registry: what the real server does with a write of each kind before it reaches storage.

Create, update (PUT), patch and delete of one object, checked and shaped per kind
(`validation`, `strategy`, `deletion`) and committed to the `History`:

- the body must be of the URL's kind and name, in an existing namespace;
- optimistic concurrency: a stale metadata.resourceVersion in a PUT or in a patched object
  answers 409 Conflict;
- a write that changes nothing commits nothing (no new resourceVersion, no watch event);
- an object being deleted whose last finalizer is removed is deleted by that write.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from exporter.model.rfc3339 import format_time
from nodesync_sim.fake.apiserver import errors
from nodesync_sim.fake.apiserver.deletion import (
    DeleteOptions,
    Deleter,
    DeleteResult,
    check_preconditions,
)
from nodesync_sim.fake.apiserver.history import History, object_key
from nodesync_sim.fake.apiserver.objects import JSONObject, StoredObject
from nodesync_sim.fake.apiserver.patch import PatchError, apply_patch
from nodesync_sim.fake.apiserver.resources import NAMESPACES, ResourceType
from nodesync_sim.fake.apiserver.strategy import (
    merge_for_update,
    new_object,
    object_name,
    patch_types,
    requires_resource_version,
)
from nodesync_sim.fake.apiserver.validation import check_type, validate_name, validate_object


def _body_object(body: Any) -> JSONObject:
    if not isinstance(body, dict):
        raise errors.bad_request("the body of the request must be a JSON object")
    return body


class Registry:
    """The write rules of every served kind over one `History`; `clock` is the server's time
    (Unix seconds)."""

    def __init__(self, history: History, clock: Callable[[], float]) -> None:
        self._history = history
        self._clock = clock
        self.deleter = Deleter(history, clock)
        # (plural, key) -> the creationTimestamp its next create gets (see `set_creation_time`)
        self._creation_times: dict[tuple[str, str], float] = {}

    def set_creation_time(
        self, rt: ResourceType, namespace: str, name: str, seconds: float | None
    ) -> None:
        """Give the object `name` of this kind, when it is created, `seconds` as its
        creationTimestamp instead of the server's time (None: no longer). A privilege of the
        simulator, which a real server does not have: old nodes' objects must be old."""
        key = (rt.plural, object_key(rt, namespace if rt.namespaced else "", name))
        with self._history.lock:
            if seconds is None:
                self._creation_times.pop(key, None)
            else:
                self._creation_times[key] = seconds

    def get(self, rt: ResourceType, namespace: str, name: str) -> StoredObject:
        found = self._history.current(rt, object_key(rt, namespace, name))
        if found is None:
            raise errors.not_found(rt, name)
        return found

    # ------------------------------------------------------------------ create

    def _create_namespace(self, rt: ResourceType, namespace: str, meta_in: JSONObject) -> str:
        """The namespace a create lands in ("" for cluster-scoped kinds)."""
        if not rt.namespaced:
            return ""
        body_ns = meta_in.get("namespace")
        if namespace and body_ns and body_ns != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent "
                "on the request"
            )
        return str(namespace or body_ns or "default")

    def create(
        self,
        rt: ResourceType,
        namespace: str,
        body: Any,
        *,
        from_api: bool = True,
        dry_run: bool = False,
    ) -> StoredObject:
        """Create; `from_api` applies the API's create strategy (e.g. pod status reset)."""
        body = _body_object(body)
        check_type(rt, body)
        meta_in = body.get("metadata") or {}
        if not isinstance(meta_in, dict):
            raise errors.bad_request("metadata must be an object")
        namespace = self._create_namespace(rt, namespace, meta_in)
        if from_api and meta_in.get("resourceVersion"):
            raise errors.bad_request("resourceVersion should not be set on objects to be created")
        name, generate = object_name(rt, meta_in)
        validate_name(rt, name)
        now = self._clock()
        history = self._history
        with history.lock:
            if rt.namespaced and namespace not in history.bucket(NAMESPACES):
                raise errors.not_found(NAMESPACES, namespace)
            key = object_key(rt, namespace, name)
            if key in history.bucket(rt):
                raise errors.already_exists(rt, name)
            created_at = format_time(self._creation_times.get((rt.plural, key), now))
            obj = new_object(
                rt, namespace, name, generate, body, created_at=created_at, from_api=from_api
            )
            validate_object(rt, obj)
            if dry_run:
                return StoredObject(obj)
            return history.commit(rt, key, "ADDED", obj, None)

    # ------------------------------------------------------------------ update and patch

    def _write(
        self,
        rt: ResourceType,
        current: StoredObject,
        new: JSONObject,
        subresource: str,
        dry_run: bool,
    ) -> StoredObject:
        """Commit `new` over `current` (conflicts already checked); a no-op commits nothing."""
        merged = merge_for_update(rt, current.obj, new, subresource)
        merged["metadata"]["resourceVersion"] = current.resource_version
        validate_object(rt, merged)
        if merged == current.obj:
            return current
        if dry_run:
            return StoredObject(merged)
        history = self._history
        key = object_key(rt, current.namespace, current.name)
        meta = merged["metadata"]
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and not meta.get("deletionGracePeriodSeconds")
        ):
            # The last finalizer of an object already deleted is gone: remove it now.
            history.commit(rt, key, "MODIFIED", merged, current)
            last = history.current(rt, key)
            assert last is not None
            return history.commit(rt, key, "DELETED", None, last)
        return history.commit(rt, key, "MODIFIED", merged, current)

    def update(
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
        body = _body_object(body)
        check_type(rt, body)
        meta_in = body.get("metadata") or {}
        body_name = meta_in.get("name")
        if body_name and body_name != name:
            raise errors.bad_request(
                f"the name of the object ({body_name}) does not match the name on the URL ({name})"
            )
        if rt.namespaced and meta_in.get("namespace") and meta_in["namespace"] != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )
        with self._history.lock:
            current = self._history.current(rt, object_key(rt, namespace, name))
            if current is None:
                if rt.allow_create_on_update and not subresource:
                    body = {**body, "metadata": {**meta_in, "name": name}}
                    body["metadata"].pop("resourceVersion", None)
                    return self.create(rt, namespace, body, dry_run=dry_run), True
                raise errors.not_found(rt, name)
            expected = meta_in.get("resourceVersion")
            if not expected and requires_resource_version(rt):
                raise errors.invalid(
                    rt,
                    name,
                    "metadata.resourceVersion",
                    "FieldValueInvalid",
                    "Invalid value: 0x0: must be specified for an update",
                )
            if expected and str(expected) != current.resource_version:
                raise errors.stale(rt, name)
            return self._write(rt, current, body, subresource, dry_run), False

    def patch(
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
        accepted = patch_types(rt)
        if content_type not in accepted:
            raise errors.unsupported_media_type(content_type, accepted)
        with self._history.lock:
            current = self.get(rt, namespace, name)
            try:
                patched = apply_patch(current.obj, content_type, patch)
            except PatchError as exc:
                if exc.code == 415:
                    raise errors.unsupported_media_type(content_type, accepted) from None
                raise errors.bad_request(exc.message) from None
            check_type(rt, patched)
            meta = patched.get("metadata")
            if not isinstance(meta, dict):
                raise errors.unprocessable("the patched object has no metadata")
            if meta.get("name") != name or (rt.namespaced and meta.get("namespace") != namespace):
                raise errors.bad_request("the patch must not change the object's name or namespace")
            expected = meta.get("resourceVersion")
            if expected and str(expected) != current.resource_version:
                raise errors.stale(rt, name)
            return self._write(rt, current, patched, subresource, dry_run)

    # ------------------------------------------------------------------ delete

    def delete(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        options: DeleteOptions | None = None,
        *,
        dry_run: bool = False,
    ) -> DeleteResult:
        options = options or DeleteOptions()
        with self._history.lock:
            current = self.get(rt, namespace, name)
            check_preconditions(rt, current, options)
            if dry_run:
                return DeleteResult(current, True)
            return self.deleter.delete(rt, current, options)
