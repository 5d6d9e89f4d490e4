from __future__ import annotations

from collections.abc import Callable

import pytest

from exporter.metrics.runtime import runtime_families
from exporter.model.runtime import RuntimeSnapshot, RuntimeStats
from exporter.model.terminations import REASONS, LoopState
from tests.metrics.every_series import NOW, rich_runtime, rich_stats
from tests.metrics.exposition import labels, render, samples, series
from tests.metrics.promtool import check_metrics

ALL_ZERO_TERMINATIONS = dict.fromkeys(REASONS, 0)


def up_exposition() -> str:
    snap = rich_runtime()
    return render(
        runtime_families(
            snap,
            {"OOMKilled": 2, "Error": 1, "Completed": 1},
            [
                LoopState("batch", "hog", "hog", "oom_loop", 2, 1.0),
                LoopState("batch", "hog", "hog", "crash_loop", 3, 1.0),
            ],
            rich_stats(),
        )
    )


def down_exposition() -> str:
    return render(
        runtime_families(
            None,
            {"Error": 4},
            [LoopState("ns", "p", "c", "crash_loop", 5, 1.0)],
            rich_stats(),
        )
    )


def test_up_exports_everything_read_from_the_runtime() -> None:
    text = up_exposition()
    assert series(text, "nodesync_cri_up") == {labels(): 1.0}
    assert series(text, "nodesync_cri_runtime_condition") == {
        labels(condition="RuntimeReady"): 1.0,
        labels(condition="NetworkReady"): 0.0,
    }
    assert series(text, "nodesync_cri_runtime_info") == {
        labels(runtime_name="containerd", runtime_version="1.6.20", runtime_api_version="v1"): 1.0
    }
    assert series(text, "nodesync_pod_sandboxes") == {
        labels(state="ready"): 3.0,
        labels(state="notready"): 2.0,
    }
    assert series(text, "nodesync_containers") == {
        labels(state="created"): 2.0,
        labels(state="running"): 1.0,
        labels(state="exited"): 4.0,
        labels(state="unknown"): 1.0,
    }
    assert series(text, "nodesync_runtime_memory_working_set_bytes") == {labels(): 250_000_000.0}
    assert series(text, "nodesync_runtime_writable_layer_bytes") == {labels(): 4096.0}
    assert series(text, "nodesync_runtime_stats_timestamp_seconds") == {labels(): NOW - 20}
    mount = "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs"
    assert series(text, "nodesync_cri_image_filesystem_used_bytes") == {
        labels(mountpoint=mount): 3.0 * 1024**3
    }
    assert series(text, "nodesync_cri_image_filesystem_inodes_used") == {
        labels(mountpoint=mount): 40_000.0
    }


def test_terminations_counter_has_every_reason() -> None:
    text = up_exposition()
    assert series(text, "nodesync_container_terminations_total") == {
        labels(reason="OOMKilled"): 2.0,
        labels(reason="Error"): 1.0,
        labels(reason="Completed"): 1.0,
        labels(reason="other"): 0.0,
        labels(reason="unknown"): 0.0,
    }


def test_loops_are_sparse_series_valued_by_terminations() -> None:
    text = up_exposition()
    hog = labels(namespace="batch", pod="hog", container="hog")
    assert series(text, "nodesync_container_oom_loop") == {hog: 2.0}
    assert series(text, "nodesync_container_crash_loop") == {hog: 3.0}
    quiet = render(runtime_families(rich_runtime(), ALL_ZERO_TERMINATIONS, []))
    assert series(quiet, "nodesync_container_oom_loop") == {}
    assert series(quiet, "nodesync_container_crash_loop") == {}


def test_down_keeps_only_up_pods_terminations_and_loops() -> None:
    text = down_exposition()
    assert {name for name, _ in samples(text)} == {
        "nodesync_cri_up",
        "nodesync_container_terminations_total",
        "nodesync_container_crash_loop",
    }
    assert series(text, "nodesync_cri_up") == {labels(): 0.0}
    assert series(text, "nodesync_container_terminations_total")[labels(reason="Error")] == 4.0


def test_empty_runtime_exports_zero_counts() -> None:
    empty = RuntimeSnapshot(taken_at=1.0, version=None, conditions=(), sandboxes=(), containers=())
    text = render(runtime_families(empty, {}, [], RuntimeStats(taken_at=1.0, containers=())))
    assert set(series(text, "nodesync_containers").values()) == {0.0}
    assert series(text, "nodesync_runtime_memory_working_set_bytes") == {labels(): 0.0}
    assert series(text, "nodesync_cri_runtime_info") == {}
    assert series(text, "nodesync_cri_image_filesystem_used_bytes") == {}


STATS_FAMILIES = {
    "nodesync_runtime_memory_working_set_bytes",
    "nodesync_runtime_writable_layer_bytes",
    "nodesync_runtime_stats_timestamp_seconds",
}


def test_without_stats_their_families_are_absent_not_zero() -> None:
    """Stats off, not read yet, or the last read failed: no resource usage rather than 0."""
    text = render(runtime_families(rich_runtime(), ALL_ZERO_TERMINATIONS, [], None))
    names = {name for name, _ in samples(text)}
    assert not names & STATS_FAMILIES
    assert "nodesync_containers" in names  # the state is there all the same


@pytest.mark.prometheus
@pytest.mark.parametrize(
    "exposition", [pytest.param(up_exposition, id="up"), pytest.param(down_exposition, id="down")]
)
def test_promtool_accepts(exposition: Callable[[], str]) -> None:
    check_metrics(exposition())
