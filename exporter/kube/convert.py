"""API JSON objects (plain dicts) -> exporter.model.kube dataclasses.

Tolerant by design: a field of the wrong type or shape is treated as absent and gets the
model's default, so an odd object still converts. Only an object without identity (no metadata,
no name, no namespace for a namespaced kind) raises :class:`ConversionError`; callers that
convert lists skip such an object, count and log it, and keep the rest.

Timestamps are RFC 3339 strings (Time: seconds; MicroTime: microseconds) and become Unix
seconds as floats; a missing or unparsable time is None (``created_at``: 0.0, i.e. "old").
A pod without a phase is Pending (the API server creates every pod Pending).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from exporter.model.kube import (
    ContainerStatusInfo,
    LeaseInfo,
    NodeCondition,
    NodeInfo,
    PodInfo,
    Taint,
)
from exporter.model.rfc3339 import parse_time

JSONObject = dict[str, Any]
ANNOTATION_MIRROR = "kubernetes.io/config.mirror"


class ConversionError(ValueError):
    """The object cannot be converted at all (it has no usable identity)."""


# ---------------------------------------------------------------- field readers


def timestamp(value: Any) -> float | None:
    """RFC 3339 -> Unix seconds; None for anything else. A time without offset is UTC."""
    return parse_time(value)


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


def _bool(value: Any) -> bool:
    return value is True


def _string_map(value: Any) -> dict[str, str]:
    """Labels/annotations: string keys and values only (null values are dropped)."""
    return {k: v for k, v in _dict(value).items() if isinstance(k, str) and isinstance(v, str)}


def _metadata(obj: Any, *, namespaced: bool) -> Mapping[str, Any]:
    if not isinstance(obj, dict):
        raise ConversionError("not a JSON object")
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise ConversionError("no metadata")
    if not _str(meta.get("name")):
        raise ConversionError("no metadata.name")
    if namespaced and not _str(meta.get("namespace")):
        raise ConversionError(f"{meta['name']}: no metadata.namespace")
    return meta


# ---------------------------------------------------------------- nodes


def _taint(raw: Any) -> Taint | None:
    t = _dict(raw)
    key = _str(t.get("key"))
    if not key:
        return None
    return Taint(
        key=key,
        effect=_str(t.get("effect")),
        value=_str(t.get("value")),
        time_added=timestamp(t.get("timeAdded")),
    )


def _node_condition(raw: Any) -> NodeCondition | None:
    c = _dict(raw)
    type_ = _str(c.get("type"))
    if not type_:
        return None
    return NodeCondition(
        type=type_,
        status=_str(c.get("status")) or "Unknown",
        reason=_str(c.get("reason")),
        last_transition=timestamp(c.get("lastTransitionTime")),
        last_heartbeat=timestamp(c.get("lastHeartbeatTime")),
    )


def node_info(obj: JSONObject) -> NodeInfo:
    meta = _metadata(obj, namespaced=False)
    spec = _dict(obj.get("spec"))
    status = _dict(obj.get("status"))
    taints = (_taint(t) for t in _list(spec.get("taints")))
    conditions = (_node_condition(c) for c in _list(status.get("conditions")))
    return NodeInfo(
        name=meta["name"],
        uid=_str(meta.get("uid")),
        created_at=timestamp(meta.get("creationTimestamp")) or 0.0,
        resource_version=_str(meta.get("resourceVersion")),
        labels=_string_map(meta.get("labels")),
        annotations=_string_map(meta.get("annotations")),
        unschedulable=_bool(spec.get("unschedulable")),
        taints=tuple(t for t in taints if t is not None),
        conditions=tuple(c for c in conditions if c is not None),
    )


_STATUSES = {"True": "True", "False": "False", "Unknown": "Unknown"}
_EFFECTS = {e: e for e in ("NoSchedule", "PreferNoSchedule", "NoExecute")}


#: Keys of a Node (at any depth) that :func:`node_summary` never reads: big parts of a Node (its
#: images, node info, capacity, addresses, managed fields, annotations) and the text of its
#: conditions. None of them is a key of a list's own metadata.
NODE_SUMMARY_UNREAD = frozenset(
    {
        "annotations",
        "managedFields",
        "ownerReferences",
        "images",
        "nodeInfo",
        "capacity",
        "allocatable",
        "addresses",
        "daemonEndpoints",
        "volumesAttached",
        "volumesInUse",
        "config",
        "podCIDRs",
        "providerID",
        "lastHeartbeatTime",
        "message",
        "reason",
    }
)


def dropping(keys: Collection[str]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A JSON object hook that drops ``keys`` from every object as it is decoded: what a cache
    never reads of a big list is freed at once, rather than held until the list is converted."""
    unread = frozenset(keys)

    def hook(obj: dict[str, Any]) -> dict[str, Any]:
        for key in unread.intersection(obj):
            del obj[key]
        return obj

    return hook


def node_summary(
    obj: JSONObject,
    *,
    labels: Collection[str],
    conditions: Collection[str],
    taints: Collection[str],
) -> NodeInfo:
    """A Node reduced to what a cache of every Node needs (the controller's): the label keys
    given, the condition types given (type, status and last transition; no reason, no
    heartbeat) and the taint keys given (key and effect; no value, no time); no annotations, no
    resourceVersion (the informer keeps it). Equal to ``node_info`` with everything else left
    out, and tolerant the same way; the strings of the bounded sets are shared, not one copy per
    Node."""
    meta = _metadata(obj, namespaced=False)
    spec = _dict(obj.get("spec"))
    status = _dict(obj.get("status"))
    kept_types = {t: t for t in conditions}
    kept_keys = {k: k for k in taints}
    found_conditions: list[NodeCondition] = []
    for raw in _list(status.get("conditions")):
        c = _dict(raw)
        type_ = kept_types.get(c.get("type"))  # type: ignore[arg-type]
        if type_ is None:
            continue
        state = _str(c.get("status")) or "Unknown"
        found_conditions.append(
            NodeCondition(
                type=type_,
                status=_STATUSES.get(state, state),
                last_transition=timestamp(c.get("lastTransitionTime")),
            )
        )
    found_taints: list[Taint] = []
    for raw in _list(spec.get("taints")):
        t = _dict(raw)
        key = kept_keys.get(t.get("key"))  # type: ignore[arg-type]
        if key is not None:
            effect = _str(t.get("effect"))
            found_taints.append(Taint(key=key, effect=_EFFECTS.get(effect, effect)))
    raw_labels = _dict(meta.get("labels"))
    return NodeInfo(
        name=meta["name"],
        uid=_str(meta.get("uid")),
        created_at=timestamp(meta.get("creationTimestamp")) or 0.0,
        labels={k: v for k in labels if isinstance(v := raw_labels.get(k), str)},
        unschedulable=_bool(spec.get("unschedulable")),
        taints=tuple(found_taints),
        conditions=tuple(found_conditions),
    )


# ---------------------------------------------------------------- leases


def lease_info(obj: JSONObject) -> LeaseInfo:
    meta = _metadata(obj, namespaced=True)
    spec = _dict(obj.get("spec"))
    duration = _int(spec.get("leaseDurationSeconds"))
    return LeaseInfo(
        name=meta["name"],
        namespace=meta["namespace"],
        renew_time=timestamp(spec.get("renewTime")),
        holder=_str(spec.get("holderIdentity")),
        lease_duration_seconds=duration,
        resource_version=_str(meta.get("resourceVersion")),
    )


# ---------------------------------------------------------------- pods


def _container_status(raw: Any, *, init: bool) -> ContainerStatusInfo | None:
    s = _dict(raw)
    name = _str(s.get("name"))
    if not name:
        return None
    state = _dict(s.get("state"))
    waiting = _dict(state.get("waiting"))
    running = _dict(state.get("running"))
    terminated = _dict(state.get("terminated"))
    last_terminated = _dict(_dict(s.get("lastState")).get("terminated"))
    # The API sets exactly one state; a broken object may set several: terminated wins, as the
    # latest a container can be, then running, then waiting.
    if "terminated" in state and isinstance(state["terminated"], dict):
        current = "terminated"
        started_at = timestamp(terminated.get("startedAt"))
    elif "running" in state and isinstance(state["running"], dict):
        current = "running"
        started_at = timestamp(running.get("startedAt"))
    elif "waiting" in state and isinstance(state["waiting"], dict):
        current = "waiting"
        started_at = None
    else:
        current = ""
        started_at = None
    return ContainerStatusInfo(
        name=name,
        state=current,
        ready=_bool(s.get("ready")),
        restart_count=max(_int(s.get("restartCount")) or 0, 0),
        waiting_reason=_str(waiting.get("reason")) if current == "waiting" else "",
        terminated_reason=_str(terminated.get("reason")) if current == "terminated" else "",
        terminated_exit_code=_int(terminated.get("exitCode")) if current == "terminated" else None,
        last_terminated_reason=_str(last_terminated.get("reason")),
        last_terminated_exit_code=_int(last_terminated.get("exitCode")),
        started_at=started_at,
        init=init,
    )


def _controller_kind(meta: Mapping[str, Any]) -> str:
    for ref in _list(meta.get("ownerReferences")):
        r = _dict(ref)
        if r.get("controller") is True:
            return _str(r.get("kind"))
    return ""


def _pod_conditions(status: Mapping[str, Any]) -> tuple[float | None, bool]:
    """(PodScheduled's transition time when True, Ready is True)."""
    scheduled_at: float | None = None
    ready = False
    for raw in _list(status.get("conditions")):
        c = _dict(raw)
        if c.get("status") != "True":
            continue
        if c.get("type") == "PodScheduled":
            scheduled_at = timestamp(c.get("lastTransitionTime"))
        elif c.get("type") == "Ready":
            ready = True
    return scheduled_at, ready


def pod_info(obj: JSONObject) -> PodInfo:
    meta = _metadata(obj, namespaced=True)
    spec = _dict(obj.get("spec"))
    status = _dict(obj.get("status"))
    statuses: list[ContainerStatusInfo | None] = [
        _container_status(s, init=True) for s in _list(status.get("initContainerStatuses"))
    ]
    statuses += [_container_status(s, init=False) for s in _list(status.get("containerStatuses"))]
    scheduled_at, ready = _pod_conditions(status)
    grace = _int(meta.get("deletionGracePeriodSeconds"))
    return PodInfo(
        uid=_str(meta.get("uid")),
        namespace=meta["namespace"],
        name=meta["name"],
        node_name=_str(spec.get("nodeName")),
        phase=_str(status.get("phase")) or "Pending",
        created_at=timestamp(meta.get("creationTimestamp")) or 0.0,
        resource_version=_str(meta.get("resourceVersion")),
        labels=_string_map(meta.get("labels")),
        start_time=timestamp(status.get("startTime")),
        deletion_timestamp=timestamp(meta.get("deletionTimestamp")),
        deletion_grace_period_seconds=grace,
        owner_kind=_controller_kind(meta),
        mirror=ANNOTATION_MIRROR in _dict(meta.get("annotations")),
        empty_dir=any("emptyDir" in _dict(v) for v in _list(spec.get("volumes"))),
        scheduled_at=scheduled_at,
        ready=ready,
        containers=tuple(s for s in statuses if s is not None),
    )
