from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

from exporter.metrics.collector import SnapshotCollector
from tests.metrics.exposition import labels, series


def gauge(value: float) -> list[Metric]:
    family = GaugeMetricFamily("nodesync_test_value", "A test value.")
    family.add_metric([], value)
    return [family]


def test_registration_does_not_collect() -> None:
    calls: list[int] = []

    def latest() -> list[Metric]:
        calls.append(1)
        return gauge(1.0)

    registry = CollectorRegistry()
    registry.register(SnapshotCollector(latest))
    assert calls == []


def test_each_scrape_serves_the_latest_families() -> None:
    current = gauge(1.0)
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(lambda: current))
    assert series(generate_latest(registry).decode(), "nodesync_test_value") == {labels(): 1.0}
    current = gauge(2.0)
    assert series(generate_latest(registry).decode(), "nodesync_test_value") == {labels(): 2.0}
