"""The host probe against this machine's real /proc and filesystems, and against fake proc roots."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest

from exporter.host.probes import (
    existing_ancestor,
    read_filesystem,
    read_host,
    read_memory,
    read_pid_max,
    read_pids_in_use,
)


def make_proc(
    root: Path,
    *,
    pid_max: str | None = None,
    threads_max: str | None = None,
    loadavg: str | None = None,
    pids: tuple[int, ...] = (),
) -> Path:
    kernel = root / "sys" / "kernel"
    kernel.mkdir(parents=True)
    if pid_max is not None:
        (kernel / "pid_max").write_text(pid_max)
    if threads_max is not None:
        (kernel / "threads-max").write_text(threads_max)
    if loadavg is not None:
        (root / "loadavg").write_text(loadavg)
    for pid in pids:
        (root / str(pid)).mkdir()
    return root


def test_read_host_reports_this_machine(tmp_path: Path) -> None:
    kubelet_root = tmp_path / "kubelet"
    containerd_root = tmp_path / "containerd"
    kubelet_root.mkdir()
    containerd_root.mkdir()

    snap = read_host(str(containerd_root), str(kubelet_root))

    assert snap.memory_total_bytes == psutil.virtual_memory().total
    assert 0 < snap.memory_available_bytes <= snap.memory_total_bytes
    assert [fs.role for fs in snap.filesystems] == ["nodefs", "imagefs"]
    assert [fs.path for fs in snap.filesystems] == [str(kubelet_root), str(containerd_root)]
    st = os.statvfs(tmp_path)
    for fs in snap.filesystems:
        assert fs.size_bytes == st.f_blocks * st.f_frsize
        assert 0 <= fs.available_bytes <= fs.size_bytes
        assert fs.inodes_total == st.f_files
        assert 0 <= fs.inodes_free <= fs.inodes_total
    assert 0 < snap.pids_in_use <= snap.pid_max
    assert snap.taken_at > 0


def test_memory_is_read_as_psutil_reads_it() -> None:
    total, available = read_memory()
    memory = psutil.virtual_memory()
    assert total == memory.total
    # Available moves between the two reads; psutil takes MemAvailable too.
    assert abs(available - memory.available) < max(memory.total // 20, 64 * 2**20)


MEMINFO = "MemTotal:       1000 kB\nMemFree:         100 kB\nCached:          300 kB\n"


@pytest.mark.parametrize(
    ("extra", "available_kib"),
    [
        ("MemAvailable:    600 kB\n", 600),
        ("", 400),  # before Linux 3.14: free + cached
        ("MemAvailable:      0 kB\n", 400),  # a kernel's bug, read as psutil does
        ("MemAvailable:   5000 kB\n", 100),  # above the total: free
    ],
)
def test_memory_available_and_its_fallbacks(tmp_path: Path, extra: str, available_kib: int) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(MEMINFO + extra + "HugePages_Total:       0\n")
    assert read_memory(str(meminfo)) == (1000 * 1024, available_kib * 1024)


def test_real_pid_max_is_the_smaller_kernel_limit() -> None:
    limits = [
        int(Path("/proc/sys/kernel", name).read_text()) for name in ("pid_max", "threads-max")
    ]
    assert read_pid_max() == min(limits)


def test_real_pids_in_use_counts_threads() -> None:
    # Every process has at least one thread, so tasks >= processes (give a margin for churn).
    in_use = read_pids_in_use()
    assert in_use >= len(psutil.pids()) - 50
    assert in_use > 0


def test_missing_directory_walks_up_to_nearest_existing_parent(tmp_path: Path) -> None:
    missing = tmp_path / "var" / "lib" / "kubelet"

    fs = read_filesystem("nodefs", str(missing))

    assert fs.path == str(tmp_path)
    assert fs.role == "nodefs"
    assert fs.size_bytes > 0


def test_existing_ancestor_makes_relative_paths_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "here").mkdir()

    assert existing_ancestor("here") == str(tmp_path / "here")
    assert existing_ancestor("nope/deeper") == str(tmp_path)
    assert existing_ancestor("/") == "/"


def test_read_host_without_kubelet_or_containerd_still_reports_filesystems(tmp_path: Path) -> None:
    snap = read_host(str(tmp_path / "no-containerd"), str(tmp_path / "no-kubelet" / "x"))

    assert [(fs.role, fs.path) for fs in snap.filesystems] == [
        ("nodefs", str(tmp_path)),
        ("imagefs", str(tmp_path)),
    ]


@pytest.mark.parametrize(
    ("pid_max", "threads_max", "expected"),
    [
        ("4194304\n", "63000\n", 63000),
        ("32768\n", "192730\n", 32768),
        ("4194304\n", None, 4194304),
        (None, "63000\n", 63000),
        ("garbage\n", "63000\n", 63000),
        ("0\n", "63000\n", 63000),
        (None, None, 0),
    ],
)
def test_pid_max_is_min_of_pid_max_and_threads_max(
    tmp_path: Path, pid_max: str | None, threads_max: str | None, expected: int
) -> None:
    proc = make_proc(tmp_path, pid_max=pid_max, threads_max=threads_max)

    assert read_pid_max(str(proc)) == expected


def test_pids_in_use_reads_total_tasks_from_loadavg(tmp_path: Path) -> None:
    proc = make_proc(tmp_path, loadavg="0.52 0.58 0.59 3/412 12345\n", pids=(1, 2))

    assert read_pids_in_use(str(proc)) == 412


@pytest.mark.parametrize("loadavg", [None, "", "0.52 0.58 0.59\n", "0.52 0.58 0.59 3-412 1\n"])
def test_pids_in_use_falls_back_to_counting_process_dirs(
    tmp_path: Path, loadavg: str | None
) -> None:
    proc = make_proc(tmp_path, loadavg=loadavg, pids=(1, 42, 4711))
    (proc / "self").mkdir()

    assert read_pids_in_use(str(proc)) == 3


def test_read_host_takes_pid_figures_from_proc_root(tmp_path: Path) -> None:
    proc = make_proc(
        tmp_path / "proc", pid_max="4194304\n", threads_max="7000\n", loadavg="0 0 0 1/250 9\n"
    )

    snap = read_host(str(tmp_path), str(tmp_path), proc_root=str(proc))

    assert (snap.pids_in_use, snap.pid_max) == (250, 7000)
