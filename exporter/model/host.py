"""Plain data for host and kubelet-local probes, and kubelet's eviction thresholds as pure rules."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FilesystemStat:
    """Free space of the filesystem holding ``path``; ``role`` is kubelet's name for it."""

    role: str  # "nodefs" (kubelet's root dir) or "imagefs" (containerd's root)
    path: str
    size_bytes: int
    available_bytes: int
    inodes_total: int
    inodes_free: int


@dataclass(frozen=True, slots=True)
class HostSnapshot:
    taken_at: float
    memory_total_bytes: int
    memory_available_bytes: int
    filesystems: tuple[FilesystemStat, ...]
    pids_in_use: int
    pid_max: int


@dataclass(frozen=True, slots=True)
class KubeletSnapshot:
    taken_at: float
    healthy: bool
    pod_uids: frozenset[str]
    pod_dir_readable: bool
    error: str = ""
