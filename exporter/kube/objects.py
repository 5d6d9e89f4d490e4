"""The Node, Lease and Pod as nodesync reads them: msgspec structs of the fields its
converters (exporter.kube.convert) read, camelCase on the wire, unknown fields ignored, ``null``
read as absent wherever the API server may omit a field. To read one more field of an object:
one line here, one in its converter. Also the API's envelopes: the Status of a failed call and
a watch event's line."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

_Name = Annotated[str, msgspec.Meta(min_length=1)]
_Labels = dict[str, str] | None


class ApiStruct(msgspec.Struct, frozen=True, gc=False, rename="camel"):
    """An API object or a part of one: camelCase on the wire, unknown fields ignored."""


class OwnerReference(ApiStruct, frozen=True, gc=False):
    kind: str = ""
    controller: bool | None = None


class ObjectMeta(ApiStruct, frozen=True, gc=False):
    name: _Name
    uid: str = ""
    resource_version: str = ""
    creation_timestamp: str | None = None
    labels: _Labels = None
    annotations: _Labels = None


class NamespacedMeta(ObjectMeta, frozen=True, gc=False):
    namespace: _Name = ""  # required in practice: checked by _namespaced
    owner_references: list[OwnerReference] | None = None
    deletion_timestamp: str | None = None
    deletion_grace_period_seconds: int | None = None


class TaintWire(ApiStruct, frozen=True, gc=False):
    key: str = ""
    effect: str = ""
    value: str = ""
    time_added: str | None = None


class NodeSpec(ApiStruct, frozen=True, gc=False):
    unschedulable: bool | None = None
    taints: list[TaintWire] | None = None


class NodeConditionWire(ApiStruct, frozen=True, gc=False):
    type: str = ""
    status: str = ""
    reason: str = ""
    last_transition_time: str | None = None
    last_heartbeat_time: str | None = None


class NodeSystemInfo(ApiStruct, frozen=True, gc=False):
    kubelet_version: str = ""
    container_runtime_version: str = ""
    os_image: str = ""
    kernel_version: str = ""


class NodeStatus(ApiStruct, frozen=True, gc=False):
    conditions: list[NodeConditionWire] | None = None
    node_info: NodeSystemInfo | None = None


class Node(ApiStruct, frozen=True, gc=False):
    metadata: ObjectMeta
    spec: NodeSpec | None = None
    status: NodeStatus | None = None


class LeaseSpec(ApiStruct, frozen=True, gc=False):
    holder_identity: str | None = None
    lease_duration_seconds: int | None = None
    acquire_time: str | None = None
    renew_time: str | None = None
    lease_transitions: int | None = None


class Lease(ApiStruct, frozen=True, gc=False):
    metadata: NamespacedMeta
    spec: LeaseSpec | None = None


class Volume(ApiStruct, frozen=True, gc=False):
    empty_dir: dict[str, Any] | None = None


class PodSpec(ApiStruct, frozen=True, gc=False):
    node_name: str = ""
    volumes: list[Volume] | None = None


class Started(ApiStruct, frozen=True, gc=False):
    started_at: str | None = None


class Waiting(ApiStruct, frozen=True, gc=False):
    reason: str = ""


class Terminated(ApiStruct, frozen=True, gc=False):
    reason: str = ""
    exit_code: int | None = None
    started_at: str | None = None


class ContainerState(ApiStruct, frozen=True, gc=False):
    waiting: Waiting | None = None
    running: Started | None = None
    terminated: Terminated | None = None


class ContainerStatus(ApiStruct, frozen=True, gc=False):
    name: _Name
    ready: bool | None = None
    restart_count: int = 0
    state: ContainerState | None = None
    last_state: ContainerState | None = None


class PodCondition(ApiStruct, frozen=True, gc=False):
    type: str = ""
    status: str = ""
    last_transition_time: str | None = None


class PodStatus(ApiStruct, frozen=True, gc=False):
    phase: str | None = None
    start_time: str | None = None
    conditions: list[PodCondition] | None = None
    init_container_statuses: list[ContainerStatus] | None = None
    container_statuses: list[ContainerStatus] | None = None


class Pod(ApiStruct, frozen=True, gc=False):
    metadata: NamespacedMeta
    spec: PodSpec | None = None
    status: PodStatus | None = None


class StatusCause(ApiStruct, frozen=True, gc=False):
    reason: str | None = None


class StatusDetails(ApiStruct, frozen=True, gc=False):
    retry_after_seconds: Annotated[float, msgspec.Meta(ge=0)] | None = None
    causes: list[StatusCause] | None = None


class Status(ApiStruct, frozen=True, gc=False):
    """The body of a failed call, and the object of a watch's ERROR event."""

    code: int | None = None
    reason: str | None = None
    message: str | None = None
    details: StatusDetails | None = None


class WatchLine(ApiStruct, frozen=True, gc=False):
    """One line of a watch: the event's type and its object, left as JSON for the informer."""

    type: Annotated[str, msgspec.Meta(min_length=1)]
    object: dict[str, Any]
