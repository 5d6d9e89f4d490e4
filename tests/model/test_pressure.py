from __future__ import annotations

import pytest

from exporter.model.host import FilesystemStat, HostSnapshot
from exporter.model.pressure import DEFAULT, Thresholds, pressure

MI = 1024 * 1024


def fs(
    role: str, size: int = 1000, available: int = 500, inodes: int = 1000, free: int = 500
) -> FilesystemStat:
    return FilesystemStat(
        role=role,
        path=f"/{role}",
        size_bytes=size,
        available_bytes=available,
        inodes_total=inodes,
        inodes_free=free,
    )


def host(
    memory_available: int = 4096 * MI,
    filesystems: tuple[FilesystemStat, ...] = (fs("nodefs"), fs("imagefs")),
    pids: int = 100,
    pid_max: int = 1000,
) -> HostSnapshot:
    return HostSnapshot(
        taken_at=1.0,
        memory_total_bytes=8192 * MI,
        memory_available_bytes=memory_available,
        filesystems=filesystems,
        pids_in_use=pids,
        pid_max=pid_max,
    )


CALM = {"memory": False, "nodefs": False, "imagefs": False, "pid": False}


@pytest.mark.parametrize(
    ("snapshot", "expected"),
    [
        pytest.param(host(), CALM, id="no-pressure"),
        pytest.param(
            host(memory_available=100 * MI - 1), CALM | {"memory": True}, id="memory-below-100Mi"
        ),
        pytest.param(host(memory_available=100 * MI), CALM, id="memory-at-100Mi"),
        pytest.param(
            host(filesystems=(fs("nodefs", available=99), fs("imagefs"))),
            CALM | {"nodefs": True},
            id="nodefs-below-10pct",
        ),
        pytest.param(
            host(filesystems=(fs("nodefs", available=100), fs("imagefs"))),
            CALM,
            id="nodefs-at-10pct",
        ),
        pytest.param(
            host(filesystems=(fs("nodefs", free=49), fs("imagefs"))),
            CALM | {"nodefs": True},
            id="nodefs-inodes-below-5pct",
        ),
        pytest.param(
            host(filesystems=(fs("nodefs"), fs("imagefs", available=149))),
            CALM | {"imagefs": True},
            id="imagefs-below-15pct",
        ),
        pytest.param(
            host(filesystems=(fs("nodefs"), fs("imagefs", available=150))),
            CALM,
            id="imagefs-at-15pct",
        ),
        pytest.param(
            host(filesystems=(fs("nodefs"), fs("imagefs", free=49))),
            CALM | {"imagefs": True},
            id="imagefs-inodes-below-5pct",
        ),
        pytest.param(
            host(filesystems=(fs("nodefs", inodes=0, free=0), fs("imagefs"))),
            CALM,
            id="no-inode-table-is-no-pressure",
        ),
        pytest.param(
            host(filesystems=(fs("nodefs"),)),
            {"memory": False, "nodefs": False, "pid": False},
            id="imagefs-missing",
        ),
        pytest.param(host(filesystems=()), {"memory": False, "pid": False}, id="no-filesystems"),
        pytest.param(host(pids=901), CALM | {"pid": True}, id="pids-below-10pct-available"),
        pytest.param(host(pids=900), CALM, id="pids-at-10pct-available"),
        pytest.param(
            host(pid_max=0), {k: v for k, v in CALM.items() if k != "pid"}, id="pid-max-unknown"
        ),
    ],
)
def test_default_thresholds(snapshot: HostSnapshot, expected: dict[str, bool]) -> None:
    assert pressure(snapshot) == expected


def test_defaults_are_kubelets() -> None:
    assert (
        Thresholds(
            memory_available_bytes=100 * MI,
            nodefs_available_ratio=0.10,
            nodefs_inodes_free_ratio=0.05,
            imagefs_available_ratio=0.15,
            imagefs_inodes_free_ratio=0.05,
            pid_available_ratio=0.10,
        )
        == DEFAULT
    )


def test_custom_thresholds() -> None:
    strict = Thresholds(memory_available_bytes=8192 * MI, imagefs_available_ratio=0.6)
    assert pressure(host(), strict) == CALM | {"memory": True, "imagefs": True}
