"""The API boundary's metrics: what each observation does, promtool, and the doc's section."""

from __future__ import annotations

import inspect

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from exporter.kube.errors import (
    CODE_UNREACHABLE,
    Gone,
    InvalidResponse,
    ServerError,
    Unreachable,
)
from exporter.kube.observer import RequestObserver, code_label
from exporter.metrics.kube_requests import KUBE_REQUEST_BUCKETS, KubeRequestMetrics
from tests.metrics.exposition import labels, series
from tests.metrics.promtool import check_metrics
from tests.support.docs import METRICS_DOC, documented_metric_names, exposed_metric_names


def scrape(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


def full_exposition() -> str:
    registry = CollectorRegistry()
    m = KubeRequestMetrics(registry)
    m.observe_request("nodes", "list", 0.2, "200")
    m.observe_request("nodes", "watch", 0.01, "200")
    m.observe_request("nodes", "watch", 3.0, "410")
    m.observe_request("pods", "get", 10.0, "unreachable")
    m.observe_watch_event("nodes", "BOOKMARK")
    m.observe_relist("nodes")
    m.observe_skipped_object("nodes")
    m.observe_leader_election_error("403")
    return scrape(registry)


OBSERVER_METHODS = sorted(n for n in vars(RequestObserver) if n.startswith("observe_"))


@pytest.mark.parametrize("method", OBSERVER_METHODS)
def test_the_metrics_class_implements_the_observer_protocol(method: str) -> None:
    expected = inspect.signature(getattr(RequestObserver, method))
    assert inspect.signature(getattr(KubeRequestMetrics, method)) == expected


def test_leader_election_errors() -> None:
    assert series(full_exposition(), "nodesync_leader_election_errors_total") == {
        labels(code="403"): 1.0
    }


def test_requests() -> None:
    text = full_exposition()
    assert series(text, "nodesync_kube_request_duration_seconds_count") == {
        labels(resource="nodes", verb="list"): 1.0,
        labels(resource="pods", verb="get"): 1.0,
    }, "watches are not timed"
    assert series(text, "nodesync_kube_watches_total") == {labels(resource="nodes"): 1.0}
    assert series(text, "nodesync_kube_request_errors_total") == {
        labels(resource="nodes", verb="watch", code="410"): 1.0,
        labels(resource="pods", verb="get", code="unreachable"): 1.0,
    }
    assert series(text, "nodesync_informer_relists_total") == {labels(resource="nodes"): 1.0}
    assert series(text, "nodesync_informer_watch_events_total") == {
        labels(resource="nodes", type="BOOKMARK"): 1.0
    }
    assert series(text, "nodesync_informer_skipped_objects_total") == {
        labels(resource="nodes"): 1.0
    }


@pytest.mark.parametrize(
    ("code", "failed"),
    [("200", False), ("201", False), ("404", True), ("500", True), ("unreachable", True)],
)
def test_which_codes_are_errors(code: str, failed: bool) -> None:
    registry = CollectorRegistry()
    KubeRequestMetrics(registry).observe_request("nodes", "create", 0.1, code)
    errors = series(scrape(registry), "nodesync_kube_request_errors_total")
    assert errors == ({labels(resource="nodes", verb="create", code=code): 1.0} if failed else {})


def test_buckets_are_client_gos() -> None:
    registry = CollectorRegistry()
    KubeRequestMetrics(registry).observe_request("leases", "list", 0.03, "200")
    buckets = series(scrape(registry), "nodesync_kube_request_duration_seconds_bucket")
    assert buckets[labels(resource="leases", verb="list", le="0.025")] == 0.0
    assert buckets[labels(resource="leases", verb="list", le="0.1")] == 1.0
    assert len(buckets) == len(KUBE_REQUEST_BUCKETS) + 1


@pytest.mark.parametrize(
    ("error", "label"),
    [
        (Gone(410, "Expired"), "410"),
        (ServerError(503, "ServiceUnavailable"), "503"),
        (Unreachable(CODE_UNREACHABLE, "Timeout"), "unreachable"),
        (InvalidResponse(200, "InvalidResponse"), "invalid_response"),
    ],
)
def test_code_label(error: Exception, label: str) -> None:
    assert isinstance(error, Gone | ServerError | Unreachable | InvalidResponse)
    assert code_label(error) == label


def test_the_doc_section_lists_exactly_these_metrics() -> None:
    documented = documented_metric_names(
        METRICS_DOC.read_text(), section_prefix="Kubernetes API client"
    )
    assert documented == exposed_metric_names(full_exposition())


@pytest.mark.prometheus
def test_promtool_accepts() -> None:
    check_metrics(full_exposition())
