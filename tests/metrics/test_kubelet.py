from __future__ import annotations

import pytest

from exporter.metrics.kubelet import kubelet_families
from exporter.model.host import KubeletSnapshot
from tests.metrics.exposition import labels, render, samples
from tests.metrics.promtool import check_metrics


def kubelet(healthy: bool, uids: set[str], readable: bool) -> KubeletSnapshot:
    return KubeletSnapshot(
        taken_at=1.0, healthy=healthy, pod_uids=frozenset(uids), pod_dir_readable=readable
    )


@pytest.mark.parametrize(
    ("snapshot", "expected"),
    [
        pytest.param(
            kubelet(True, {"a", "b", "c"}, True),
            {"nodesync_kubelet_healthy": 1.0, "nodesync_kubelet_pod_directories": 3.0},
            id="healthy",
        ),
        pytest.param(
            kubelet(False, set(), True),
            {"nodesync_kubelet_healthy": 0.0, "nodesync_kubelet_pod_directories": 0.0},
            id="unhealthy-no-pods",
        ),
        pytest.param(
            kubelet(True, set(), False),
            {"nodesync_kubelet_healthy": 1.0},
            id="pods-dir-unreadable",
        ),
        pytest.param(None, {}, id="not-probed-yet"),
    ],
)
def test_kubelet_families(snapshot: KubeletSnapshot | None, expected: dict[str, float]) -> None:
    text = render(kubelet_families(snapshot))
    assert samples(text) == {(name, labels()): v for name, v in expected.items()}


@pytest.mark.prometheus
def test_promtool_accepts() -> None:
    check_metrics(render(kubelet_families(kubelet(True, {"a"}, True))))
