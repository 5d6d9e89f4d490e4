from __future__ import annotations

import pytest

from exporter.metrics.host import host_families
from exporter.model.host import HostSnapshot
from exporter.model.pressure import pressure
from tests.metrics.every_series import GI, rich_host
from tests.metrics.exposition import labels, render, samples, series
from tests.metrics.promtool import check_metrics


def test_host_values() -> None:
    host = rich_host()
    text = render(host_families(host, pressure(host)))
    assert series(text, "nodesync_host_memory_available_bytes") == {labels(): 50 * 1024 * 1024}
    assert series(text, "nodesync_host_memory_total_bytes") == {labels(): 8.0 * GI}
    assert series(text, "nodesync_host_filesystem_available_bytes") == {
        labels(fs="nodefs"): 40.0 * GI,
        labels(fs="imagefs"): 5.0 * GI,
    }
    assert series(text, "nodesync_host_filesystem_size_bytes") == {
        labels(fs="nodefs"): 100.0 * GI,
        labels(fs="imagefs"): 50.0 * GI,
    }
    assert series(text, "nodesync_host_filesystem_inodes_free") == {
        labels(fs="nodefs"): 5_000_000.0,
        labels(fs="imagefs"): 2_900_000.0,
    }
    assert series(text, "nodesync_host_filesystem_inodes") == {
        labels(fs="nodefs"): 6_000_000.0,
        labels(fs="imagefs"): 3_000_000.0,
    }
    assert series(text, "nodesync_host_pids") == {labels(): 812.0}
    assert series(text, "nodesync_host_pids_limit") == {labels(): 4_194_304.0}


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        pytest.param(
            {"memory": True, "nodefs": False, "imagefs": True, "pid": False},
            {"memory": 1.0, "nodefs": 0.0, "imagefs": 1.0, "pid": 0.0},
            id="all-resources",
        ),
        pytest.param({"memory": False}, {"memory": 0.0}, id="only-known-resources"),
        pytest.param({}, {}, id="none"),
    ],
)
def test_pressure_flags(flags: dict[str, bool], expected: dict[str, float]) -> None:
    text = render(host_families(rich_host(), flags))
    assert series(text, "nodesync_host_pressure") == {
        labels(resource=r): v for r, v in expected.items()
    }


def test_no_host_snapshot_no_series() -> None:
    assert host_families(None, {}) == []


def test_missing_filesystem_has_no_fs_series() -> None:
    host = rich_host()
    only_nodefs = HostSnapshot(
        taken_at=host.taken_at,
        memory_total_bytes=host.memory_total_bytes,
        memory_available_bytes=host.memory_available_bytes,
        filesystems=tuple(f for f in host.filesystems if f.role == "nodefs"),
        pids_in_use=host.pids_in_use,
        pid_max=host.pid_max,
    )
    text = render(host_families(only_nodefs, pressure(only_nodefs)))
    fs_labels = {
        dict(lbls).get("fs") for (name, lbls) in samples(text) if name.startswith("nodesync_host_f")
    }
    assert fs_labels == {"nodefs"}
    assert labels(resource="imagefs") not in series(text, "nodesync_host_pressure")


@pytest.mark.prometheus
def test_promtool_accepts() -> None:
    host = rich_host()
    check_metrics(render(host_families(host, pressure(host))))
