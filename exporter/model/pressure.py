"""Local resource pressure, judged with kubelet's default hard eviction thresholds.

kubelet's defaults (``--eviction-hard``): memory.available<100Mi, nodefs.available<10%,
nodefs.inodesFree<5%, imagefs.available<15%, imagefs.inodesFree<5%. kubelet has no default for
pid.available; nodesync uses pids available < 10% of pid_max.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from exporter.model.host import FilesystemStat, HostSnapshot

MEMORY: Final = "memory"
NODEFS: Final = "nodefs"
IMAGEFS: Final = "imagefs"
PID: Final = "pid"

#: The bounded set of resource label values.
RESOURCES: Final = (MEMORY, NODEFS, IMAGEFS, PID)


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Pressure starts when the available amount is strictly below the threshold."""

    memory_available_bytes: int = 100 * 1024 * 1024
    nodefs_available_ratio: float = 0.10
    nodefs_inodes_free_ratio: float = 0.05
    imagefs_available_ratio: float = 0.15
    imagefs_inodes_free_ratio: float = 0.05
    pid_available_ratio: float = 0.10


DEFAULT: Final = Thresholds()


def _below(available: int, total: int, ratio: float) -> bool:
    """available/total < ratio; a total of 0 (not reported, e.g. no fixed inode table) is no
    pressure."""
    return total > 0 and available < ratio * total


def _fs_pressure(fs: FilesystemStat, space_ratio: float, inodes_ratio: float) -> bool:
    return _below(fs.available_bytes, fs.size_bytes, space_ratio) or _below(
        fs.inodes_free, fs.inodes_total, inodes_ratio
    )


def pressure(host: HostSnapshot, thresholds: Thresholds = DEFAULT) -> dict[str, bool]:
    """Pressure per resource: "memory", "nodefs", "imagefs", "pid".

    A filesystem role the snapshot does not hold has no key; neither has "pid" when pid_max is
    not known (0).
    """
    result = {MEMORY: host.memory_available_bytes < thresholds.memory_available_bytes}
    ratios = {
        NODEFS: (thresholds.nodefs_available_ratio, thresholds.nodefs_inodes_free_ratio),
        IMAGEFS: (thresholds.imagefs_available_ratio, thresholds.imagefs_inodes_free_ratio),
    }
    for fs in host.filesystems:
        if fs.role in ratios and fs.role not in result:
            result[fs.role] = _fs_pressure(fs, *ratios[fs.role])
    if host.pid_max > 0:
        result[PID] = _below(
            host.pid_max - host.pids_in_use, host.pid_max, thresholds.pid_available_ratio
        )
    return result
