"""The in-memory object store: etcd-like resource versions, history, and per-kind write rules.

- One global resourceVersion counter, bumped by every committed write (as etcd's revision).
- A bounded history of changes (`history_limit` entries). Every change after `floor` is kept, so
  a watch from any resourceVersion >= floor, a list at an exact older version, and a continue
  token from an older list are served; older ones get 410 Expired. `compact()` forgets all history.
- Writes follow what the real registry does for each kind: server-set uid, creationTimestamp,
  generation; status as a subresource; no-op updates commit nothing; optimistic concurrency
  through metadata.resourceVersion; graceful pod deletion; finalizers hold a deleted object.

Thread safety: every public method takes `lock` (an RLock), so tests may call the store from
their own thread while the server serves from its loop. Hold `lock` to make several calls atomic.
Listeners (the watch hub) are called with each `Change` while the lock is held; they must only
schedule work, never call back into the store.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import copy
import json
import re
import secrets
import string
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from nodesync_sim.apiserver import errors
from nodesync_sim.apiserver.objects import Change, EventType, JSONObject, StoredObject
from nodesync_sim.apiserver.patch import STRATEGIC_MERGE_PATCH, PatchError, apply_patch
from nodesync_sim.apiserver.resources import (
    ALL,
    NAMESPACES,
    ResourceType,
    by_plural,
)
from nodesync_sim.apiserver.selectors import (
    FieldSelector,
    LabelSelector,
    parse_field_selector,
    parse_label_selector,
)

Listener = Callable[[Change], None]
Scheduler = Callable[[float, Callable[[], None]], None]

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
PROTECTED_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
DEFAULT_GRACE_SECONDS = 30

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SYSTEM_META = (
    "name",
    "namespace",
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
)


def _utcnow() -> datetime:
    return datetime.now(UTC)


def format_time(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(s: str) -> datetime:
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


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


@dataclass(frozen=True, slots=True)
class ListResult:
    items: list[StoredObject]
    resource_version: int
    continue_token: str | None
    remaining: int | None


@dataclass(frozen=True, slots=True)
class WatchStart:
    initial: list[StoredObject]  # synthetic ADDED events (watch without a resourceVersion)
    cursor: int  # position in the history to stream from
    resource_version: int


def _key(rt: ResourceType, namespace: str, name: str) -> str:
    return f"{namespace}/{name}" if rt.namespaced else name


def _encode_continue(rv: int, start: str) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[int, str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
        return int(data["rv"]), str(data["start"])
    except (binascii.Error, ValueError, KeyError, TypeError) as exc:
        raise errors.bad_request(f"continue key is not valid: {exc}") from None


def _parse_rv(value: str) -> int:
    try:
        rv = int(value)
    except ValueError:
        raise errors.bad_request(f"invalid resource version: {value!r}") from None
    if rv < 0:
        raise errors.bad_request(f"invalid resource version: {value!r}")
    return rv


class Store:
    """In-memory objects of every served kind, with history and watch hooks."""

    def __init__(
        self,
        *,
        history_limit: int = 20_000,
        clock: Callable[[], datetime] = _utcnow,
        namespaces: tuple[str, ...] = DEFAULT_NAMESPACES,
    ) -> None:
        if history_limit < 1:
            raise ValueError("history_limit must be positive")
        self.lock = threading.RLock()
        self.history_limit = history_limit
        self._clock = clock
        self._rv = 0
        self._objects: dict[str, dict[str, StoredObject]] = {rt.plural: {} for rt in ALL}
        self._log: list[Change] = []
        self._log_base = 0  # absolute position of _log[0]
        self._floor = 0  # every change with rv > floor is in the log
        self._listeners: list[Listener] = []
        self._scheduler: Scheduler | None = None
        for ns in namespaces:
            self.create_object(NAMESPACES, "", {"metadata": {"name": ns}}, from_api=False)

    # ------------------------------------------------------------------ wiring

    def add_listener(self, listener: Listener) -> None:
        with self.lock:
            self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        with self.lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def set_scheduler(self, scheduler: Scheduler | None) -> None:
        """Where graceful-deletion timers run (the server's loop); None: no timers."""
        with self.lock:
            self._scheduler = scheduler

    # ------------------------------------------------------------------ versions and history

    @property
    def resource_version(self) -> int:
        return self._rv

    @property
    def oldest_resource_version(self) -> int:
        """The oldest resourceVersion a watch or exact list may still start from."""
        return self._floor

    def compact(self) -> int:
        """Forget all history: older watches, exact lists and continue tokens get 410."""
        with self.lock:
            self._log_base += len(self._log)
            self._log.clear()
            self._floor = self._rv
            return self._floor

    def _trim(self) -> None:
        excess = len(self._log) - self.history_limit
        if excess > max(1, self.history_limit // 4):
            self._floor = self._log[excess - 1].rv
            del self._log[:excess]
            self._log_base += excess

    def _commit(
        self,
        rt: ResourceType,
        key: str,
        kind: EventType,
        new: JSONObject | None,
        prev: StoredObject | None,
    ) -> StoredObject:
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
        self._trim()
        for listener in self._listeners:
            listener(change)
        return stored

    def _snapshot(self, rt: ResourceType, rv: int) -> dict[str, StoredObject]:
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

    # ------------------------------------------------------------------ reads

    def get_object(self, rt: ResourceType, namespace: str, name: str) -> StoredObject:
        with self.lock:
            found = self._objects[rt.plural].get(_key(rt, namespace, name))
            if found is None:
                raise errors.not_found(rt, name)
            return found

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
        labels = labels or LabelSelector()
        fields = fields or FieldSelector()
        with self.lock:
            start_key = ""
            if continue_token:
                snap_rv, start_key = _decode_continue(continue_token)
                if snap_rv < self._floor:
                    raise errors.expired(
                        "The provided continue parameter is too old to display a consistent "
                        "list result. You can start a new list without the continue parameter."
                    )
            elif resource_version in (None, "", "0"):
                snap_rv = self._rv
            else:
                requested = _parse_rv(resource_version)
                if requested > self._rv:
                    raise errors.too_large_resource_version(requested, self._rv)
                if resource_version_match == "Exact":
                    if requested < self._floor:
                        raise errors.expired(
                            "The resourceVersion for the provided list is too old."
                        )
                    snap_rv = requested
                else:
                    snap_rv = self._rv
            objs = self._snapshot(rt, snap_rv)
            keys = sorted(objs)
            lo = 0
            if namespace and rt.namespaced:
                prefix = namespace + "/"
                lo = bisect.bisect_left(keys, prefix)
                hi = bisect.bisect_left(keys, namespace + "0")  # "0" sorts right after "/"
                keys = keys[lo:hi]
                lo = 0
            if start_key:
                lo = bisect.bisect_right(keys, start_key)
            items: list[StoredObject] = []
            filtered = not (labels.empty and fields.empty)
            token: str | None = None
            remaining: int | None = None
            for i in range(lo, len(keys)):
                obj = objs[keys[i]]
                if filtered and not (labels.matches_object(obj.obj) and fields.matches(obj.obj)):
                    continue
                items.append(obj)
                if limit and len(items) >= limit:
                    if i + 1 < len(keys):
                        token = _encode_continue(snap_rv, keys[i])
                        if not filtered:
                            remaining = len(keys) - i - 1
                    break
            return ListResult(items, snap_rv, token, remaining)

    def open_watch(
        self,
        rt: ResourceType,
        namespace: str,
        resource_version: str | None,
        *,
        send_initial_events: bool = False,
    ) -> WatchStart:
        """Where a new watch starts; 410 Expired when `resource_version` is compacted."""
        with self.lock:
            end = self._log_base + len(self._log)
            if resource_version in (None, "", "0") or send_initial_events:
                bucket = self._objects[rt.plural]
                keys = sorted(bucket)
                initial = [
                    bucket[k]
                    for k in keys
                    if not (namespace and rt.namespaced) or k.startswith(namespace + "/")
                ]
                return WatchStart(initial, end, self._rv)
            requested = _parse_rv(resource_version)
            if requested < self._floor:
                raise errors.expired(f"too old resource version: {requested} ({self._floor})")
            pos = bisect.bisect_right(self._log, requested, key=lambda c: c.rv)
            return WatchStart([], self._log_base + pos, max(requested, self._rv))

    def changes_since(self, cursor: int) -> tuple[list[Change], int, int]:
        """Changes from history position `cursor`: (changes, next cursor, current version)."""
        with self.lock:
            if cursor < self._log_base:
                raise errors.expired(
                    f"too old resource version: the watch fell behind the history "
                    f"(oldest {self._floor})"
                )
            return self._log[cursor - self._log_base :], self._log_base + len(self._log), self._rv

    # ------------------------------------------------------------------ writes

    def _now(self) -> datetime:
        return self._clock().replace(microsecond=0)

    def _validate_name(self, rt: ResourceType, name: str) -> None:
        pattern, limit = (_LABEL, 63) if rt is NAMESPACES else (_SUBDOMAIN, 253)
        if len(name) > limit or not pattern.match(name):
            raise errors.invalid(
                rt,
                name,
                "metadata.name",
                "FieldValueInvalid",
                f'Invalid value: "{name}": a lowercase RFC 1123 name must consist of lower case '
                "alphanumeric characters, '-' or '.'",
            )

    def _check_type(self, rt: ResourceType, body: JSONObject) -> None:
        kind = body.get("kind")
        api_version = body.get("apiVersion")
        if api_version and api_version != rt.api_version:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected "
                f"API version ({rt.api_version})"
            )
        if kind and kind != rt.kind:
            raise errors.bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
            )

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
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        self._check_type(rt, body)
        meta_in = body.get("metadata") or {}
        if not isinstance(meta_in, dict):
            raise errors.bad_request("metadata must be an object")
        if rt.namespaced:
            body_ns = meta_in.get("namespace")
            if namespace and body_ns and body_ns != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request"
                )
            namespace = namespace or body_ns or "default"
        else:
            namespace = ""
        if from_api and meta_in.get("resourceVersion"):
            raise errors.bad_request("resourceVersion should not be set on objects to be created")
        name = meta_in.get("name") or ""
        generate = meta_in.get("generateName") or ""
        if not name and generate:
            alphabet = string.ascii_lowercase + string.digits
            name = generate + "".join(secrets.choice(alphabet) for _ in range(5))
        if not name:
            raise errors.invalid(
                rt,
                "",
                "metadata.name",
                "FieldValueRequired",
                "Required value: name or generateName is required",
            )
        self._validate_name(rt, name)
        now = self._now()
        with self.lock:
            if rt.namespaced and namespace not in self._objects[NAMESPACES.plural]:
                raise errors.not_found(NAMESPACES, namespace)
            key = _key(rt, namespace, name)
            if key in self._objects[rt.plural]:
                raise errors.already_exists(rt, name)
            meta: JSONObject = {"name": name}
            if generate:
                meta["generateName"] = generate
            if rt.namespaced:
                meta["namespace"] = namespace
            meta["uid"] = str(uuid.uuid4())
            meta["resourceVersion"] = ""
            if rt.has_generation:
                meta["generation"] = 1
            meta["creationTimestamp"] = format_time(now)
            for k, v in meta_in.items():
                if k not in meta and k not in (
                    "deletionTimestamp",
                    "deletionGracePeriodSeconds",
                    "selfLink",
                    "managedFields",
                    "resourceVersion",
                ):
                    meta[k] = copy.deepcopy(v)
            obj: JSONObject = {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}
            for k, v in body.items():
                if k not in ("kind", "apiVersion", "metadata"):
                    obj[k] = copy.deepcopy(v)
            if from_api and rt.reset_status_on_create is not None:
                obj["status"] = copy.deepcopy(rt.reset_status_on_create)
            self._default(rt, obj)
            if dry_run:
                return StoredObject(obj)
            return self._commit(rt, key, "ADDED", obj, None)

    def _default(self, rt: ResourceType, obj: JSONObject) -> None:
        """The few defaults the real server fills in that clients look at.

        Go structs that are not pointers always serialize: spec and status are `{}` when empty.
        """
        if rt.plural != "events":
            obj.setdefault("spec", {})
        if rt.has_status:
            obj.setdefault("status", {})
        if rt is NAMESPACES:
            labels = obj["metadata"].setdefault("labels", {})
            labels["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            obj.setdefault("status", {"phase": "Active"})
        elif rt.plural == "pods":
            spec = obj.setdefault("spec", {})
            spec.setdefault("restartPolicy", "Always")
            spec.setdefault("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
            spec.setdefault("dnsPolicy", "ClusterFirst")
            spec.setdefault("schedulerName", "default-scheduler")
            obj.setdefault("status", {"phase": "Pending"})

    def _merge_for_update(
        self, rt: ResourceType, cur: JSONObject, new: JSONObject, subresource: str
    ) -> JSONObject:
        if subresource == "status":
            # Status writes change status only (metadata is reset too, as in the real server).
            out = {k: v for k, v in cur.items() if k != "status"}
            out["metadata"] = dict(cur["metadata"])
            if new.get("status") is not None:
                out["status"] = copy.deepcopy(new["status"])
            return out
        out = {"kind": rt.kind, "apiVersion": rt.api_version}
        meta_in = new.get("metadata") or {}
        meta: JSONObject = {}
        cur_meta = cur["metadata"]
        for k in _SYSTEM_META:
            if k in cur_meta:
                meta[k] = cur_meta[k]
        meta["resourceVersion"] = ""
        for k, v in meta_in.items():
            if k not in meta and k not in ("selfLink", "managedFields"):
                meta[k] = copy.deepcopy(v)
        # Keep the server's order: system fields first as in the stored object.
        out["metadata"] = meta
        for k, v in new.items():
            if k not in ("kind", "apiVersion", "metadata"):
                out[k] = copy.deepcopy(v)
        if rt.has_status:
            if "status" in cur:
                out["status"] = cur["status"]
            else:
                out.pop("status", None)
        if rt.has_generation and out.get("spec") != cur.get("spec"):
            meta["generation"] = int(cur_meta.get("generation", 0)) + 1
        return out

    def _write(
        self,
        rt: ResourceType,
        current: StoredObject,
        new: JSONObject,
        subresource: str,
        dry_run: bool,
    ) -> StoredObject:
        """Commit `new` over `current` (conflicts already checked); a no-op commits nothing."""
        merged = self._merge_for_update(rt, current.obj, new, subresource)
        merged["metadata"]["resourceVersion"] = current.resource_version
        if merged == current.obj:
            return current
        if dry_run:
            return StoredObject(merged)
        key = _key(rt, current.namespace, current.name)
        meta = merged["metadata"]
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and not meta.get("deletionGracePeriodSeconds")
        ):
            # The last finalizer of an object already deleted is gone: remove it now.
            self._commit(rt, key, "MODIFIED", merged, current)
            return self._commit(rt, key, "DELETED", None, self._objects[rt.plural][key])
        return self._commit(rt, key, "MODIFIED", merged, current)

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
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        self._check_type(rt, body)
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
        with self.lock:
            current = self._objects[rt.plural].get(_key(rt, namespace, name))
            if current is None:
                if rt.allow_create_on_update and not subresource:
                    body = {**body, "metadata": {**meta_in, "name": name}}
                    body["metadata"].pop("resourceVersion", None)
                    return self.create_object(rt, namespace, body, dry_run=dry_run), True
                raise errors.not_found(rt, name)
            expected = meta_in.get("resourceVersion")
            if expected and str(expected) != current.resource_version:
                raise errors.stale(rt, name)
            return self._write(rt, current, body, subresource, dry_run), False

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
        with self.lock:
            current = self.get_object(rt, namespace, name)
            try:
                patched = apply_patch(current.obj, content_type, patch)
            except PatchError as exc:
                if exc.code == 415:
                    raise errors.unsupported_media_type(content_type) from None
                if exc.code == 400:
                    raise errors.bad_request(exc.message) from None
                raise errors.unprocessable(exc.message) from None
            self._check_type(rt, patched)
            meta = patched.get("metadata")
            if not isinstance(meta, dict):
                raise errors.unprocessable("the patched object has no metadata")
            if meta.get("name") != name or (rt.namespaced and meta.get("namespace") != namespace):
                raise errors.bad_request("the patch must not change the object's name or namespace")
            expected = meta.get("resourceVersion")
            if expected and str(expected) != current.resource_version:
                raise errors.stale(rt, name)
            return self._write(rt, current, patched, subresource, dry_run)

    def delete_object(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        options: DeleteOptions | None = None,
        *,
        dry_run: bool = False,
    ) -> DeleteResult:
        options = options or DeleteOptions()
        with self.lock:
            current = self.get_object(rt, namespace, name)
            meta = current.metadata
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
            if dry_run:
                return DeleteResult(current, True)
            key = _key(rt, namespace, name)
            grace = self._grace(rt, current, options)
            if grace > 0:
                return self._delete_gracefully(rt, key, current, grace)
            if meta.get("finalizers"):
                if meta.get("deletionTimestamp") and meta.get("deletionGracePeriodSeconds") == 0:
                    return DeleteResult(current, False)
                held = current.to_dict()
                held["metadata"].setdefault("deletionTimestamp", format_time(self._now()))
                held["metadata"]["deletionGracePeriodSeconds"] = 0
                return DeleteResult(self._commit(rt, key, "MODIFIED", held, current), False)
            if rt is NAMESPACES:
                self._delete_namespace_contents(name)
            return DeleteResult(self._commit(rt, key, "DELETED", None, current), True)

    def _grace(self, rt: ResourceType, current: StoredObject, options: DeleteOptions) -> int:
        if not rt.graceful_delete:
            return 0
        obj = current.obj
        spec = obj.get("spec") or {}
        if not spec.get("nodeName") or (obj.get("status") or {}).get("phase") in TERMINAL_PHASES:
            return 0  # never scheduled or already finished: nothing to wait for
        if options.grace_period_seconds is not None:
            return max(0, options.grace_period_seconds)
        return int(spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS))

    def _delete_gracefully(
        self, rt: ResourceType, key: str, current: StoredObject, grace: int
    ) -> DeleteResult:
        meta = current.metadata
        old_grace = meta.get("deletionGracePeriodSeconds")
        if meta.get("deletionTimestamp") and old_grace is not None:
            if old_grace <= grace:
                return DeleteResult(current, False)  # can shorten a pending deletion, not extend
            started = parse_time(meta["deletionTimestamp"]) - timedelta(seconds=old_grace)
        else:
            started = self._now()
        deadline = started + timedelta(seconds=grace)
        updated = current.to_dict()
        updated["metadata"]["deletionTimestamp"] = format_time(deadline)
        updated["metadata"]["deletionGracePeriodSeconds"] = grace
        stored = self._commit(rt, key, "MODIFIED", updated, current)
        if self._scheduler is not None:
            delay = max(0.0, (deadline - self._clock()).total_seconds())
            uid = current.uid
            self._scheduler(delay, lambda: self._expire(rt, key, uid))
        return DeleteResult(stored, False)

    def _expire(self, rt: ResourceType, key: str, uid: str) -> None:
        """A grace period is over: the server plays the kubelet's final grace-0 delete."""
        with self.lock:
            current = self._objects[rt.plural].get(key)
            if (
                current is None
                or current.uid != uid
                or not current.metadata.get("deletionTimestamp")
            ):
                return
            if current.metadata.get("finalizers"):
                return
            self._commit(rt, key, "DELETED", None, current)

    def finalize_expired_deletions(self) -> int:
        """Remove gracefully deleted objects whose deletionTimestamp has passed (no timers)."""
        removed = 0
        with self.lock:
            now = self._clock()
            for rt in ALL:
                if not rt.graceful_delete:
                    continue
                for key, obj in list(self._objects[rt.plural].items()):
                    ts = obj.metadata.get("deletionTimestamp")
                    if ts and parse_time(ts) <= now and not obj.metadata.get("finalizers"):
                        self._commit(rt, key, "DELETED", None, obj)
                        removed += 1
        return removed

    def _delete_namespace_contents(self, namespace: str) -> None:
        prefix = namespace + "/"
        for rt in ALL:
            if not rt.namespaced:
                continue
            bucket = self._objects[rt.plural]
            for key in [k for k in bucket if k.startswith(prefix)]:
                self._commit(rt, key, "DELETED", None, bucket[key])

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
