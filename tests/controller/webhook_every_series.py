"""The webhook's instruments and the journal's gauges with something in every series, for
rendering them all at once (docs check, promtool)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from exporter.controller.journal import DECISION_VERDICTS, FAILURE_REASONS
from exporter.metrics.collector import SnapshotCollector
from exporter.metrics.webhook import WebhookMetrics, journal_families, journal_health_families


def rich_webhook(registry: CollectorRegistry) -> None:
    """Register, in ``registry``, what the controller's webhook adds to its /metrics."""
    metrics = WebhookMetrics(registry)
    for code, seconds in ((200, 0.004), (200, 0.012), (400, 0.001), (401, 0.0005), (503, 2.1)):
        metrics.observe_request(code, seconds)
    metrics.observe_record(new_firing=3, resolved=1, duplicates=5, truncated=2)
    families = journal_families(
        {"firing": 2, "resolved": 1},
        {v: {"plan": 2, "join": 1, "refused": 1}.get(v, 0) for v in DECISION_VERDICTS},
        deliveries=4,
    )
    families += journal_health_families(
        writable=False,
        unavailable={r: {"timeout": 2, "full": 1}.get(r, 0) for r in FAILURE_REASONS},
        set_aside=1,
    )
    registry.register(SnapshotCollector(lambda: families))
