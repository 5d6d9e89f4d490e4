"""The Nodes and Leases kubelet writes, as the benchmarks create them in the test API server.

A Node as kubelet registers it carries its labels, the four conditions, capacity, addresses
and node info (no images): about what a real one weighs in the controller's cluster view.
"""

from __future__ import annotations

from typing import Any

from exporter.model.kube import LEASE_NAMESPACE
from exporter.model.rfc3339 import format_time

JSONObject = dict[str, Any]


def lease_path(name: str = "") -> str:
    """The Leases of kube-node-lease, or one of them."""
    base = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases"
    return f"{base}/{name}" if name else base


def lease_body(node: JSONObject, renew_time: str) -> JSONObject:
    """A node's Lease, owned by the Node as the API server returned it (its uid)."""
    meta = node["metadata"]
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": meta["name"],
            "namespace": LEASE_NAMESPACE,
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": meta["name"], "uid": meta["uid"]}
            ],
        },
        "spec": {
            "holderIdentity": meta["name"],
            "leaseDurationSeconds": 40,
            "renewTime": renew_time,
        },
    }


def registered_node(name: str, index: int, now: float) -> JSONObject:
    """A Node as kubelet registers it (conditions, capacity, addresses, node info; no images)."""
    stamp = format_time(now)

    def condition(type_: str, status: str, reason: str, message: str) -> JSONObject:
        return {
            "type": type_,
            "status": status,
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
            "reason": reason,
            "message": message,
        }

    resources = {
        "cpu": "8",
        "ephemeral-storage": "101430960Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": "32827480Ki",
        "pods": "110",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "m5.2xlarge",
                "topology.kubernetes.io/region": "eu-west-1",
                "topology.kubernetes.io/zone": f"eu-west-1{'abc'[index % 3]}",
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {
            "podCIDR": f"10.{64 + index // 256}.{index % 256}.0/24",
            "podCIDRs": [f"10.{64 + index // 256}.{index % 256}.0/24"],
            "providerID": f"aws:///eu-west-1a/i-{index:017x}",
        },
        "status": {
            "conditions": [
                condition(
                    "MemoryPressure",
                    "False",
                    "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available",
                ),
                condition(
                    "DiskPressure",
                    "False",
                    "KubeletHasNoDiskPressure",
                    "kubelet has no disk pressure",
                ),
                condition(
                    "PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID"
                ),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "capacity": resources,
            "allocatable": {**resources, "cpu": "7910m", "memory": "31676504Ki"},
            "addresses": [
                {"type": "InternalIP", "address": f"10.0.{index // 256}.{index % 256}"},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": f"{index:032x}",
                "systemUUID": f"ec2{index:05x}-0000-0000-0000-000000000000",
                "bootID": f"{index:08x}-0000-0000-0000-000000000000",
                "kernelVersion": "6.1.0-18-cloud-amd64",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "containerRuntimeVersion": "containerd://1.6.20",
                "kubeletVersion": "v1.30.4",
                "kubeProxyVersion": "v1.30.4",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def workload_pod(name: str, node: str) -> JSONObject:
    """A ReplicaSet's pod bound to ``node``, as the scheduler leaves it (kubelet then reports
    it Running: :func:`running_status`)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"app": "web", "pod-template-hash": "7d4b9c8f6d"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "web-7d4b9c8f6d",
                    "uid": "00000000-0000-0000-0000-000000000001",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "web", "image": "registry.example/web:1.0"}],
        },
    }


def running_status(started_at: str) -> JSONObject:
    """The status kubelet writes once the pod's one container runs (a merge patch of it)."""
    return {
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [
                {
                    "name": "web",
                    "image": "registry.example/web:1.0",
                    "ready": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": started_at}},
                }
            ],
        }
    }
