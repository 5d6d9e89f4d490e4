"""The objects of the storm's cluster, as kubelet and the scheduler write them: Nodes (with their
wave label, Ready or NotReady), and the pods bound to each (two of a ReplicaSet, which a drain
evicts, one of a DaemonSet, which it must leave alone). Leases are bench.harness.objects'.
"""

from __future__ import annotations

import time

from bench.harness.apiserver import JSONObject
from exporter.model.rfc3339 import format_time

#: The label of the scale-out wave (the controller's ``--wave.label``).
WAVE_LABEL = "nodesync.io/wave"
#: Where the storm's pods and the controller's Events are.
NAMESPACE = "default"


def conditions(ready: bool, at: float) -> list[JSONObject]:
    stamp = format_time(at)

    def condition(type_: str, status: str, reason: str, message: str) -> JSONObject:
        return {
            "type": type_,
            "status": status,
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
            "reason": reason,
            "message": message,
        }

    return [
        condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has memory"),
        condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no pressure"),
        condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has PIDs"),
        condition("Ready", "True", "KubeletReady", "kubelet is posting ready status")
        if ready
        else condition(
            "Ready",
            "False",
            "KubeletNotReady",
            "container runtime not ready: RuntimeReady=false reason:DeadlineExceeded",
        ),
    ]


def node_body(name: str, index: int, wave: str | None) -> JSONObject:
    """A Node as kubelet registers it (conditions, capacity, addresses, node info)."""
    resources = {"cpu": "8", "memory": "32827480Ki", "pods": "110"}
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "m5.2xlarge",
        "topology.kubernetes.io/zone": f"eu-west-1{'abc'[index % 3]}",
    }
    if wave:
        labels[WAVE_LABEL] = wave
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"providerID": f"aws:///eu-west-1a/i-{index:017x}"},
        "status": {
            "conditions": conditions(True, time.time()),
            "capacity": resources,
            "allocatable": {**resources, "cpu": "7910m"},
            "addresses": [
                {
                    "type": "InternalIP",
                    "address": f"10.{index // 65536}.{index // 256 % 256}.{index % 256}",
                },
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "machineID": f"{index:032x}",
                "kernelVersion": "6.1.0-18-cloud-amd64",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "containerRuntimeVersion": "containerd://1.6.20",
                "kubeletVersion": "v1.30.4",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def pod_bodies(node: str, index: int) -> list[JSONObject]:
    """Two pods of a Deployment's ReplicaSet (evictable) and one of a DaemonSet (never)."""

    def pod(name: str, owner_kind: str, owner: str, app: str) -> JSONObject:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                "labels": {"app": app},
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": owner_kind,
                        "name": owner,
                        "uid": f"00000000-0000-0000-0000-{hash(owner) & 0xFFFFFFFFFFFF:012x}",
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {
                "nodeName": node,
                "containers": [{"name": app, "image": f"registry.example/{app}:1.0"}],
                "terminationGracePeriodSeconds": 30,
            },
        }

    rs = f"web-{index % 40}-5d8f7c9b6"
    return [
        pod(f"{rs}-{node}-a", "ReplicaSet", rs, f"web-{index % 40}"),
        pod(f"{rs}-{node}-b", "ReplicaSet", rs, f"web-{index % 40}"),
        pod(f"node-agent-{node}", "DaemonSet", "node-agent", "node-agent"),
    ]
