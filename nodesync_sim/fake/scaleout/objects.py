"""The JSON a kubelet (and the scheduler binding its pods) sends: Node, node conditions, Pod and
pod statuses. Pure functions of their inputs; times are Unix seconds."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from exporter.model.rfc3339 import format_time
from nodesync_sim.fake.scaleout.layout import OWNER_DAEMONSET, NodePlan, PodPlan
from nodesync_sim.fake.scaleout.runtime import IMAGE, Termination
from nodesync_sim.fake.scaleout.scenario import Taint

JSONObject = dict[str, Any]

KUBELET_VERSION: Final = "v1.30.0-nodesync-sim"
OS_IMAGE: Final = "nodesync-sim"
KERNEL_VERSION: Final = "6.1.0-sim"

# Ready reasons and messages as kubelet writes them.
READY_REASON: Final = "KubeletReady"
READY_MESSAGE: Final = "kubelet is posting ready status"
NOT_READY_REASON: Final = "KubeletNotReady"
STARTING_MESSAGE: Final = "container runtime status check may not have completed yet"
CNI_MESSAGE: Final = (
    "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
    "message:Network plugin returns error: cni plugin not initialized"
)
#: kubelet 1.20's Ready once its runtime requests time out: its reason is KubeletNotReady too.
RUNTIME_MESSAGE: Final = "container runtime is down"
UNKNOWN_REASON: Final = "NodeStatusUnknown"
UNKNOWN_MESSAGE: Final = "Kubelet stopped posting node status."

_PRESSURES: Final = (
    ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
)
CONDITION_TYPES: Final = ("Ready", *(p[0] for p in _PRESSURES))


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: str  # True, False, Unknown
    reason: str
    message: str


MEMORY_PRESSURE_CONDITION: Final = Condition(
    "MemoryPressure",
    "True",
    "KubeletHasInsufficientMemory",
    "kubelet has insufficient memory available",
)


def kubelet_conditions(
    ready: str, reason: str, message: str, *, memory_pressure: bool = False
) -> list[Condition]:
    """What a kubelet reports: Ready as given, no pressure (or memory pressure)."""
    pressures = [Condition(kind, "False", why, text) for kind, why, text in _PRESSURES]
    if memory_pressure:
        pressures[0] = MEMORY_PRESSURE_CONDITION
    return [Condition("Ready", ready, reason, message), *pressures]


def unknown_conditions() -> list[Condition]:
    """What the node lifecycle controller writes once the kubelet stopped posting."""
    return [Condition(kind, "Unknown", UNKNOWN_REASON, UNKNOWN_MESSAGE) for kind in CONDITION_TYPES]


def conditions_json(
    conditions: Sequence[Condition],
    transitions: Mapping[str, float],
    heartbeat: float | None,
) -> list[JSONObject]:
    """Conditions with their transition times (``transitions`` by type) and, when given, the
    heartbeat (the lifecycle controller keeps the kubelet's last heartbeat: None)."""
    out = []
    for c in conditions:
        item: JSONObject = {
            "type": c.type,
            "status": c.status,
            "reason": c.reason,
            "message": c.message,
            "lastTransitionTime": format_time(transitions[c.type]),
        }
        if heartbeat is not None:
            item["lastHeartbeatTime"] = format_time(heartbeat)
        out.append(item)
    return out


#: The effect of the taint a component that is not ready yet holds its node back with (a CNI's
#: startup taint, a node-readiness-controller gate), as node-readiness-controller's.
READINESS_TAINT_EFFECT: Final = "NoSchedule"


def readiness_taint(key: str) -> Taint:
    return Taint(key=key, effect=READINESS_TAINT_EFFECT)


def node_body(
    plan: NodePlan, conditions: list[JSONObject], index: int, readiness: Iterable[str] = ()
) -> JSONObject:
    """The Node a kubelet registers (status included: a Node keeps it on create), with the
    plan's taints and a readiness taint for each key of ``readiness``."""
    taints = [*plan.taints, *(readiness_taint(key) for key in sorted(readiness))]
    address = f"10.{64 + index // 65536 % 64}.{index // 256 % 256}.{index % 256}"
    resources = {"cpu": "4", "memory": "16Gi", "pods": "110", "ephemeral-storage": "100Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": plan.name,
            "labels": dict(plan.labels),
            "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
        },
        "spec": {"taints": [_taint(t) for t in taints]} if taints else {},
        "status": {
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": address},
                {"type": "Hostname", "address": plan.name},
            ],
            "capacity": resources,
            "allocatable": resources,
            "nodeInfo": {
                "kubeletVersion": KUBELET_VERSION,
                "containerRuntimeVersion": "containerd://1.6.20"
                if plan.role == "real"
                else "sim://0",
                "osImage": OS_IMAGE,
                "kernelVersion": KERNEL_VERSION,
                "operatingSystem": "linux",
                "architecture": "amd64",
                **plan.node_info,
            },
        },
    }


def _taint(taint: Taint) -> JSONObject:
    out: JSONObject = {"key": taint.key, "effect": taint.effect}
    if taint.value:
        out["value"] = taint.value
    return out


def owner_uid(namespace: str, kind: str, name: str) -> str:
    """A stable uid for a pod's (not simulated) owner."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"nodesync-sim/{namespace}/{kind}/{name}"))


def pod_body(pod: PodPlan, node: str) -> JSONObject:
    """A pod bound to ``node``, as its controller and the scheduler leave it."""
    api_version = "apps/v1"
    spec: JSONObject = {
        "nodeName": node,
        "containers": [{"name": c, "image": IMAGE} for c in pod.containers],
        "terminationGracePeriodSeconds": pod.grace_seconds,
        "restartPolicy": "Always",
    }
    if pod.owner_kind == OWNER_DAEMONSET:
        spec["tolerations"] = [{"operator": "Exists"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod.name,
            "namespace": pod.namespace,
            "labels": {"app": pod.owner_name},
            "ownerReferences": [
                {
                    "apiVersion": api_version,
                    "kind": pod.owner_kind,
                    "name": pod.owner_name,
                    "uid": owner_uid(pod.namespace, pod.owner_kind, pod.owner_name),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


def _pod_conditions(scheduled: float, since: float, ready: bool) -> list[JSONObject]:
    status = "True" if ready else "False"
    reason = {} if ready else {"reason": "ContainersNotReady"}
    return [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": format_time(scheduled)},
        {"type": "Initialized", "status": "True", "lastTransitionTime": format_time(scheduled)},
        {
            "type": "ContainersReady",
            "status": status,
            "lastTransitionTime": format_time(since),
            **reason,
        },
        {"type": "Ready", "status": status, "lastTransitionTime": format_time(since), **reason},
    ]


def running_container(name: str, started: float, restarts: int = 0) -> JSONObject:
    return {
        "name": name,
        "image": IMAGE,
        "imageID": IMAGE,
        "state": {"running": {"startedAt": format_time(started)}},
        "ready": True,
        "started": True,
        "restartCount": restarts,
    }


def waiting_container(name: str, reason: str, message: str = "") -> JSONObject:
    waiting: JSONObject = {"reason": reason}
    if message:
        waiting["message"] = message
    return {
        "name": name,
        "image": IMAGE,
        "imageID": "",
        "state": {"waiting": waiting},
        "ready": False,
        "started": False,
        "restartCount": 0,
    }


def crashing_container(name: str, pod: str, termination: Termination, backoff: float) -> JSONObject:
    """CrashLoopBackOff after ``termination`` (its attempt is the restart count)."""
    return {
        "name": name,
        "image": IMAGE,
        "imageID": IMAGE,
        "state": {
            "waiting": {
                "reason": "CrashLoopBackOff",
                "message": f"back-off {backoff:g}s restarting failed container={name} pod={pod}",
            }
        },
        "lastState": {
            "terminated": {
                "exitCode": termination.exit_code,
                "reason": termination.reason,
                "startedAt": format_time(termination.started_at),
                "finishedAt": format_time(termination.finished_at),
                "containerID": f"sim://{termination.container_id}",
            }
        },
        "ready": False,
        "started": False,
        "restartCount": termination.attempt,
    }


def pod_status(
    phase: str,
    scheduled: float,
    since: float,
    containers: list[JSONObject],
    host_ip: str = "",
) -> JSONObject:
    """A pod status: ready when every container is."""
    ready = bool(containers) and all(c.get("ready") for c in containers)
    status: JSONObject = {
        "phase": phase,
        "conditions": _pod_conditions(scheduled, since, ready),
        "containerStatuses": containers,
        "startTime": format_time(scheduled),
    }
    if host_ip:
        status["hostIP"] = host_ip
    return status
