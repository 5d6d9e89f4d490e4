from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from exporter.metrics.cri_requests import CRI_BUCKETS, CRIRequestMetrics, SyncMetrics
from tests.metrics.exposition import labels, series
from tests.metrics.promtool import check_metrics


def scrape(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


def test_buckets_are_kubelets() -> None:
    # kubelet: metrics.ExponentialBuckets(.005, 2.5, 14)
    assert pytest.approx(CRI_BUCKETS) == [
        0.005, 0.0125, 0.03125, 0.078125, 0.1953125, 0.48828125, 1.220703125, 3.0517578125,
        7.62939453125, 19.073486328125, 47.6837158203125, 119.20928955078125,
        298.0232238769531, 745.0580596923828,
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("calls", "counts", "errors"),
    [
        pytest.param(
            [("list_containers", 0.02, "OK")],
            {"list_containers": 1.0},
            {},
            id="ok-is-timed-not-an-error",
        ),
        pytest.param(
            [
                ("container_status", 2.0, "DEADLINE_EXCEEDED"),
                ("container_status", 0.01, "OK"),
                ("container_status", 2.0, "DEADLINE_EXCEEDED"),
                ("version", 0.001, "UNAVAILABLE"),
            ],
            {"container_status": 3.0, "version": 1.0},
            {("container_status", "DEADLINE_EXCEEDED"): 2.0, ("version", "UNAVAILABLE"): 1.0},
            id="errors-by-operation-and-code",
        ),
    ],
)
def test_cri_request_metrics(
    calls: list[tuple[str, float, str]],
    counts: dict[str, float],
    errors: dict[tuple[str, str], float],
) -> None:
    registry = CollectorRegistry()
    observer = CRIRequestMetrics(registry)
    for operation_type, seconds, code in calls:
        observer.observe(operation_type, seconds, code)
    text = scrape(registry)
    assert series(text, "nodesync_cri_request_duration_seconds_count") == {
        labels(operation_type=op): n for op, n in counts.items()
    }
    assert series(text, "nodesync_cri_request_errors_total") == {
        labels(operation_type=op, grpc_code=code): n for (op, code), n in errors.items()
    }


def test_duration_lands_in_kubelets_buckets() -> None:
    registry = CollectorRegistry()
    CRIRequestMetrics(registry).observe("list_podsandbox", 0.02, "OK")
    buckets = series(scrape(registry), "nodesync_cri_request_duration_seconds_bucket")
    assert buckets[labels(operation_type="list_podsandbox", le="0.0125")] == 0.0
    assert buckets[labels(operation_type="list_podsandbox", le="0.03125")] == 1.0
    assert len(buckets) == len(CRI_BUCKETS) + 1  # plus +Inf


def test_sync_metrics() -> None:
    registry = CollectorRegistry()
    sync = SyncMetrics(registry)
    sync.observe(0.2)
    sync.observe(12.0)
    text = scrape(registry)
    assert series(text, "nodesync_sync_duration_seconds_count") == {labels(): 2.0}
    assert series(text, "nodesync_sync_duration_seconds_sum") == {labels(): 12.2}
    assert series(text, "nodesync_sync_duration_seconds_bucket")[labels(le="10.0")] == 1.0


def test_each_registry_is_separate() -> None:
    first, second = CollectorRegistry(), CollectorRegistry()
    CRIRequestMetrics(first).observe("status", 0.1, "INTERNAL")
    CRIRequestMetrics(second)
    assert series(scrape(second), "nodesync_cri_request_errors_total") == {}


@pytest.mark.prometheus
def test_promtool_accepts() -> None:
    registry = CollectorRegistry()
    CRIRequestMetrics(registry).observe("list_containers", 0.3, "DEADLINE_EXCEEDED")
    SyncMetrics(registry).observe(0.5)
    check_metrics(scrape(registry))
