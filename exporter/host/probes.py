"""Host probe: memory, the filesystems kubelet evicts on, and process-ID headroom.

Everything here reads the local machine only (``statvfs``, ``/proc``); it never needs the API
server. :func:`read_host` is synchronous and cheap; async callers run it in a thread. Memory is
read from ``/proc/meminfo`` as psutil's ``virtual_memory()`` reads it on Linux, without
importing psutil (0.4 MiB of every agent's resident memory for two numbers).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from exporter.model.host import FilesystemStat, HostSnapshot

__all__ = [
    "existing_ancestor",
    "read_filesystem",
    "read_host",
    "read_memory",
    "read_pid_max",
    "read_pids_in_use",
]


def existing_ancestor(path: str) -> str:
    """``path`` made absolute, or its nearest existing parent when it does not exist.

    A node without kubelet (or before containerd first ran) still has the filesystems that
    would hold their root directories; this finds the directory to measure them at.
    """
    current = os.path.abspath(path)
    while not os.path.exists(current):
        parent = os.path.dirname(current)
        if parent == current:  # the root always exists; this only guards the loop
            break
        current = parent
    return current


def read_filesystem(role: str, path: str) -> FilesystemStat:
    """Size, space available to unprivileged users and inodes of the filesystem holding ``path``.

    Uses ``statvfs`` like kubelet does: available is ``f_bavail`` (blocks reserved for root are
    not available to pods), free inodes are ``f_ffree``. ``path`` in the result is the directory
    actually measured (see :func:`existing_ancestor`).
    """
    measured = existing_ancestor(path)
    st = os.statvfs(measured)
    return FilesystemStat(
        role=role,
        path=measured,
        size_bytes=st.f_blocks * st.f_frsize,
        available_bytes=st.f_bavail * st.f_frsize,
        inodes_total=st.f_files,
        inodes_free=st.f_ffree,
    )


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return None


def read_pid_max(proc_root: str = "/proc") -> int:
    """The system-wide task limit: the smaller of ``kernel.pid_max`` and ``kernel.threads-max``.

    Both limits bound the number of tasks (threads included), so kubelet's PID-pressure signal
    takes the minimum of the two; this does the same. A limit that cannot be read is skipped;
    returns 0 when neither can be read (unknown).
    """
    kernel = Path(proc_root, "sys", "kernel")
    limits = [
        value
        for value in (_read_int(kernel / "pid_max"), _read_int(kernel / "threads-max"))
        if value is not None and value > 0
    ]
    return min(limits, default=0)


def read_pids_in_use(proc_root: str = "/proc") -> int:
    """Tasks (processes and their threads) that currently hold a process ID.

    Like kubelet, this reads the total in the fourth field of ``loadavg`` ("running/total"),
    which counts threads too; each thread uses an ID from the same space as ``pid_max``. When
    ``loadavg`` cannot be read, falls back to counting the process directories of ``proc_root``,
    which undercounts multi-threaded processes.
    """
    try:
        fields = Path(proc_root, "loadavg").read_text(encoding="ascii").split()
        return int(fields[3].split("/")[1])
    except (OSError, ValueError, IndexError):
        pass
    try:
        return sum(1 for name in os.listdir(proc_root) if name.isdigit())
    except OSError:
        return 0


def read_memory(meminfo: str = "/proc/meminfo") -> tuple[int, int]:
    """The memory's total and what is available (bytes), as kubelet's and psutil's readers see it.

    Available is ``MemAvailable`` (the kernel's estimate, since Linux 3.14); where it is missing
    or 0, ``MemFree`` plus ``Cached``, as psutil's last fallback; never above the total (a
    distorted reading inside some containers), where ``MemFree`` is taken instead.
    """
    fields: dict[str, int] = {}
    with open(meminfo, "rb") as lines:
        for line in lines:
            name, _, rest = line.partition(b":")
            value = rest.split()
            if value:
                fields[name.decode("ascii", "replace")] = int(value[0]) * 1024
    total = fields["MemTotal"]
    available = fields.get("MemAvailable") or fields["MemFree"] + fields.get("Cached", 0)
    return total, available if available <= total else fields["MemFree"]


def read_host(containerd_root: str, kubelet_root: str, proc_root: str = "/proc") -> HostSnapshot:
    """One reading of the host resources kubelet's eviction signals are based on.

    ``kubelet_root`` (default ``/var/lib/kubelet``) locates "nodefs", ``containerd_root``
    (default ``/var/lib/containerd``) locates "imagefs"; both are always reported, also when
    they are one filesystem. ``proc_root`` is where the pid limits and task count are
    read (memory from the host's own ``/proc``, as before from psutil).
    """
    total, available = read_memory()
    return HostSnapshot(
        taken_at=time.time(),
        memory_total_bytes=total,
        memory_available_bytes=available,
        filesystems=(
            read_filesystem("nodefs", kubelet_root),
            read_filesystem("imagefs", containerd_root),
        ),
        pids_in_use=read_pids_in_use(proc_root),
        pid_max=read_pid_max(proc_root),
    )
