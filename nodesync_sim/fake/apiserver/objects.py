"""Stored objects and change records, each serialized at most once.

A `StoredObject` is immutable once stored: every write stores a new one. Its JSON is produced
lazily and cached, so a list, a GET and every watcher share the same bytes. List items are
serialized without `kind`/`apiVersion`, as a real server does; single objects and watch events
carry them.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from nodesync_sim.fake.apiserver.resources import ResourceType

JSONObject = dict[str, Any]
EventType = Literal["ADDED", "MODIFIED", "DELETED"]


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


@dataclass(slots=True, eq=False)
class StoredObject:
    obj: JSONObject
    _item: bytes | None = None
    _full: bytes | None = None

    @property
    def metadata(self) -> JSONObject:
        meta: JSONObject = self.obj["metadata"]
        return meta

    @property
    def name(self) -> str:
        return str(self.metadata["name"])

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace", ""))

    @property
    def uid(self) -> str:
        return str(self.metadata.get("uid", ""))

    @property
    def resource_version(self) -> str:
        return str(self.metadata.get("resourceVersion", ""))

    def item_bytes(self) -> bytes:
        """JSON as a list item: without kind and apiVersion."""
        if self._item is None:
            self._item = dumps(
                {k: v for k, v in self.obj.items() if k not in ("kind", "apiVersion")}
            )
        return self._item

    def full_bytes(self) -> bytes:
        """JSON as a single object, with kind and apiVersion first."""
        if self._full is None:
            head = b'{"kind":' + dumps(self.obj.get("kind", "")) + b',"apiVersion":'
            head += dumps(self.obj.get("apiVersion", ""))
            item = self.item_bytes()
            self._full = head + (b"," + item[1:] if item != b"{}" else b"}")
        return self._full

    def to_dict(self) -> JSONObject:
        """A deep copy callers may modify."""
        return copy.deepcopy(self.obj)


@dataclass(slots=True, eq=False)
class Change:
    """One committed write, as the watch cache and history see it."""

    rv: int
    type: EventType
    rt: ResourceType
    key: str
    obj: StoredObject  # the state after; for DELETED the last state, at the deletion's version
    prev: StoredObject | None  # the state before (None for ADDED)
    _lines: dict[str, bytes] = field(default_factory=dict)

    def line(self, event_type: EventType) -> bytes:
        """The watch line for this change as `event_type`, rendered once per type.

        ADDED/MODIFIED carry the new state. DELETED carries the last state; when a MODIFIED change
        made an object leave a watcher's selector, the watcher gets DELETED with the previous
        state at this change's resourceVersion (what the real watch cache sends).
        """
        cached = self._lines.get(event_type)
        if cached is not None:
            return cached
        if event_type == "DELETED" and self.type != "DELETED":
            assert self.prev is not None
            prev = self.prev.obj
            body = StoredObject(
                {**prev, "metadata": {**prev["metadata"], "resourceVersion": str(self.rv)}}
            ).full_bytes()
        else:
            body = self.obj.full_bytes()
        line = b'{"type":"' + event_type.encode() + b'","object":' + body + b"}\n"
        self._lines[event_type] = line
        return line


def event_line(event_type: str, obj: StoredObject) -> bytes:
    return b'{"type":"' + event_type.encode() + b'","object":' + obj.full_bytes() + b"}\n"
