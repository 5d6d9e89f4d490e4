"""The webhook's instruments (requests, alerts received once per key, duplicates, truncation) and
the journal's gauges, built from its counts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from exporter.model.alerts import FIRING, RESOLVED

#: Every status code the webhook answers with (the ``code`` label's values).
WEBHOOK_CODES: Final = ("200", "400", "401", "405", "408", "413", "415", "500", "503")

#: A request reads at most a megabyte and waits for one fsync (or for a lock, up to seconds).
WEBHOOK_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class WebhookMetrics:
    """Updated by the receiver: one ``observe_request`` per request, one ``observe_record`` per
    delivery the journal accepted. Every label value exists from the start (at 0)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._requests = Counter(
            "nodesync_webhook_requests_total",
            "Requests to the Alertmanager webhook (POST /alerts), by status code.",
            labelnames=["code"],
            registry=registry,
        )
        self._duration = Histogram(
            "nodesync_webhook_request_duration_seconds",
            "Duration of webhook requests, from the handler's start to its answer.",
            buckets=WEBHOOK_BUCKETS,
            registry=registry,
        )
        self._received = Counter(
            "nodesync_alerts_received_total",
            "Alerts recorded in the journal: firing once per new alert (fingerprint and "
            "startsAt), resolved once per resolution; re-sends are not counted.",
            labelnames=["status"],
            registry=registry,
        )
        self._duplicates = Counter(
            "nodesync_alert_duplicates_total",
            "Alert copies that changed nothing (group re-sends, HA duplicates, retries).",
            registry=registry,
        )
        self._truncated = Counter(
            "nodesync_alerts_truncated_total",
            "Alerts Alertmanager left out of notifications (truncatedAlerts, over max_alerts).",
            registry=registry,
        )
        for code in WEBHOOK_CODES:
            self._requests.labels(code=code)
        for status in (FIRING, RESOLVED):
            self._received.labels(status=status)

    def observe_request(self, code: int, seconds: float) -> None:
        self._requests.labels(code=str(code)).inc()
        self._duration.observe(seconds)

    def observe_record(
        self, *, new_firing: int, resolved: int, duplicates: int, truncated: int
    ) -> None:
        self._received.labels(status=FIRING).inc(new_firing)
        self._received.labels(status=RESOLVED).inc(resolved)
        self._duplicates.inc(duplicates)
        self._truncated.inc(truncated)


def journal_families(
    alerts: Mapping[str, int], decisions: Mapping[str, int], deliveries: int
) -> list[Metric]:
    """The journal's content: alerts by status, decisions by verdict (every verdict, 0
    included), and the deliveries kept."""
    by_status = GaugeMetricFamily(
        "nodesync_journal_alerts",
        "Alerts in the journal, by status.",
        labels=["status"],
    )
    for status in (FIRING, RESOLVED):
        by_status.add_metric([status], float(alerts.get(status, 0)))
    by_verdict = GaugeMetricFamily(
        "nodesync_journal_decisions",
        "Decisions about alerts in the journal, by verdict.",
        labels=["verdict"],
    )
    for verdict, n in decisions.items():
        by_verdict.add_metric([verdict], float(n))
    kept = GaugeMetricFamily(
        "nodesync_journal_deliveries",
        "Webhook deliveries kept in the journal (its audit trail, within the retention).",
        value=float(deliveries),
    )
    return [by_status, by_verdict, kept]


def journal_health_families(
    *, writable: bool, unavailable: Mapping[str, int], set_aside: int
) -> list[Metric]:
    """Whether the journal takes writes; how often it stopped, by reason (every reason, 0
    included); corrupt journals moved aside at start."""
    up = GaugeMetricFamily(
        "nodesync_journal_writable",
        "1 while the journal commits writes in time; 0 while the webhook answers 503 and "
        "/readyz fails (see nodesync_journal_unavailable_total for why).",
        value=1.0 if writable else 0.0,
    )
    stopped = CounterMetricFamily(
        "nodesync_journal_unavailable",
        "Times the journal stopped taking writes, by the reason it first failed with.",
        labels=["reason"],
    )
    for reason, n in unavailable.items():
        stopped.add_metric([reason], float(n))
    aside = CounterMetricFamily(
        "nodesync_journal_set_aside",
        "Corrupt journals moved aside when the controller started (a fresh one was started "
        "with what could be read).",
        value=float(set_aside),
    )
    return [up, stopped, aside]
