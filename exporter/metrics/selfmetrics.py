"""Metric families about nodesync itself: per-source sync status and build info."""

from __future__ import annotations

import platform
from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric


@dataclass(frozen=True, slots=True)
class SourceStatus:
    """Whether the last read of a source worked, and when the last successful read finished."""

    up: bool
    last_success_timestamp: float | None


def self_families(sources: Mapping[str, SourceStatus]) -> list[Metric]:
    """``sources`` is keyed by a fixed source name (runtime, host, kubelet, apiserver)."""
    up = GaugeMetricFamily(
        "nodesync_source_up",
        "1 if the last read of the source succeeded, else 0.",
        labels=["source"],
    )
    last = GaugeMetricFamily(
        "nodesync_last_sync_timestamp_seconds",
        "Unix time of the last successful read of the source (absent before the first one).",
        labels=["source"],
    )
    for name in sorted(sources):
        status = sources[name]
        up.add_metric([name], 1.0 if status.up else 0.0)
        if status.last_success_timestamp is not None:
            last.add_metric([name], status.last_success_timestamp)
    return [up, last]


def build_info_family(version: str) -> Metric:
    family = GaugeMetricFamily(
        "nodesync_build_info",
        "nodesync's version and the Python version it runs on; always 1.",
        labels=["version", "python_version"],
    )
    family.add_metric([version, platform.python_version()], 1.0)
    return family


def start_family(started_at: float) -> Metric:
    family = GaugeMetricFamily(
        "nodesync_start_timestamp_seconds",
        "Unix time this nodesync process started (rules use it when the agent has never read "
        "a source since it started).",
    )
    family.add_metric([], started_at)
    return family


def register_process_metrics(registry: CollectorRegistry) -> None:
    """The ``process_*`` families every Prometheus exporter serves (CPU seconds, resident and
    virtual memory, open and maximum file descriptors, start time), read from /proc at each
    scrape: prometheus_client's ProcessCollector, on the role's own registry (not the global
    one, which nodesync does not serve)."""
    ProcessCollector(registry=registry)
