"""Reads over the history, as the real server serves them: lists (selectors, limit and continue
tokens, a resourceVersion to read at) and where a watch starts, with 410 Expired for versions
the history no longer holds."""

from __future__ import annotations

import base64
import binascii
import bisect
import json
from dataclasses import dataclass

from nodesync_sim.fake.apiserver import errors
from nodesync_sim.fake.apiserver.history import History
from nodesync_sim.fake.apiserver.objects import Change, StoredObject
from nodesync_sim.fake.apiserver.resources import ResourceType
from nodesync_sim.fake.apiserver.selectors import FieldSelector, LabelSelector


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


def encode_continue(rv: int, start: str) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
        return int(data["rv"]), str(data["start"])
    except (binascii.Error, ValueError, KeyError, TypeError) as exc:
        raise errors.bad_request(f"continue key is not valid: {exc}") from None


def parse_resource_version(value: str) -> int:
    try:
        rv = int(value)
    except ValueError:
        raise errors.bad_request(f"invalid resource version: {value!r}") from None
    if rv < 0:
        raise errors.bad_request(f"invalid resource version: {value!r}")
    return rv


def _list_version(
    history: History,
    continue_token: str | None,
    resource_version: str | None,
    resource_version_match: str | None,
) -> tuple[int, str]:
    """(the version to read at, the key to continue after)."""
    if continue_token:
        snap_rv, start_key = decode_continue(continue_token)
        if snap_rv < history.floor:
            raise errors.expired(
                "The provided continue parameter is too old to display a consistent "
                "list result. You can start a new list without the continue parameter."
            )
        return snap_rv, start_key
    if resource_version in (None, "", "0"):
        return history.revision, ""
    requested = parse_resource_version(resource_version)
    if requested > history.revision:
        raise errors.too_large_resource_version(requested, history.revision)
    if resource_version_match == "Exact":
        if requested < history.floor:
            raise errors.expired("The resourceVersion for the provided list is too old.")
        return requested, ""
    return history.revision, ""


def list_objects(
    history: History,
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
    with history.lock:
        history.expire()
        snap_rv, start_key = _list_version(
            history, continue_token, resource_version, resource_version_match
        )
        objs = history.snapshot(rt, snap_rv)
        keys = sorted(objs)
        if namespace and rt.namespaced:
            lo = bisect.bisect_left(keys, namespace + "/")
            hi = bisect.bisect_left(keys, namespace + "0")  # "0" sorts right after "/"
            keys = keys[lo:hi]
        lo = bisect.bisect_right(keys, start_key) if start_key else 0
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
                    token = encode_continue(snap_rv, keys[i])
                    if not filtered:
                        remaining = len(keys) - i - 1
                break
        return ListResult(items, snap_rv, token, remaining)


def open_watch(
    history: History,
    rt: ResourceType,
    namespace: str,
    resource_version: str | None,
    *,
    send_initial_events: bool = False,
) -> WatchStart:
    """Where a new watch starts; 410 Expired when `resource_version` is no longer kept."""
    with history.lock:
        history.expire()
        if resource_version in (None, "", "0") or send_initial_events:
            bucket = history.bucket(rt)
            initial = [
                bucket[k]
                for k in sorted(bucket)
                if not (namespace and rt.namespaced) or k.startswith(namespace + "/")
            ]
            return WatchStart(initial, history.end, history.revision)
        requested = parse_resource_version(resource_version)
        if requested < history.floor:
            raise errors.expired(f"too old resource version: {requested} ({history.floor})")
        return WatchStart([], history.position_after(requested), max(requested, history.revision))


def changes_since(history: History, cursor: int) -> tuple[list[Change], int, int]:
    """Changes from history position `cursor`: (changes, next cursor, current version); 410
    when the watch fell behind the kept history."""
    found = history.changes_from(cursor)
    if found is None:
        raise errors.expired(
            f"too old resource version: the watch fell behind the history (oldest {history.floor})"
        )
    return found
