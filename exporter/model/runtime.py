"""Plain data the container runtime boundary (exporter.cri) hands to the rest of nodesync.

Nothing here imports grpc or protobuf: exporter.cri converts its messages into these classes.
Timestamps are Unix seconds as floats (CRI reports nanoseconds; the boundary converts).
A sandbox or container holds what nodesync's metrics, drift and cleanup read, nothing more:
not the labels and annotations kubelet copies from the pod (which can be kilobytes each: the
``last-applied-configuration`` of ``kubectl apply``), not the image or the termination message.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

# Labels containerd's CRI plugin receives from kubelet on every sandbox and container.
LABEL_POD_NAME = "io.kubernetes.pod.name"
LABEL_POD_NAMESPACE = "io.kubernetes.pod.namespace"
LABEL_POD_UID = "io.kubernetes.pod.uid"
LABEL_CONTAINER_NAME = "io.kubernetes.container.name"
#: The annotation kubelet puts on every sandbox: where the pod came from (``api``, or ``file`` and
#: ``http`` for a static pod).
ANNOTATION_CONFIG_SOURCE = "kubernetes.io/config.source"


class SandboxState(enum.Enum):
    READY = "ready"
    NOTREADY = "notready"


class ContainerState(enum.Enum):
    CREATED = "created"
    RUNNING = "running"
    EXITED = "exited"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class PodSandbox:
    id: str
    name: str
    namespace: str
    uid: str
    attempt: int
    state: SandboxState
    created_at: float
    config_source: str = ""  # its ANNOTATION_CONFIG_SOURCE


@dataclass(frozen=True, slots=True)
class Container:
    """One container as the runtime lists it.

    ``exit_code``, ``reason``, ``started_at`` and ``finished_at`` come from ContainerStatus and
    are only filled for containers that have exited. ``settled`` is false while an exited
    container's record may still change: its status could not be read yet, or it says a
    SIGKILL without OOMKilled and the runtime's OOM event may still be on its way (see
    :func:`oom_reason_may_follow`). Pod identity comes from the sandbox's metadata (joined by
    ``pod_sandbox_id``) or, failing that, from kubelet's ``io.kubernetes.pod.*`` labels, and
    the name from the container's metadata or, failing that, its
    ``io.kubernetes.container.name`` label (exporter.cri.convert reads them).
    """

    id: str
    pod_sandbox_id: str
    name: str
    attempt: int
    state: ContainerState
    created_at: float
    pod_uid: str = ""
    pod_namespace: str = ""
    pod_name: str = ""
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    reason: str = ""
    settled: bool = True


#: The reason containerd gives a container the kernel's OOM killer ended.
OOM_KILLED: Final = "OOMKilled"

#: What a process killed by SIGKILL exits with (128 + 9), the OOM killer's signal.
_SIGKILL_EXIT_CODE: Final = 137


def oom_reason_may_follow(container: Container) -> bool:
    """Whether an exited container's reason may still turn into OOMKilled.

    containerd handles a task's exit and its OOM event separately, in the order they reach it.
    When the exit comes first, ContainerStatus says exit code 137 and reason ``Error`` until
    the OOM event sets ``OOMKilled``. A SIGKILL from anyone else looks the same, for good.
    """
    return container.exit_code == _SIGKILL_EXIT_CODE and container.reason != OOM_KILLED


@dataclass(frozen=True, slots=True)
class ContainerStats:
    container_id: str
    timestamp: float
    cpu_usage_core_seconds: float | None = None
    memory_working_set_bytes: int | None = None
    memory_usage_bytes: int | None = None
    memory_rss_bytes: int | None = None
    writable_layer_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class RuntimeCondition:
    type: str
    status: bool
    reason: str = ""
    message: str = ""


@dataclass(frozen=True, slots=True)
class FilesystemUsage:
    mountpoint: str
    timestamp: float
    used_bytes: int | None = None
    inodes_used: int | None = None


@dataclass(frozen=True, slots=True)
class RuntimeVersion:
    runtime_name: str
    runtime_version: str
    runtime_api_version: str


@dataclass(frozen=True, slots=True)
class RuntimeSnapshot:
    """Everything one sync cycle read from the runtime: its state, not its resource usage
    (:class:`RuntimeStats`, read on a period of its own)."""

    taken_at: float
    version: RuntimeVersion | None
    conditions: tuple[RuntimeCondition, ...]
    sandboxes: tuple[PodSandbox, ...]
    containers: tuple[Container, ...]
    image_filesystems: tuple[FilesystemUsage, ...] = ()


@dataclass(frozen=True, slots=True)
class RuntimeStats:
    """One read of the containers' resource usage (CRI ListContainerStats). It costs the
    runtime ~100x the state calls (containerd asks every shim), so it has its own period."""

    taken_at: float
    containers: tuple[ContainerStats, ...]
