"""Audit Events (core/v1) on the objects nodesync acts on, each recorded exactly once per key.

The Event's name is derived from the key: a retried or repeated record (a controller restarted
mid-step) is refused as AlreadyExists and reported unchanged. Events of cluster-scoped objects
(Nodes) go to the ``default`` namespace, as kubelet's do. Each carries the object's uid
(``kubectl describe`` finds Events by it).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

from exporter.kube.api import JSONObject
from exporter.kube.errors import AlreadyExists
from exporter.kube.resources import EVENTS
from exporter.kube.writing import Channel, WriteResult
from exporter.model.rfc3339 import format_time

EVENT_TYPES = frozenset({"Normal", "Warning"})
#: Longest event message written (the API's events.k8s.io limit; core/v1 shows the same).
MAX_EVENT_MESSAGE = 1024
_MAX_NAME = 253


def event_name(object_name: str, key: str) -> str:
    """The Event's name for an audit key: the same key always gives the same name, so a
    retried create is refused as AlreadyExists instead of recording the step twice."""
    suffix = ".nodesync-" + hashlib.sha256(key.encode()).hexdigest()[:20]
    head = object_name[: _MAX_NAME - len(suffix)].rstrip(".-") or "object"
    return head + suffix


class EventRecorder:
    def __init__(
        self,
        channel: Channel,
        *,
        component: str = "nodesync-controller",
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._channel = channel
        self.component = component
        self._wall_clock = wall_clock

    async def record_event(
        self,
        *,
        kind: str,
        namespace: str,
        name: str,
        uid: str,
        reason: str,
        message: str,
        type: str = "Normal",
        key: str,
    ) -> WriteResult:
        """Record a core/v1 Event on an object, exactly once per ``key``."""
        if type not in EVENT_TYPES:
            raise ValueError(f"event type must be Normal or Warning, not {type!r}")
        event_namespace = namespace or "default"
        now = format_time(self._wall_clock())
        involved: JSONObject = {"apiVersion": "v1", "kind": kind, "name": name, "uid": uid}
        if namespace:
            involved["namespace"] = namespace
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": event_name(name, key), "namespace": event_namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message[:MAX_EVENT_MESSAGE],
            "type": type,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        what = f"{type} event {reason} on {kind} {name}"
        if self._channel.dry_run:
            return self._channel.would(f"record {what}")
        try:
            await self._channel.write(
                "POST", EVENTS, "create", EVENTS.path(event_namespace), body=body
            )
        except AlreadyExists:
            return WriteResult(False, f"{what} already recorded")
        return WriteResult(True, f"recorded {what}")
