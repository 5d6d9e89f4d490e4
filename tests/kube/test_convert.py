"""API JSON -> model dataclasses, as tables: well-formed objects, absent and null fields, and
malformed objects refused with the path of the field in error."""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import pytest

from exporter.kube.convert import (
    NODE_SUMMARY_UNREAD,
    ConversionError,
    dropping,
    lease_info,
    node_info,
    node_summary,
    pod_info,
    timestamp,
)
from exporter.model.kube import (
    ContainerStatusInfo,
    LeaseInfo,
    NodeCondition,
    NodeInfo,
    PodInfo,
    Taint,
)

T0 = 1714557600.0  # 2024-05-01T10:00:00Z


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("2024-05-01T10:00:00Z", T0, id="time"),
        pytest.param("2024-05-01T10:00:05.250000Z", T0 + 5.25, id="microtime"),
        pytest.param("2024-05-01T12:00:00+02:00", T0, id="offset"),
        pytest.param("2024-05-01T10:00:00", T0, id="no-offset-is-utc"),
        pytest.param("2024-05-01T10:00:05.123456789Z", T0 + 5.123456, id="nanoseconds"),
        pytest.param("", None, id="empty"),
        pytest.param(None, None, id="null"),
        pytest.param(1714557600, None, id="number"),
        pytest.param("yesterday", None, id="garbage"),
    ],
)
def test_timestamp(value: Any, expected: float | None) -> None:
    assert timestamp(value) == (pytest.approx(expected) if expected is not None else None)


FULL_NODE: dict[str, Any] = {
    "kind": "Node",
    "apiVersion": "v1",
    "metadata": {
        "name": "node-a",
        "uid": "u-1",
        "resourceVersion": "42",
        "creationTimestamp": "2024-05-01T10:00:00Z",
        "labels": {"node-role.kubernetes.io/worker": "", "zone": "a"},
        "annotations": {"nodesync.io/protected": "true"},
    },
    "spec": {
        "unschedulable": True,
        "taints": [
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
            {
                "key": "node.kubernetes.io/unreachable",
                "effect": "NoExecute",
                "timeAdded": "2024-05-01T10:00:10Z",
            },
        ],
    },
    "status": {
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "KubeletNotReady",
                "message": "container runtime is down",
                "lastHeartbeatTime": "2024-05-01T10:00:20Z",
                "lastTransitionTime": "2024-05-01T10:00:10Z",
            },
            {"type": "DiskPressure", "status": "False"},
        ],
        "capacity": {"cpu": "4", "memory": "16Gi"},
        "nodeInfo": {
            "machineID": "0f3c",
            "systemUUID": "ec2a",
            "bootID": "77b1",
            "kernelVersion": "6.1.0-18-cloud-amd64",
            "osImage": "Debian GNU/Linux 12 (bookworm)",
            "containerRuntimeVersion": "containerd://1.7.20",
            "kubeletVersion": "v1.30.2",
            "kubeProxyVersion": "v1.30.2",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    },
}
BUILD = ("v1.30.2", "containerd://1.7.20", "Debian GNU/Linux 12 (bookworm)", "6.1.0-18-cloud-amd64")


SPARSE_NODE: dict[str, Any] = {
    "metadata": {
        "name": "sparse",
        "labels": {"b": "1"},
        "annotations": None,
        "creationTimestamp": "not a time",
    },
    "spec": {"unschedulable": None, "taints": [{"effect": "NoSchedule"}, {"key": "k"}]},
    "status": {"conditions": None},
}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(
            FULL_NODE,
            NodeInfo(
                name="node-a",
                uid="u-1",
                created_at=T0,
                resource_version="42",
                labels={"node-role.kubernetes.io/worker": "", "zone": "a"},
                annotations={"nodesync.io/protected": "true"},
                unschedulable=True,
                taints=(
                    Taint("node.kubernetes.io/unschedulable", "NoSchedule"),
                    Taint("node.kubernetes.io/unreachable", "NoExecute", time_added=T0 + 10),
                ),
                conditions=(
                    NodeCondition(
                        "Ready",
                        "False",
                        "KubeletNotReady",
                        last_transition=T0 + 10,
                        last_heartbeat=T0 + 20,
                    ),
                    NodeCondition("DiskPressure", "False"),
                ),
                build=BUILD,
            ),
            id="full",
        ),
        pytest.param(
            {"metadata": {"name": "bare"}},
            NodeInfo(name="bare", uid="", created_at=0.0),
            id="bare-name-only",
        ),
        pytest.param(
            SPARSE_NODE,
            NodeInfo(
                name="sparse",
                uid="",
                created_at=0.0,
                labels={"b": "1"},
                taints=(Taint("k", ""),),
            ),
            id="absent-and-null-fields-become-defaults",
        ),
        pytest.param(
            {
                "metadata": {"name": "c"},
                "spec": None,
                "status": {"conditions": [{"type": "Ready"}, {"status": "True"}]},
            },
            NodeInfo(
                name="c", uid="", created_at=0.0, conditions=(NodeCondition("Ready", "Unknown"),)
            ),
            id="condition-without-status-is-unknown",
        ),
    ],
)
def test_node_info(obj: dict[str, Any], expected: NodeInfo) -> None:
    assert node_info(obj) == expected


@pytest.mark.parametrize("obj", [FULL_NODE, SPARSE_NODE])
def test_what_node_summary_never_reads_can_be_dropped_while_decoding(obj: dict[str, Any]) -> None:
    def summary(node: dict[str, Any]) -> NodeInfo:
        return node_summary(
            node, labels={"zone"}, conditions=("Ready",), taints={"node.kubernetes.io/unreachable"}
        )

    body = json.dumps({"metadata": {"resourceVersion": "9"}, "items": [obj]})
    pruned = json.loads(body, object_hook=dropping(NODE_SUMMARY_UNREAD))
    assert pruned["metadata"] == {"resourceVersion": "9"}
    assert "annotations" not in json.dumps(pruned)
    assert summary(pruned["items"][0]) == summary(obj)
    assert "machineID" not in json.dumps(pruned)  # what a cohort does not read of nodeInfo


def test_nodes_built_alike_share_their_build() -> None:
    other = json.loads(json.dumps(FULL_NODE))
    other["metadata"]["name"] = "node-b"
    assert node_info(FULL_NODE).build is node_info(other).build == BUILD


@pytest.mark.parametrize("obj", [FULL_NODE, SPARSE_NODE, {"metadata": {"name": "bare"}}])
def test_node_summary_is_node_info_with_the_rest_left_out(obj: dict[str, Any]) -> None:
    kept_labels = {"zone", "b", "missing"}
    kept_conditions = ("Ready", "MemoryPressure")
    kept_taints = {"node.kubernetes.io/unreachable", "k"}
    full = node_info(obj)
    assert node_summary(
        obj, labels=kept_labels, conditions=kept_conditions, taints=kept_taints
    ) == NodeInfo(
        name=full.name,
        uid=full.uid,
        created_at=full.created_at,
        labels={k: v for k, v in full.labels.items() if k in kept_labels},
        unschedulable=full.unschedulable,
        taints=tuple(Taint(t.key, t.effect) for t in full.taints if t.key in kept_taints),
        conditions=tuple(
            NodeCondition(c.type, c.status, last_transition=c.last_transition)
            for c in full.conditions
            if c.type in kept_conditions
        ),
        build=full.build,
    )


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(
            {
                "metadata": {
                    "name": "node-a",
                    "namespace": "kube-node-lease",
                    "resourceVersion": "7",
                    "creationTimestamp": "2024-05-01T10:00:01Z",
                },
                "spec": {
                    "holderIdentity": "node-a",
                    "leaseDurationSeconds": 40,
                    "renewTime": "2024-05-01T10:00:05.250000Z",
                },
            },
            LeaseInfo("node-a", "kube-node-lease", T0 + 5.25, "node-a", 40, "7", T0 + 1),
            id="node-lease",
        ),
        pytest.param(
            {"metadata": {"name": "new", "namespace": "kube-node-lease"}, "spec": {}},
            LeaseInfo("new", "kube-node-lease", None),
            id="never-renewed",
        ),
        pytest.param(
            {
                "metadata": {"name": "x", "namespace": "ns"},
                "spec": {"leaseDurationSeconds": None, "renewTime": None, "holderIdentity": None},
            },
            LeaseInfo("x", "ns", None),
            id="null-fields",
        ),
    ],
)
def test_lease_info(obj: dict[str, Any], expected: LeaseInfo) -> None:
    assert lease_info(obj) == expected


RUNNING_POD: dict[str, Any] = {
    "metadata": {
        "name": "web-1",
        "namespace": "default",
        "uid": "p-1",
        "resourceVersion": "99",
        "creationTimestamp": "2024-05-01T10:00:00Z",
        "labels": {"app": "web"},
        "ownerReferences": [
            {"kind": "Node", "name": "x", "controller": False},
            {"kind": "ReplicaSet", "name": "web-7d", "controller": True},
        ],
    },
    "spec": {"nodeName": "node-a", "containers": [{"name": "app"}]},
    "status": {
        "phase": "Running",
        "startTime": "2024-05-01T10:00:05Z",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "True",
                "lastTransitionTime": "2024-05-01T10:00:01Z",
            },
            {"type": "Ready", "status": "True"},
        ],
        "initContainerStatuses": [
            {
                "name": "init",
                "ready": True,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
            }
        ],
        "containerStatuses": [
            {
                "name": "app",
                "ready": True,
                "restartCount": 3,
                "state": {"running": {"startedAt": "2024-05-01T10:00:10Z"}},
                "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
            },
            {
                "name": "sidecar",
                "ready": False,
                "restartCount": 5,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
            },
        ],
    },
}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(
            RUNNING_POD,
            PodInfo(
                uid="p-1",
                namespace="default",
                name="web-1",
                node_name="node-a",
                phase="Running",
                created_at=T0,
                resource_version="99",
                labels={"app": "web"},
                start_time=T0 + 5,
                owner_kind="ReplicaSet",
                scheduled_at=T0 + 1,
                ready=True,
                containers=(
                    ContainerStatusInfo(
                        "init",
                        "terminated",
                        ready=True,
                        terminated_reason="Completed",
                        terminated_exit_code=0,
                        init=True,
                    ),
                    ContainerStatusInfo(
                        "app",
                        "running",
                        ready=True,
                        restart_count=3,
                        last_terminated_reason="OOMKilled",
                        last_terminated_exit_code=137,
                        started_at=T0 + 10,
                    ),
                    ContainerStatusInfo(
                        "sidecar",
                        "waiting",
                        restart_count=5,
                        waiting_reason="CrashLoopBackOff",
                        last_terminated_reason="Error",
                        last_terminated_exit_code=1,
                    ),
                ),
            ),
            id="running-with-init-and-crashloop",
        ),
        pytest.param(
            {
                "metadata": {
                    "name": "kube-proxy-node-a",
                    "namespace": "kube-system",
                    "uid": "m-1",
                    "annotations": {"kubernetes.io/config.mirror": "abc"},
                    "deletionTimestamp": "2024-05-01T10:00:20Z",
                    "deletionGracePeriodSeconds": 30,
                },
                "spec": {"nodeName": "node-a"},
                "status": {"phase": "Running", "containerStatuses": [{"name": "p", "state": {}}]},
            },
            PodInfo(
                uid="m-1",
                namespace="kube-system",
                name="kube-proxy-node-a",
                node_name="node-a",
                phase="Running",
                created_at=0.0,
                deletion_timestamp=T0 + 20,
                deletion_grace_period_seconds=30,
                mirror=True,
                containers=(ContainerStatusInfo("p", ""),),
            ),
            id="terminating-mirror-pod-state-not-reported",
        ),
        pytest.param(
            {"metadata": {"name": "new", "namespace": "default"}},
            PodInfo(
                uid="",
                namespace="default",
                name="new",
                node_name="",
                phase="Pending",
                created_at=0.0,
            ),
            id="unscheduled-without-status",
        ),
        pytest.param(
            {
                "metadata": {"name": "sparse", "namespace": "default", "ownerReferences": None},
                "spec": {"nodeName": "", "volumes": None},
                "status": {
                    "phase": None,
                    "conditions": [{"type": "PodScheduled", "status": "False"}],
                    "containerStatuses": [
                        {"name": "c", "state": {"running": None}},
                        {"name": "d", "restartCount": -1, "state": {"terminated": {"exitCode": 1}}},
                    ],
                },
            },
            PodInfo(
                uid="",
                namespace="default",
                name="sparse",
                node_name="",
                phase="Pending",
                created_at=0.0,
                containers=(
                    ContainerStatusInfo("c", ""),
                    ContainerStatusInfo("d", "terminated", terminated_exit_code=1),
                ),
            ),
            id="absent-and-null-fields-become-defaults",
        ),
    ],
)
def test_pod_info(obj: dict[str, Any], expected: PodInfo) -> None:
    assert pod_info(obj) == expected


@pytest.mark.parametrize(
    ("convert", "obj"),
    [
        pytest.param(node_info, {"metadata": {}}, id="node-without-name"),
        pytest.param(node_info, {"metadata": {"name": 5}}, id="node-name-not-a-string"),
        pytest.param(node_info, {"spec": {}}, id="node-without-metadata"),
        pytest.param(node_info, {"metadata": "node-a"}, id="metadata-not-an-object"),
        pytest.param(lease_info, {"metadata": {"name": "x"}}, id="lease-without-namespace"),
        pytest.param(pod_info, {"metadata": {"namespace": "default"}}, id="pod-without-name"),
        pytest.param(pod_info, ["not", "an", "object"], id="not-an-object"),
    ],
)
def test_objects_without_identity_are_rejected(convert: Any, obj: Any) -> None:
    with pytest.raises(ConversionError, match=r"^\$(\.metadata)?(\.name|\.namespace)?: "):
        convert(obj)


@pytest.mark.parametrize(
    ("convert", "obj", "message"),
    [
        pytest.param(
            node_info,
            {"metadata": {"name": "n", "labels": {"a": None}}},
            "$.metadata.labels[...]: expected `str`, got `null`",
            id="node-label-null",
        ),
        pytest.param(
            node_info,
            {"metadata": {"name": "n"}, "spec": {"unschedulable": "yes"}},
            "$.spec.unschedulable: expected `bool | null`, got `str`",
            id="node-unschedulable-text",
        ),
        pytest.param(
            node_info,
            {"metadata": {"name": "n"}, "spec": {"taints": [{"key": "k"}, {"key": 1}]}},
            "$.spec.taints[1].key: expected `str`, got `int`",
            id="node-taint-key-number",
        ),
        pytest.param(
            node_summary,
            {"metadata": {"name": "n"}, "status": {"conditions": "garbage"}},
            "$.status.conditions: expected `array | null`, got `str`",
            id="summary-conditions-text",
        ),
        pytest.param(
            lease_info,
            {"metadata": {"name": "x", "namespace": "ns"}, "spec": {"leaseDurationSeconds": "40"}},
            "$.spec.leaseDurationSeconds: expected `int | null`, got `str`",
            id="lease-duration-text",
        ),
        pytest.param(
            pod_info,
            {
                "metadata": {"name": "p", "namespace": "ns"},
                "status": {"containerStatuses": [{"name": "c", "restartCount": "x"}]},
            },
            "$.status.containerStatuses[0].restartCount: expected `int`, got `str`",
            id="pod-restart-count-text",
        ),
        pytest.param(
            pod_info,
            {"metadata": {"name": "p", "namespace": "ns"}, "status": {"containerStatuses": [{}]}},
            "$.status.containerStatuses[0].name: missing",
            id="pod-container-without-name",
        ),
    ],
)
def test_a_malformed_object_is_refused_naming_the_field(
    convert: Any, obj: dict[str, Any], message: str
) -> None:
    if convert is node_summary:
        convert = partial(node_summary, labels=(), conditions=("Ready",), taints=())
    with pytest.raises(ConversionError) as raised:
        convert(obj)
    assert str(raised.value) == message
