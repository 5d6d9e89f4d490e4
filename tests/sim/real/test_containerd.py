"""LocalContainerd: a real private containerd that leaves nothing behind."""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import tarfile
from pathlib import Path

import grpc
import pytest

from exporter.cri.pb import api_pb2, api_pb2_grpc
from exporter.model.runtime import ContainerState
from nodesync_sim.real.containerd import (
    IMAGE_REF,
    LocalContainerd,
    busybox_image_archive,
    cgroup_root_for,
    missing_binaries,
    release_of,
)
from nodesync_sim.real.runtime_pods import ContainerSpec, run_pod, wait_for_state
from tests.support.containerd import Release
from tests.support.wait import until


def _proc_state(pid: int | None) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _blob(tar: tarfile.TarFile, digest: str) -> bytes:
    member = tar.extractfile("blobs/sha256/" + digest.removeprefix("sha256:"))
    assert member is not None
    return member.read()


def test_image_archive_is_an_oci_layout_with_busybox() -> None:
    archive = busybox_image_archive()
    assert busybox_image_archive() is archive  # built once per process
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        assert json.loads(tar.extractfile("oci-layout").read()) == {  # type: ignore[union-attr]
            "imageLayoutVersion": "1.0.0"
        }
        index = json.loads(tar.extractfile("index.json").read())  # type: ignore[union-attr]
        (entry,) = index["manifests"]
        assert entry["annotations"]["io.containerd.image.name"] == IMAGE_REF
        manifest_bytes = _blob(tar, entry["digest"])
        assert "sha256:" + hashlib.sha256(manifest_bytes).hexdigest() == entry["digest"]
        manifest = json.loads(manifest_bytes)
        config = json.loads(_blob(tar, manifest["config"]["digest"]))
        assert config["config"]["Cmd"] == ["/bin/sleep", "inf"]
        (layer_desc,) = manifest["layers"]
        layer_bytes = _blob(tar, layer_desc["digest"])
        assert config["rootfs"]["diff_ids"] == [layer_desc["digest"]]
    with tarfile.open(fileobj=io.BytesIO(layer_bytes)) as layer:
        busybox = layer.getmember("bin/busybox")
        assert busybox.isfile()
        assert busybox.mode & 0o111
        for applet in ("sh", "sleep", "true", "false", "head", "tail", "dd"):
            link = layer.getmember(f"bin/{applet}")
            assert link.issym()
            assert link.linkname == "busybox"


def test_missing_binaries_are_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert {"containerd", "runc", "ctr"} <= set(missing_binaries())


def test_cgroup_root_is_unique_per_socket_directory() -> None:
    assert cgroup_root_for("unix:///tmp/ns-abc/c.sock") == "/nodesync-ns-abc"
    assert cgroup_root_for("unix:///tmp/ns-abc/c.sock") != cgroup_root_for(
        "unix:///tmp/ns-xyz/c.sock"
    )


@pytest.mark.containerd
def test_fresh_state_and_short_socket_per_instance(containerd: LocalContainerd) -> None:
    assert containerd.pid is not None
    assert len(containerd.socket_path.encode()) <= 107
    assert containerd.endpoint == "unix://" + containerd.socket_path
    assert containerd.root.is_dir()
    other = LocalContainerd()
    other.start()
    try:
        assert other.directory != containerd.directory
        assert other.cgroup_root != containerd.cgroup_root
    finally:
        other.cleanup()
    assert other.leftovers() == []
    assert containerd.pid is not None  # the first instance is untouched


async def sleeping_pod(instance: LocalContainerd, name: str, uid: str) -> None:
    """A pod of one container that sleeps, running on ``instance``."""
    pod = await run_pod(
        instance.endpoint, name, "demo", uid, [ContainerSpec("app", ["/bin/sleep", "inf"])]
    )
    await wait_for_state(instance.endpoint, pod.container_ids["app"], ContainerState.RUNNING)


# On every release: what a release leaves (its shims, mounts, cgroups) is its own.
@pytest.mark.containerd
@pytest.mark.containerd_releases
async def test_cleanup_removes_pods_processes_mounts_and_cgroups(
    containerd_release: Release,
) -> None:
    instance = LocalContainerd(bin_dir=containerd_release.bin_dir)
    instance.start()
    try:
        await sleeping_pod(instance, "busy", "uid-cleanup")
        before = instance.leftovers()
        kinds = {item.split()[0] for item in before}
        # leftovers() sees everything an instance with a running pod has made.
        assert {"directory", "mount", "cgroup", "shim", "containerd"} <= kinds, before
        assert any(instance.cgroup_root in item for item in before if item.startswith("cgroup"))
    finally:
        instance.cleanup()
    assert instance.leftovers() == []
    instance.cleanup()  # idempotent


# On every release: the orphaned shims are found by their addresses (2.x writes bootstrap.json,
# not address).
@pytest.mark.containerd
@pytest.mark.containerd_releases
async def test_cleanup_after_containerd_was_killed_kills_orphaned_shims(
    containerd_release: Release,
) -> None:
    instance = LocalContainerd(bin_dir=containerd_release.bin_dir)
    instance.start()
    try:
        await sleeping_pod(instance, "orphan", "uid-orphan")
        pid = instance.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # no graceful shutdown: shims and containers stay
        instance.stop()
        before = instance.leftovers()
        assert any(item.startswith("shim pid") for item in before), before
        assert any(item.startswith("shim socket") for item in before), before
    finally:
        instance.cleanup()
    assert instance.leftovers() == []


# On every release: each is the release it was asked for.
@pytest.mark.containerd
@pytest.mark.containerd_releases
def test_runs_the_release_asked_for(
    containerd: LocalContainerd, containerd_release: Release
) -> None:
    assert containerd.version() == containerd_release.name
    with grpc.insecure_channel(containerd.endpoint) as channel:
        reply = api_pb2_grpc.RuntimeServiceStub(channel).Version(
            api_pb2.VersionRequest(version="v1"), timeout=5.0
        )
    assert reply.runtime_name == "containerd"
    assert reply.runtime_version.removeprefix("v").startswith(containerd_release.name)


def test_release_of_reads_debian_and_upstream_version_lines() -> None:
    assert release_of("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1") == (
        "1.6.20"
    )
    assert release_of("containerd github.com/containerd/containerd/v2 2.1.9+unknown ") == "2.1.9"
    assert release_of("containerd containerd.io v1.7.24 88bf19b") == "1.7.24"


# On every release: a restart reads the release's own config (2.x migrates it at start).
@pytest.mark.containerd
@pytest.mark.containerd_releases
def test_freeze_thaw_and_restart_keep_the_same_process_or_state(
    containerd: LocalContainerd,
) -> None:
    pid = containerd.pid
    containerd.freeze()
    until(lambda: _proc_state(pid) == "T", timeout=5.0, what="containerd stopped", interval=0.01)
    containerd.thaw()
    until(lambda: _proc_state(pid) != "T", timeout=5.0, what="containerd running", interval=0.01)
    containerd.wait_ready(5.0)
    assert containerd.pid == pid
    root = containerd.root
    containerd.restart()
    assert containerd.pid not in (None, pid)
    assert containerd.root == root
