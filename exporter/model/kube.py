"""Plain data the API server boundary (exporter.kube) hands to the rest of nodesync.

Nothing here imports the kubernetes client: exporter.kube converts the API's JSON objects into
these classes. Timestamps are Unix seconds as floats (None when the API did not set them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# Taints that tell who owns a node's fate (DESIGN: never touch nodes another remediator owns).
TAINT_UNREACHABLE = "node.kubernetes.io/unreachable"
TAINT_NOT_READY = "node.kubernetes.io/not-ready"
TAINT_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
TAINT_CLUSTER_AUTOSCALER = "ToBeDeletedByClusterAutoscaler"
TAINT_NODESYNC = "nodesync.io/rollback"
LEASE_NAMESPACE = "kube-node-lease"


@dataclass(frozen=True, slots=True)
class NodeCondition:
    type: str  # Ready, MemoryPressure, DiskPressure, PIDPressure, NetworkUnavailable, ...
    status: str  # "True", "False", "Unknown"
    reason: str = ""
    last_transition: float | None = None
    last_heartbeat: float | None = None


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    effect: str  # NoSchedule, PreferNoSchedule, NoExecute
    value: str = ""
    time_added: float | None = None


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    uid: str
    created_at: float
    resource_version: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    conditions: tuple[NodeCondition, ...] = ()
    #: status.nodeInfo's kubeletVersion, containerRuntimeVersion, osImage and kernelVersion
    #: ("" when not reported): what the node was built from (exporter.model.cohorts)
    build: tuple[str, str, str, str] = ("", "", "", "")

    def condition(self, type_: str) -> NodeCondition | None:
        return next((c for c in self.conditions if c.type == type_), None)


@dataclass(frozen=True, slots=True)
class LeaseInfo:
    name: str  # the node's name for node leases
    namespace: str
    renew_time: float | None
    holder: str = ""
    lease_duration_seconds: int | None = None
    resource_version: str = ""
    created_at: float | None = None  # the Lease's creation: kubelet's first start on the node


@dataclass(frozen=True, slots=True)
class ContainerStatusInfo:
    """One container of a pod as the API server (i.e. kubelet's last status update) sees it."""

    name: str
    state: str  # "waiting", "running", "terminated", or "" when kubelet has not reported it
    ready: bool = False
    restart_count: int = 0
    waiting_reason: str = ""  # e.g. ContainerCreating, CrashLoopBackOff, ImagePullBackOff
    terminated_reason: str = ""
    terminated_exit_code: int | None = None
    last_terminated_reason: str = ""  # lastState.terminated.reason: OOMKilled, Error, ...
    last_terminated_exit_code: int | None = None
    started_at: float | None = None
    init: bool = False


@dataclass(frozen=True, slots=True)
class PodInfo:
    uid: str
    namespace: str
    name: str
    node_name: str
    phase: str  # Pending, Running, Succeeded, Failed, Unknown
    created_at: float
    resource_version: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    start_time: float | None = None
    deletion_timestamp: float | None = None
    deletion_grace_period_seconds: int | None = None
    owner_kind: str = ""  # kind of the controller owner reference: ReplicaSet, DaemonSet, ...
    mirror: bool = False  # a static pod's mirror (annotation kubernetes.io/config.mirror)
    empty_dir: bool = False  # has an emptyDir volume (data a drain would delete)
    scheduled_at: float | None = None  # PodScheduled condition's lastTransitionTime when True
    ready: bool = False
    containers: tuple[ContainerStatusInfo, ...] = ()

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")
