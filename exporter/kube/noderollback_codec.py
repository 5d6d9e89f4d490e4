"""NodeRollback objects (nodesync.io/v1alpha1, cluster-scoped) to and from the API's JSON.

The CustomResourceDefinition is deploy/base/noderollback-crd.yaml; its status is a subresource,
so a create or an update of the object ignores ``status`` and ``/status`` ignores the rest.
Times are RFC 3339 with microseconds.

Reading goes through msgspec structs of the CRD's fields: an object whose fields do not have
the CRD's types, or without a name, a node, an action or a trigger, is refused with
ConversionError naming the field's JSON path (``$.status.steps[0].state: invalid enum value
'exploded'``): the informer skips it and a read of it is an InvalidResponse, so a damaged
status never passes for another state. An object without a status (created, its first status
not yet written) reads as just created.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from exporter.kube.convert import ConversionError, decoded
from exporter.kube.objects import ApiStruct
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

_Name = Annotated[str, msgspec.Meta(min_length=1)]


class WireTrigger(ApiStruct, frozen=True, gc=False):
    fingerprint: _Name
    starts_at: str
    alertname: str = ""


class WireBlastRadius(ApiStruct, frozen=True, gc=False):
    absolute_used: int = 0
    absolute_limit: int = 0
    window_seconds: float = 0.0
    wave_size: int = 0
    wave_used: int = 0
    wave_limit: int = 0


class WireCorrelated(ApiStruct, frozen=True, gc=False):
    established_nodes: int = 0
    failing: int = 0


class WireDecision(ApiStruct, frozen=True, gc=False):
    decided_at: str | None = None
    decided_by: str = ""
    node_created_at: str | None = None
    failing_since: str | None = None
    blast_radius: WireBlastRadius = WireBlastRadius()
    correlated_failure: WireCorrelated = WireCorrelated()


class WirePod(ApiStruct, frozen=True, gc=False):
    namespace: str = ""
    name: str = ""
    uid: str = ""


class WireSpec(
    ApiStruct,
    frozen=True,
    gc=False,
    rename={"node": "nodeName", "node_uid": "nodeUID", "delete_node": "deleteNode"},
):
    node: _Name
    action: Action
    trigger: WireTrigger
    node_uid: str = ""
    decision: WireDecision = WireDecision()
    wave: str = ""
    delete_node: bool = False
    pod: WirePod | None = None
    paused: bool = False


class WireStep(ApiStruct, frozen=True, gc=False):
    name: StepKind
    state: StepState = StepState.PENDING
    reason: str = ""
    message: str = ""
    attempts: int = 0
    started_at: str | None = None
    finished_at: str | None = None
    made_change: bool = False
    observed: dict[str, str] | None = None
    not_before: str | None = None
    request: str = ""


class WireStatus(ApiStruct, frozen=True, gc=False):
    phase: Phase | None = None  # None: created, its first status not written yet
    reason: str = ""
    message: str = ""
    steps: list[WireStep] = msgspec.field(default_factory=list)
    triggers: list[WireTrigger] = msgspec.field(default_factory=list)
    observed_generation: int = 0
    started_at: str | None = None
    finished_at: str | None = None
    action_required: str = ""


class WireMeta(ApiStruct, frozen=True, gc=False):
    name: _Name
    uid: str = ""
    resource_version: str = ""
    generation: int = 0
    creation_timestamp: str | None = None


class WireNodeRollback(ApiStruct, frozen=True, gc=False):
    metadata: WireMeta
    spec: WireSpec
    status: WireStatus | None = None


def _trigger(wire: WireTrigger, path: str) -> Trigger:
    starts = parse_time(wire.starts_at)
    if starts is None:
        raise ConversionError(f"{path}.startsAt: not an RFC 3339 time: {wire.starts_at[:64]!r}")
    return Trigger(wire.alertname, wire.fingerprint, episode_start(starts))


def _verdicts(d: WireDecision) -> Verdicts:
    radius, correlated = d.blast_radius, d.correlated_failure
    return Verdicts(
        decided_at=parse_time(d.decided_at) or 0.0,
        decided_by=d.decided_by,
        node_created_at=parse_time(d.node_created_at) or 0.0,
        failing_since=parse_time(d.failing_since),
        absolute_used=radius.absolute_used,
        absolute_limit=radius.absolute_limit,
        window_seconds=radius.window_seconds,
        wave_size=radius.wave_size,
        wave_used=radius.wave_used,
        wave_limit=radius.wave_limit,
        established_nodes=correlated.established_nodes,
        established_failing=correlated.failing,
    )


def _spec(spec: WireSpec) -> RollbackSpec:
    pod = spec.pod
    return RollbackSpec(
        node=spec.node,
        node_uid=spec.node_uid,
        action=spec.action,
        trigger=_trigger(spec.trigger, "$.spec.trigger"),
        decision=_verdicts(spec.decision),
        wave=spec.wave,
        delete_node=spec.delete_node,
        pod=None if pod is None else PodTarget(pod.namespace, pod.name, pod.uid),
        paused=spec.paused,
    )


def _step(v: WireStep) -> StepStatus:
    return StepStatus(
        kind=v.name,
        state=v.state,
        reason=v.reason,
        message=v.message,
        attempts=v.attempts,
        started_at=parse_time(v.started_at),
        finished_at=parse_time(v.finished_at),
        made_change=v.made_change,
        observed=v.observed or {},
        not_before=parse_time(v.not_before),
        request=v.request,
    )


def _status(status: WireStatus | None, spec: RollbackSpec) -> RollbackStatus:
    if status is None or status.phase is None:
        return initial_status(spec, generation=0)  # created, no status written yet
    triggers = tuple(_trigger(t, f"$.status.triggers[{i}]") for i, t in enumerate(status.triggers))
    return RollbackStatus(
        phase=status.phase,
        reason=status.reason,
        message=status.message,
        steps=tuple(map(_step, status.steps)),
        triggers=triggers or (spec.trigger,),
        observed_generation=status.observed_generation,
        started_at=parse_time(status.started_at),
        finished_at=parse_time(status.finished_at),
        action_required=status.action_required,
    )


def node_rollback(obj: JSONObject) -> NodeRollback:
    """The object as the model reads it; ConversionError, naming the field, for anything that
    is not a NodeRollback as the CRD describes it."""
    wire = decoded(obj, WireNodeRollback)
    meta = wire.metadata
    spec = _spec(wire.spec)
    return NodeRollback(
        name=meta.name,
        spec=spec,
        status=_status(wire.status, spec),
        uid=meta.uid,
        resource_version=meta.resource_version,
        generation=meta.generation or 1,
        created_at=parse_time(meta.creation_timestamp) or 0.0,
    )
