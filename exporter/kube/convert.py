"""API JSON objects (plain dicts) -> exporter.model.kube dataclasses, through msgspec structs.

Each kind is read as a msgspec struct holding only the fields nodesync reads
(exporter.kube.objects; a field to read more of an object is one line in its struct and one
in its converter). The structs are checked as the API server's types say: an object with a
field of the wrong type or shape, or without identity (no metadata, no name, no namespace for
a namespaced kind), raises
:class:`ConversionError` with the field's JSON path (``$.spec.taints[0].key: expected `str`,
got `int```). Callers that convert lists and watches skip such an object, count and log it,
and keep the rest: one bad object never fails a list.

``null`` is read as absent wherever the API server may omit a field. Timestamps are RFC 3339
strings (Time: seconds; MicroTime: microseconds) and become Unix seconds as floats; a missing
or unparsable time is None (``created_at``: 0.0, i.e. "old"). A pod without a phase is Pending
(the API server creates every pod Pending).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, TypeVar

import msgspec

from exporter.kube.objects import (
    ContainerState,
    ContainerStatus,
    Lease,
    LeaseSpec,
    NamespacedMeta,
    Node,
    NodeSpec,
    NodeStatus,
    Pod,
    PodSpec,
    PodStatus,
)
from exporter.model.codec import error_message
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
    """The object cannot be converted: the message gives the field's path and the fault."""


def timestamp(value: Any) -> float | None:
    """RFC 3339 -> Unix seconds; None for anything else. A time without offset is UTC."""
    return parse_time(value)


S = TypeVar("S", bound=msgspec.Struct)

_EMPTY_NODE_SPEC = NodeSpec()
_EMPTY_NODE_STATUS = NodeStatus()
_EMPTY_POD_SPEC = PodSpec()
_EMPTY_POD_STATUS = PodStatus()
_EMPTY_LEASE_SPEC = LeaseSpec()
_NO_STATE = ContainerState()


def decoded(obj: Any, kind: type[S]) -> S:
    """``obj`` (decoded JSON) as ``kind``; ConversionError naming the field in error."""
    try:
        return msgspec.convert(obj, kind)
    except msgspec.ValidationError as exc:
        raise ConversionError(error_message(exc)) from None


def _namespaced(meta: NamespacedMeta) -> NamespacedMeta:
    if not meta.namespace:
        raise ConversionError("$.metadata.namespace: missing")
    return meta


# ---------------------------------------------------------------- nodes


def _build(status: NodeStatus) -> tuple[str, str, str, str]:
    """What the node was built from, one shared tuple per distinct build (bounded: a cache of
    every Node holds few distinct ones)."""
    info = status.node_info
    if info is None:
        return _NO_BUILD
    build = (
        info.kubelet_version,
        info.container_runtime_version,
        info.os_image,
        info.kernel_version,
    )
    shared = _BUILDS.get(build)
    if shared is None:
        shared = build
        if len(_BUILDS) < _MAX_BUILDS:
            _BUILDS[build] = build
    return shared


_NO_BUILD = ("", "", "", "")
_MAX_BUILDS = 1024
_BUILDS: dict[tuple[str, str, str, str], tuple[str, str, str, str]] = {}


def node_info(obj: JSONObject) -> NodeInfo:
    node = decoded(obj, Node)
    meta = node.metadata
    spec = node.spec or _EMPTY_NODE_SPEC
    status = node.status or _EMPTY_NODE_STATUS
    return NodeInfo(
        build=_build(status),
        name=meta.name,
        uid=meta.uid,
        created_at=timestamp(meta.creation_timestamp) or 0.0,
        resource_version=meta.resource_version,
        labels=meta.labels or {},
        annotations=meta.annotations or {},
        unschedulable=spec.unschedulable is True,
        taints=tuple(
            Taint(key=t.key, effect=t.effect, value=t.value, time_added=timestamp(t.time_added))
            for t in spec.taints or ()
            if t.key
        ),
        conditions=tuple(
            NodeCondition(
                type=c.type,
                status=c.status or "Unknown",
                reason=c.reason,
                last_transition=timestamp(c.last_transition_time),
                last_heartbeat=timestamp(c.last_heartbeat_time),
            )
            for c in status.conditions or ()
            if c.type
        ),
    )


_STATUSES = {"True": "True", "False": "False", "Unknown": "Unknown"}
_EFFECTS = {e: e for e in ("NoSchedule", "PreferNoSchedule", "NoExecute")}


#: Keys of a Node (at any depth) that :func:`node_summary` never reads: big parts of a Node (its
#: images, the node info's identifiers, capacity, addresses, managed fields, annotations) and the
#: text of its conditions. None of them is a key of a list's own metadata.
NODE_SUMMARY_UNREAD = frozenset(
    {
        "annotations",
        "managedFields",
        "ownerReferences",
        "images",
        # of nodeInfo, what a cohort does not read (exporter.model.cohorts)
        "machineID",
        "systemUUID",
        "bootID",
        "kubeProxyVersion",
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


def _kept_taint(key: str, kept: dict[str, str], prefixes: tuple[str, ...]) -> str | None:
    """The key as the summary keeps it (the shared string of a bounded key), or None."""
    shared = kept.get(key)
    if shared is None and prefixes and key.startswith(prefixes):
        return key
    return shared


def node_summary(
    obj: JSONObject,
    *,
    labels: Collection[str],
    conditions: Collection[str],
    taints: Collection[str],
    taint_prefixes: tuple[str, ...] = (),
) -> NodeInfo:
    """A Node reduced to what a cache of every Node needs (the controller's): the label keys
    given, the condition types given (type, status and last transition; no reason, no
    heartbeat) and the taint keys given or under one of the prefixes given (key and effect; no
    value, no time), and what the node was built from (one tuple shared by the nodes built
    alike); no annotations, no resourceVersion (the informer keeps it). Equal to ``node_info``
    with everything else left out, and checked the same way; the strings of the bounded sets
    are shared, not one copy per Node."""
    node = decoded(obj, Node)
    meta = node.metadata
    spec = node.spec or _EMPTY_NODE_SPEC
    status = node.status or _EMPTY_NODE_STATUS
    kept_types = {t: t for t in conditions}
    kept_keys = {k: k for k in taints}
    found_conditions: list[NodeCondition] = []
    for c in status.conditions or ():
        type_ = kept_types.get(c.type)
        if type_ is not None:
            state = c.status or "Unknown"
            found_conditions.append(
                NodeCondition(
                    type=type_,
                    status=_STATUSES.get(state, state),
                    last_transition=timestamp(c.last_transition_time),
                )
            )
    found_taints = [
        Taint(key=key, effect=_EFFECTS.get(t.effect, t.effect))
        for t in spec.taints or ()
        if (key := _kept_taint(t.key, kept_keys, taint_prefixes)) is not None
    ]
    raw_labels = meta.labels or {}
    return NodeInfo(
        build=_build(status),
        name=meta.name,
        uid=meta.uid,
        created_at=timestamp(meta.creation_timestamp) or 0.0,
        labels={k: v for k in labels if (v := raw_labels.get(k)) is not None},
        unschedulable=spec.unschedulable is True,
        taints=tuple(found_taints),
        conditions=tuple(found_conditions),
    )


# ---------------------------------------------------------------- leases


def lease_info(obj: JSONObject) -> LeaseInfo:
    lease = decoded(obj, Lease)
    meta = _namespaced(lease.metadata)
    spec = lease.spec or _EMPTY_LEASE_SPEC
    return LeaseInfo(
        name=meta.name,
        namespace=meta.namespace,
        renew_time=timestamp(spec.renew_time),
        holder=spec.holder_identity or "",
        lease_duration_seconds=spec.lease_duration_seconds,
        resource_version=meta.resource_version,
        created_at=timestamp(meta.creation_timestamp),
    )


# ---------------------------------------------------------------- pods


def _container_status(s: ContainerStatus, *, init: bool) -> ContainerStatusInfo:
    state = s.state or _NO_STATE
    last_terminated = (s.last_state or _NO_STATE).terminated
    # The API sets exactly one state; a broken object may set several: terminated wins, as the
    # latest a container can be, then running, then waiting.
    current, started_at = "", None
    if state.terminated is not None:
        current, started_at = "terminated", timestamp(state.terminated.started_at)
    elif state.running is not None:
        current, started_at = "running", timestamp(state.running.started_at)
    elif state.waiting is not None:
        current = "waiting"
    return ContainerStatusInfo(
        name=s.name,
        state=current,
        ready=s.ready is True,
        restart_count=max(s.restart_count, 0),
        waiting_reason=state.waiting.reason if current == "waiting" and state.waiting else "",
        terminated_reason=state.terminated.reason if state.terminated else "",
        terminated_exit_code=state.terminated.exit_code if state.terminated else None,
        last_terminated_reason=last_terminated.reason if last_terminated else "",
        last_terminated_exit_code=last_terminated.exit_code if last_terminated else None,
        started_at=started_at,
        init=init,
    )


def _controller_kind(meta: NamespacedMeta) -> str:
    for ref in meta.owner_references or ():
        if ref.controller is True:
            return ref.kind
    return ""


def _pod_conditions(status: PodStatus) -> tuple[float | None, bool]:
    """(PodScheduled's transition time when True, Ready is True)."""
    scheduled_at: float | None = None
    ready = False
    for c in status.conditions or ():
        if c.status != "True":
            continue
        if c.type == "PodScheduled":
            scheduled_at = timestamp(c.last_transition_time)
        elif c.type == "Ready":
            ready = True
    return scheduled_at, ready


def pod_start(obj: JSONObject) -> tuple[str, float | None] | None:
    """(node, when it started) of a Running pod bound to a node that is neither a DaemonSet's
    nor a static pod's mirror: the earliest start of its running containers (None when none
    says); None for every other pod. Raises ConversionError as :func:`pod_info` does."""
    pod = decoded(obj, Pod)
    meta = _namespaced(pod.metadata)
    node = (pod.spec or _EMPTY_POD_SPEC).node_name
    status = pod.status or _EMPTY_POD_STATUS
    if not node or status.phase != "Running":
        return None
    if _controller_kind(meta) == "DaemonSet" or ANNOTATION_MIRROR in (meta.annotations or {}):
        return None
    starts = [
        at
        for c in status.container_statuses or ()
        if (running := (c.state or _NO_STATE).running) is not None
        and (at := timestamp(running.started_at)) is not None
    ]
    return node, min(starts, default=None)


def pod_info(obj: JSONObject) -> PodInfo:
    pod = decoded(obj, Pod)
    meta = _namespaced(pod.metadata)
    spec = pod.spec or _EMPTY_POD_SPEC
    status = pod.status or _EMPTY_POD_STATUS
    statuses = [_container_status(s, init=True) for s in status.init_container_statuses or ()]
    statuses += [_container_status(s, init=False) for s in status.container_statuses or ()]
    scheduled_at, ready = _pod_conditions(status)
    return PodInfo(
        uid=meta.uid,
        namespace=meta.namespace,
        name=meta.name,
        node_name=spec.node_name,
        phase=status.phase or "Pending",
        created_at=timestamp(meta.creation_timestamp) or 0.0,
        resource_version=meta.resource_version,
        labels=meta.labels or {},
        start_time=timestamp(status.start_time),
        deletion_timestamp=timestamp(meta.deletion_timestamp),
        deletion_grace_period_seconds=meta.deletion_grace_period_seconds,
        owner_kind=_controller_kind(meta),
        mirror=ANNOTATION_MIRROR in (meta.annotations or {}),
        empty_dir=any(v.empty_dir is not None for v in spec.volumes or ()),
        scheduled_at=scheduled_at,
        ready=ready,
        containers=tuple(statuses),
    )
