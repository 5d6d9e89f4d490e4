"""Metric families of the agent's node-local cleanup (requests answered, objects removed)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric


@dataclass(frozen=True, slots=True)
class CleanupTotals:
    """Since the agent started."""

    done: int = 0
    failed: int = 0
    unavailable: int = 0
    removed_sandboxes: int = 0
    removed_containers: int = 0
    last_finished_at: float | None = None  # Unix time the last cleanup finished


def cleanup_families(totals: CleanupTotals) -> list[Metric]:
    requests = CounterMetricFamily(
        "nodesync_cleanup_requests",
        "Cleanup requests the agent answered, by result.",
        labels=["result"],
    )
    requests.add_metric(["done"], float(totals.done))
    requests.add_metric(["failed"], float(totals.failed))
    requests.add_metric(["unavailable"], float(totals.unavailable))
    removed = CounterMetricFamily(
        "nodesync_cleanup_removed",
        "Runtime objects the agent's cleanups removed (stopped and removed), by kind.",
        labels=["kind"],
    )
    removed.add_metric(["sandbox"], float(totals.removed_sandboxes))
    removed.add_metric(["container"], float(totals.removed_containers))
    families: list[Metric] = [requests, removed]
    if totals.last_finished_at is not None:
        last = GaugeMetricFamily(
            "nodesync_cleanup_last_timestamp_seconds",
            "Unix time the agent's last cleanup finished (done or failed).",
        )
        last.add_metric([], totals.last_finished_at)
        families.append(last)
    return families
