"""Render metric families the way a scrape does, and read the exposition back."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from exporter.metrics.collector import SnapshotCollector

SampleKey = tuple[str, frozenset[tuple[str, str]]]


def render(families: Sequence[Metric], registry: CollectorRegistry | None = None) -> str:
    """Text exposition of ``families`` served through a SnapshotCollector in a private registry
    (or in ``registry``, alongside what it already holds)."""
    registry = registry if registry is not None else CollectorRegistry()
    registry.register(SnapshotCollector(lambda: families))
    return generate_latest(registry).decode()


def samples(exposition: str) -> dict[SampleKey, float]:
    """Every sample of the exposition, keyed by sample name and label set."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(exposition)
        for s in family.samples
    }


def series(exposition: str, name: str) -> dict[frozenset[tuple[str, str]], float]:
    """The samples of one sample name, keyed by label set."""
    return {labels: v for (n, labels), v in samples(exposition).items() if n == name}


def labels(**kv: str) -> frozenset[tuple[str, str]]:
    return frozenset(kv.items())
