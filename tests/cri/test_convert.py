"""CRI messages become model dataclasses: units, unset values, states, pod identity."""

from __future__ import annotations

from typing import Any

import pytest

from exporter.cri import convert
from exporter.cri.pb import api_pb2
from exporter.model.runtime import ContainerState, SandboxState

POD_LABELS = {
    "io.kubernetes.pod.name": "web-0",
    "io.kubernetes.pod.namespace": "shop",
    "io.kubernetes.pod.uid": "uid-1",
    "io.kubernetes.container.name": "app",
}


def test_container_from_list_takes_pod_identity_from_kubelet_labels() -> None:
    msg = api_pb2.Container(
        id="c1",
        pod_sandbox_id="s1",
        metadata=api_pb2.ContainerMetadata(name="app", attempt=3),
        image=api_pb2.ImageSpec(image="busybox:1"),
        state=api_pb2.CONTAINER_RUNNING,
        created_at=1_700_000_000_500_000_000,
        labels=POD_LABELS,
    )
    c = convert.container(msg)
    assert (c.id, c.pod_sandbox_id, c.name, c.attempt) == ("c1", "s1", "app", 3)
    assert c.state is ContainerState.RUNNING
    assert c.created_at == pytest.approx(1_700_000_000.5)
    assert (c.pod_uid, c.pod_namespace, c.pod_name) == ("uid-1", "shop", "web-0")
    assert c.exit_code is None
    assert c.started_at is None
    assert c.finished_at is None


def test_running_container_status_has_no_exit_code() -> None:
    msg = api_pb2.ContainerStatus(
        id="c1",
        state=api_pb2.CONTAINER_RUNNING,
        created_at=1_000_000_000,
        started_at=2_000_000_000,
        exit_code=0,
    )
    c = convert.container_status(msg, "s1")
    assert c.pod_sandbox_id == "s1"
    assert c.started_at == 2.0
    assert c.finished_at is None
    assert c.exit_code is None


def test_exited_container_status_carries_exit_code_and_reason() -> None:
    msg = api_pb2.ContainerStatus(
        id="c1",
        metadata=api_pb2.ContainerMetadata(name="app", attempt=1),
        state=api_pb2.CONTAINER_EXITED,
        created_at=1_000_000_000,
        started_at=2_000_000_000,
        finished_at=3_250_000_000,
        exit_code=137,
        reason="OOMKilled",
        message="out of memory",
        labels=POD_LABELS,
    )
    c = convert.container_status(msg)
    assert c.state is ContainerState.EXITED
    assert (c.exit_code, c.reason) == (137, "OOMKilled")
    assert c.finished_at == 3.25
    assert c.pod_uid == "uid-1"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (api_pb2.CONTAINER_CREATED, ContainerState.CREATED),
        (api_pb2.CONTAINER_RUNNING, ContainerState.RUNNING),
        (api_pb2.CONTAINER_EXITED, ContainerState.EXITED),
        (api_pb2.CONTAINER_UNKNOWN, ContainerState.UNKNOWN),
        (42, ContainerState.UNKNOWN),  # a state a newer runtime might add
    ],
)
def test_container_states(value: int, expected: ContainerState) -> None:
    assert convert.container_state(value) is expected


def test_sandbox_from_list() -> None:
    msg = api_pb2.PodSandbox(
        id="s1",
        metadata=api_pb2.PodSandboxMetadata(name="web-0", uid="uid-1", namespace="shop", attempt=1),
        state=api_pb2.SANDBOX_NOTREADY,
        created_at=5_000_000_000,
        labels={"a": "b"},
        annotations={"c": "d", "kubernetes.io/config.source": "file"},
    )
    s = convert.pod_sandbox(msg)
    assert (s.id, s.name, s.uid, s.namespace, s.attempt) == ("s1", "web-0", "uid-1", "shop", 1)
    assert s.state is SandboxState.NOTREADY
    assert s.created_at == 5.0
    assert s.config_source == "file"  # the one annotation drift reads; nothing else is kept
    assert not hasattr(s, "labels")
    assert not hasattr(s, "annotations")
    assert convert.sandbox_state(7) is SandboxState.NOTREADY


def test_stats_of_exited_container_have_no_cpu_or_memory() -> None:
    msg = api_pb2.ContainerStats(
        attributes=api_pb2.ContainerAttributes(id="c1"),
        writable_layer=api_pb2.FilesystemUsage(
            timestamp=9_000_000_000, used_bytes=api_pb2.UInt64Value(value=4096)
        ),
    )
    s = convert.container_stats(msg)
    assert s.container_id == "c1"
    assert s.timestamp == 9.0
    assert s.cpu_usage_core_seconds is None
    assert s.memory_working_set_bytes is None
    assert s.memory_rss_bytes is None
    assert s.writable_layer_bytes == 4096


def test_stats_of_running_container() -> None:
    msg = api_pb2.ContainerStats(
        attributes=api_pb2.ContainerAttributes(id="c1"),
        cpu=api_pb2.CpuUsage(
            timestamp=10_000_000_000,
            usage_core_nano_seconds=api_pb2.UInt64Value(value=1_500_000_000),
        ),
        memory=api_pb2.MemoryUsage(
            timestamp=10_000_000_000,
            working_set_bytes=api_pb2.UInt64Value(value=100),
            usage_bytes=api_pb2.UInt64Value(value=200),
            rss_bytes=api_pb2.UInt64Value(value=0),
        ),
    )
    s = convert.container_stats(msg)
    assert s.cpu_usage_core_seconds == 1.5
    assert (s.memory_working_set_bytes, s.memory_usage_bytes, s.memory_rss_bytes) == (100, 200, 0)
    assert s.writable_layer_bytes is None


def test_filesystem_usage_and_runtime_status() -> None:
    fs = convert.filesystem_usage(
        api_pb2.FilesystemUsage(
            timestamp=1_000_000_000,
            fs_id=api_pb2.FilesystemIdentifier(mountpoint="/var/lib/containerd/snap"),
            used_bytes=api_pb2.UInt64Value(value=0),
        )
    )
    assert (fs.mountpoint, fs.timestamp, fs.used_bytes, fs.inodes_used) == (
        "/var/lib/containerd/snap",
        1.0,
        0,
        None,
    )
    reply = api_pb2.StatusResponse(
        status=api_pb2.RuntimeStatus(
            conditions=[
                api_pb2.RuntimeCondition(type="RuntimeReady", status=True),
                api_pb2.RuntimeCondition(
                    type="NetworkReady", status=False, reason="NetworkPluginNotReady"
                ),
            ]
        )
    )
    ready, network = convert.conditions(reply)
    assert (ready.type, ready.status) == ("RuntimeReady", True)
    assert (network.status, network.reason) == (False, "NetworkPluginNotReady")


@pytest.mark.parametrize("convert_one", [convert.container, convert.container_status])
def test_container_name_from_kubelets_label_when_metadata_has_none(convert_one: Any) -> None:
    message_type = (
        api_pb2.Container if convert_one is convert.container else api_pb2.ContainerStatus
    )
    c = convert_one(message_type(id="c1", labels=POD_LABELS))
    assert c.name == "app"
    assert (c.pod_uid, c.pod_namespace, c.pod_name) == ("uid-1", "shop", "web-0")
