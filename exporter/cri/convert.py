"""CRI v1 protobuf messages -> exporter.model.runtime dataclasses.

CRI timestamps are nanoseconds since the epoch; the model uses float seconds. A zero timestamp
means "not set" and becomes ``None`` where the model allows it.
"""

from __future__ import annotations

from typing import Any

from exporter.cri.pb import api_pb2
from exporter.model.runtime import (
    ANNOTATION_CONFIG_SOURCE,
    LABEL_CONTAINER_NAME,
    LABEL_POD_NAME,
    LABEL_POD_NAMESPACE,
    LABEL_POD_UID,
    Container,
    ContainerState,
    ContainerStats,
    FilesystemUsage,
    PodSandbox,
    RuntimeCondition,
    RuntimeVersion,
    SandboxState,
)

_NANOS = 1_000_000_000

_SANDBOX_STATES: dict[int, SandboxState] = {
    api_pb2.SANDBOX_READY: SandboxState.READY,
    api_pb2.SANDBOX_NOTREADY: SandboxState.NOTREADY,
}
_CONTAINER_STATES: dict[int, ContainerState] = {
    api_pb2.CONTAINER_CREATED: ContainerState.CREATED,
    api_pb2.CONTAINER_RUNNING: ContainerState.RUNNING,
    api_pb2.CONTAINER_EXITED: ContainerState.EXITED,
    api_pb2.CONTAINER_UNKNOWN: ContainerState.UNKNOWN,
}


def seconds(nanoseconds: int) -> float:
    """Nanoseconds since the epoch -> float seconds."""
    return nanoseconds / _NANOS


def optional_seconds(nanoseconds: int) -> float | None:
    """Like :func:`seconds`, but 0 (CRI's "not specified") becomes None."""
    return seconds(nanoseconds) if nanoseconds else None


def sandbox_state(value: int) -> SandboxState:
    # A sandbox state this subset does not know is not ready.
    return _SANDBOX_STATES.get(value, SandboxState.NOTREADY)


def container_state(value: int) -> ContainerState:
    return _CONTAINER_STATES.get(value, ContainerState.UNKNOWN)


def _uint64(msg: Any, name: str) -> int | None:
    return int(getattr(msg, name).value) if msg.HasField(name) else None


def version(reply: Any) -> RuntimeVersion:
    return RuntimeVersion(
        runtime_name=reply.runtime_name,
        runtime_version=reply.runtime_version,
        runtime_api_version=reply.runtime_api_version,
    )


def conditions(reply: Any) -> tuple[RuntimeCondition, ...]:
    return tuple(
        RuntimeCondition(type=c.type, status=c.status, reason=c.reason, message=c.message)
        for c in reply.status.conditions
    )


def pod_sandbox(msg: Any) -> PodSandbox:
    """A ``PodSandbox`` (ListPodSandbox) or ``PodSandboxStatus`` message."""
    return PodSandbox(
        id=msg.id,
        name=msg.metadata.name,
        namespace=msg.metadata.namespace,
        uid=msg.metadata.uid,
        attempt=msg.metadata.attempt,
        state=sandbox_state(msg.state),
        created_at=seconds(msg.created_at),
        config_source=msg.annotations.get(ANNOTATION_CONFIG_SOURCE, ""),
    )


def container(msg: Any) -> Container:
    """A ``Container`` message of ListContainers; pod identity from kubelet's labels."""
    labels = msg.labels
    return Container(
        id=msg.id,
        pod_sandbox_id=msg.pod_sandbox_id,
        name=msg.metadata.name or labels.get(LABEL_CONTAINER_NAME, ""),
        attempt=msg.metadata.attempt,
        state=container_state(msg.state),
        created_at=seconds(msg.created_at),
        pod_uid=labels.get(LABEL_POD_UID, ""),
        pod_namespace=labels.get(LABEL_POD_NAMESPACE, ""),
        pod_name=labels.get(LABEL_POD_NAME, ""),
    )


def container_status(msg: Any, pod_sandbox_id: str = "") -> Container:
    """A ``ContainerStatus`` message. It does not carry the sandbox id: pass it if known.

    ``exit_code`` is only meaningful (and only set) once the container finished.
    """
    labels = msg.labels
    finished_at = optional_seconds(msg.finished_at)
    return Container(
        id=msg.id,
        pod_sandbox_id=pod_sandbox_id,
        name=msg.metadata.name or labels.get(LABEL_CONTAINER_NAME, ""),
        attempt=msg.metadata.attempt,
        state=container_state(msg.state),
        created_at=seconds(msg.created_at),
        started_at=optional_seconds(msg.started_at),
        finished_at=finished_at,
        exit_code=msg.exit_code if finished_at is not None else None,
        reason=msg.reason,
        pod_uid=labels.get(LABEL_POD_UID, ""),
        pod_namespace=labels.get(LABEL_POD_NAMESPACE, ""),
        pod_name=labels.get(LABEL_POD_NAME, ""),
    )


def container_stats(msg: Any) -> ContainerStats:
    cpu = msg.cpu if msg.HasField("cpu") else None
    memory = msg.memory if msg.HasField("memory") else None
    layer = msg.writable_layer if msg.HasField("writable_layer") else None
    timestamps = [m.timestamp for m in (cpu, memory, layer) if m is not None and m.timestamp]
    core_nanos = _uint64(cpu, "usage_core_nano_seconds") if cpu is not None else None
    return ContainerStats(
        container_id=msg.attributes.id,
        timestamp=seconds(timestamps[0]) if timestamps else 0.0,
        cpu_usage_core_seconds=seconds(core_nanos) if core_nanos is not None else None,
        memory_working_set_bytes=_uint64(memory, "working_set_bytes")
        if memory is not None
        else None,
        memory_usage_bytes=_uint64(memory, "usage_bytes") if memory is not None else None,
        memory_rss_bytes=_uint64(memory, "rss_bytes") if memory is not None else None,
        writable_layer_bytes=_uint64(layer, "used_bytes") if layer is not None else None,
    )


def filesystem_usage(msg: Any) -> FilesystemUsage:
    return FilesystemUsage(
        mountpoint=msg.fs_id.mountpoint,
        timestamp=seconds(msg.timestamp),
        used_bytes=_uint64(msg, "used_bytes"),
        inodes_used=_uint64(msg, "inodes_used"),
    )
