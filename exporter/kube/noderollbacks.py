"""NodeRollback objects (nodesync.io/v1alpha1, cluster-scoped) to and from the API's JSON.

The CustomResourceDefinition is deploy/base/noderollback-crd.yaml; its status is a subresource,
so a create or an update of the object ignores ``status`` and ``/status`` ignores the rest.
Times are RFC 3339 with microseconds. A field of the wrong type reads as absent; an object
without a name, a node or an action cannot be read (ConversionError: the informer skips it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from exporter.kube.api import KubeAPI
from exporter.kube.convert import ConversionError
from exporter.kube.errors import Conflict, InvalidResponse, NotFound
from exporter.kube.ratelimit import AsyncRateLimiter
from exporter.kube.resources import Resource
from exporter.model.alerts import episode_start
from exporter.model.rfc3339 import format_micro_time, parse_time
from exporter.model.rollback import (
    ACTION_LABEL,
    NODE_LABEL,
    NODE_UID_LABEL,
    Action,
    NodeRollback,
    Phase,
    PodTarget,
    RollbackSpec,
    RollbackStatus,
    StepKind,
    StepState,
    StepStatus,
    Trigger,
    Verdicts,
)
from exporter.model.rollback_state import initial_status

JSONObject = dict[str, Any]

NODEROLLBACKS = Resource(
    group="nodesync.io",
    version="v1alpha1",
    plural="noderollbacks",
    kind="NodeRollback",
    namespaced=False,
)

_MAX_LABEL = 63
#: How often a write that lost a race (409) reads again and retries before giving up.
CONFLICT_ATTEMPTS = 5


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _float(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _time(seconds: float | None) -> str | None:
    return format_micro_time(seconds) if seconds is not None else None


def _label_value(value: str) -> str:
    """A valid label value: the value itself, or nothing when it would not be one."""
    ok = len(value) <= _MAX_LABEL and all(c.isalnum() or c in "-_." for c in value)
    return value if ok and value[:1].isalnum() and value[-1:].isalnum() else ""


# ---------------------------------------------------------------- to JSON


def _trigger_json(t: Trigger) -> JSONObject:
    return {"alertname": t.alertname, "fingerprint": t.fingerprint, "startsAt": _time(t.starts_at)}


def spec_json(spec: RollbackSpec) -> JSONObject:
    d = spec.decision
    out: JSONObject = {
        "nodeName": spec.node,
        "nodeUID": spec.node_uid,
        "action": spec.action.value,
        "wave": spec.wave,
        "deleteNode": spec.delete_node,
        "paused": spec.paused,
        "trigger": _trigger_json(spec.trigger),
        "decision": {
            "decidedAt": _time(d.decided_at),
            "decidedBy": d.decided_by,
            "nodeCreatedAt": _time(d.node_created_at),
            "failingSince": _time(d.failing_since),
            "blastRadius": {
                "absoluteUsed": d.absolute_used,
                "absoluteLimit": d.absolute_limit,
                "windowSeconds": d.window_seconds,
                "waveSize": d.wave_size,
                "waveUsed": d.wave_used,
                "waveLimit": d.wave_limit,
            },
            "correlatedFailure": {
                "establishedNodes": d.established_nodes,
                "failing": d.established_failing,
            },
        },
    }
    if spec.pod is not None:
        out["pod"] = {"namespace": spec.pod.namespace, "name": spec.pod.name, "uid": spec.pod.uid}
    return _without_empty(out)


def _without_empty(obj: JSONObject) -> JSONObject:
    """``obj`` without its empty strings, at any depth (an absent field reads as "" all the
    same), as the status leaves them out: some API servers refuse "" for a string of the schema
    (kube-apiserver 1.20 built with Go >= 1.19 takes a decoded "" for null: 422)."""
    return {k: _without_empty(v) if isinstance(v, dict) else v for k, v in obj.items() if v != ""}


def _step_json(s: StepStatus) -> JSONObject:
    out: JSONObject = {"name": s.kind.value, "state": s.state.value, "attempts": s.attempts}
    for key, value in (
        ("reason", s.reason),
        ("message", s.message),
        ("request", s.request),
        ("startedAt", _time(s.started_at)),
        ("finishedAt", _time(s.finished_at)),
        ("notBefore", _time(s.not_before)),
    ):
        if value:
            out[key] = value
    if s.made_change:
        out["madeChange"] = True
    if s.observed:
        out["observed"] = dict(s.observed)
    return out


def status_json(status: RollbackStatus) -> JSONObject:
    out: JSONObject = {
        "phase": status.phase.value,
        "step": status.step,
        "steps": [_step_json(s) for s in status.steps],
        "triggers": [_trigger_json(t) for t in status.triggers],
        "observedGeneration": status.observed_generation,
    }
    for key, value in (
        ("reason", status.reason),
        ("message", status.message),
        ("actionRequired", status.action_required),
        ("startedAt", _time(status.started_at)),
        ("finishedAt", _time(status.finished_at)),
    ):
        if value:
            out[key] = value
    return out


def labels(spec: RollbackSpec) -> dict[str, str]:
    found = {
        NODE_LABEL: _label_value(spec.node),
        NODE_UID_LABEL: _label_value(spec.node_uid),
        ACTION_LABEL: spec.action.value,
    }
    return {k: v for k, v in found.items() if v}


def object_json(rollback: NodeRollback) -> JSONObject:
    """The whole object, as created (and as ``nodesync plan`` shows it)."""
    meta: JSONObject = {"name": rollback.name, "labels": labels(rollback.spec)}
    if rollback.resource_version:
        meta["resourceVersion"] = rollback.resource_version
    if rollback.uid:
        meta["uid"] = rollback.uid
    return {
        "apiVersion": NODEROLLBACKS.api_version,
        "kind": NODEROLLBACKS.kind,
        "metadata": meta,
        "spec": spec_json(rollback.spec),
        "status": status_json(rollback.status),
    }


# ---------------------------------------------------------------- from JSON


def _trigger(value: Any) -> Trigger | None:
    v = _dict(value)
    starts = parse_time(v.get("startsAt"))
    if not _str(v.get("fingerprint")) or starts is None:
        return None
    return Trigger(_str(v.get("alertname")), _str(v.get("fingerprint")), episode_start(starts))


def _verdicts(value: Any) -> Verdicts:
    d = _dict(value)
    radius, correlated = _dict(d.get("blastRadius")), _dict(d.get("correlatedFailure"))
    return Verdicts(
        decided_at=parse_time(d.get("decidedAt")) or 0.0,
        decided_by=_str(d.get("decidedBy")),
        node_created_at=parse_time(d.get("nodeCreatedAt")) or 0.0,
        failing_since=parse_time(d.get("failingSince")),
        absolute_used=_int(radius.get("absoluteUsed")),
        absolute_limit=_int(radius.get("absoluteLimit")),
        window_seconds=_float(radius.get("windowSeconds")),
        wave_size=_int(radius.get("waveSize")),
        wave_used=_int(radius.get("waveUsed")),
        wave_limit=_int(radius.get("waveLimit")),
        established_nodes=_int(correlated.get("establishedNodes")),
        established_failing=_int(correlated.get("failing")),
    )


def _spec(raw: Any, name: str) -> RollbackSpec:
    spec = _dict(raw)
    try:
        action = Action(spec.get("action"))
    except ValueError:
        raise ConversionError(f"noderollback {name}: no valid spec.action") from None
    node = _str(spec.get("nodeName"))
    trigger = _trigger(spec.get("trigger"))
    if not node or trigger is None:
        raise ConversionError(f"noderollback {name}: spec.nodeName or spec.trigger missing")
    pod_raw = _dict(spec.get("pod"))
    pod = (
        PodTarget(
            _str(pod_raw.get("namespace")), _str(pod_raw.get("name")), _str(pod_raw.get("uid"))
        )
        if pod_raw
        else None
    )
    return RollbackSpec(
        node=node,
        node_uid=_str(spec.get("nodeUID")),
        action=action,
        trigger=trigger,
        decision=_verdicts(spec.get("decision")),
        wave=_str(spec.get("wave")),
        delete_node=spec.get("deleteNode") is True,
        pod=pod,
        paused=spec.get("paused") is True,
    )


def _step(value: Any) -> StepStatus | None:
    v = _dict(value)
    try:
        kind = StepKind(v.get("name"))
        state = StepState(v.get("state", StepState.PENDING.value))
    except ValueError:
        return None
    observed = _dict(v.get("observed"))
    return StepStatus(
        kind=kind,
        state=state,
        reason=_str(v.get("reason")),
        message=_str(v.get("message")),
        attempts=_int(v.get("attempts")),
        started_at=parse_time(v.get("startedAt")),
        finished_at=parse_time(v.get("finishedAt")),
        made_change=v.get("madeChange") is True,
        observed={k: x for k, x in observed.items() if isinstance(x, str)},
        not_before=parse_time(v.get("notBefore")),
        request=_str(v.get("request")),
    )


def _status(raw: Any, spec: RollbackSpec) -> RollbackStatus:
    status = _dict(raw)
    try:
        phase = Phase(status.get("phase"))
    except ValueError:
        return initial_status(spec, generation=0)  # created, no status written yet
    steps = tuple(s for s in map(_step, status.get("steps") or ()) if s is not None)
    triggers = tuple(t for t in map(_trigger, status.get("triggers") or ()) if t is not None)
    return RollbackStatus(
        phase=phase,
        reason=_str(status.get("reason")),
        message=_str(status.get("message")),
        steps=steps,
        triggers=triggers or (spec.trigger,),
        observed_generation=_int(status.get("observedGeneration")),
        started_at=parse_time(status.get("startedAt")),
        finished_at=parse_time(status.get("finishedAt")),
        action_required=_str(status.get("actionRequired")),
    )


def node_rollback(obj: JSONObject) -> NodeRollback:
    """The object as the model reads it; ConversionError without name, node or action."""
    meta = _dict(obj.get("metadata"))
    name = _str(meta.get("name"))
    if not name:
        raise ConversionError("noderollback without a name")
    spec = _spec(obj.get("spec"), name)
    generation = _int(meta.get("generation")) or 1
    return NodeRollback(
        name=name,
        spec=spec,
        status=_status(obj.get("status"), spec),
        uid=_str(meta.get("uid")),
        resource_version=_str(meta.get("resourceVersion")),
        generation=generation,
        created_at=parse_time(meta.get("creationTimestamp")) or 0.0,
    )


# ---------------------------------------------------------------- writes


class RollbackWrites:
    """Creates and updates NodeRollbacks. Every write takes a token of the shared rate limiter
    (the same bucket as every other write) and carries the resourceVersion it read: of two
    writers, exactly one succeeds, the other gets Conflict and must read again."""

    def __init__(self, api: KubeAPI, *, limiter: AsyncRateLimiter | None = None) -> None:
        self._api = api
        self._limiter = limiter

    async def _write(self, method: str, verb: str, path: str, body: JSONObject) -> NodeRollback:
        if self._limiter is not None:
            await self._limiter.acquire()
        answer = await self._api.request(method, NODEROLLBACKS, verb, path, body=body)
        if not isinstance(answer, dict):
            raise InvalidResponse(200, "InvalidResponse", "the answer is not a NodeRollback")
        try:
            return node_rollback(answer)
        except ConversionError as exc:
            raise InvalidResponse(200, "InvalidResponse", str(exc)) from exc

    async def get(self, name: str) -> NodeRollback | None:
        try:
            raw = await self._api.get(NODEROLLBACKS, name)
        except NotFound:
            return None
        try:
            return node_rollback(raw)
        except ConversionError as exc:
            raise InvalidResponse(200, "InvalidResponse", str(exc)) from exc

    async def create(self, rollback: NodeRollback) -> NodeRollback:
        """Create the object, then write its first status (a create ignores ``status``).
        AlreadyExists (another writer made the same decision) is raised."""
        body = object_json(rollback)
        del body["status"]
        for server_set in ("resourceVersion", "uid"):  # a create refuses them (500)
            body["metadata"].pop(server_set, None)
        created = await self._write("POST", "create", NODEROLLBACKS.path(), body)
        return await self.update_status(created, rollback.status)

    async def update_status(self, current: NodeRollback, status: RollbackStatus) -> NodeRollback:
        """Replace the status of ``current`` (at its resourceVersion); Conflict when the object
        changed since it was read, NotFound when it was deleted."""
        body = object_json(current)
        body["status"] = status_json(status)
        path = NODEROLLBACKS.path(None, current.name) + "/status"
        return await self._write("PUT", "update", path, body)

    async def update_spec(self, current: NodeRollback, spec: RollbackSpec) -> NodeRollback:
        """Replace the spec of ``current`` (at its resourceVersion), e.g. an escalation."""
        body = object_json(dataclasses.replace(current, spec=spec))
        del body["status"]
        return await self._write("PUT", "update", NODEROLLBACKS.path(None, current.name), body)

    async def change_status(
        self, name: str, change: Callable[[NodeRollback], RollbackStatus | None]
    ) -> NodeRollback | None:
        """Read the object, apply ``change`` to it (None: nothing to write), write the result at
        the resourceVersion read; on Conflict read again and apply ``change`` to the fresh
        object. Returns the object as written (or as read), None when it does not exist."""
        for _ in range(CONFLICT_ATTEMPTS):
            current = await self.get(name)
            if current is None:
                return None
            status = change(current)
            if status is None or status == current.status:
                return current
            try:
                return await self.update_status(current, status)
            except Conflict:
                continue
        raise Conflict(409, "Conflict", f"noderollback {name} kept changing")

    async def change_spec(
        self, name: str, change: Callable[[NodeRollback], RollbackSpec | None]
    ) -> NodeRollback | None:
        """As :meth:`change_status`, for the spec."""
        for _ in range(CONFLICT_ATTEMPTS):
            current = await self.get(name)
            if current is None:
                return None
            spec = change(current)
            if spec is None or spec == current.spec:
                return current
            try:
                return await self.update_spec(current, spec)
            except Conflict:
                continue
        raise Conflict(409, "Conflict", f"noderollback {name} kept changing")

    async def delete(self, current: NodeRollback) -> bool:
        """Delete ``current`` if it is still that object (uid precondition); False when gone."""
        if self._limiter is not None:
            await self._limiter.acquire()
        options = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {"uid": current.uid, "resourceVersion": current.resource_version},
        }
        try:
            await self._api.request(
                "DELETE",
                NODEROLLBACKS,
                "delete",
                NODEROLLBACKS.path(None, current.name),
                body=options,
            )
        except NotFound:
            return False
        return True
