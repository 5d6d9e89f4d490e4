"""docs/metrics.md's "Controller: webhook" section names exactly what the webhook and the journal
export, with the label values the code uses; promtool accepts the exposition."""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporter.controller.journal import DECISION_VERDICTS, FAILURE_REASONS
from exporter.metrics.webhook import WEBHOOK_CODES, WebhookMetrics
from tests.controller.webhook_every_series import rich_webhook
from tests.metrics.promtool import check_metrics
from tests.support.docs import (
    METRICS_DOC,
    documented_metric_names,
    exposed_metric_names,
    metric_rows,
    section,
)

SECTION = "Controller: webhook"


def exposition() -> str:
    registry = CollectorRegistry()
    rich_webhook(registry)
    return generate_latest(registry).decode()


def section_text() -> str:
    return section(METRICS_DOC.read_text(), SECTION)


def test_the_section_names_exactly_the_webhook_metrics() -> None:
    documented = documented_metric_names(METRICS_DOC.read_text(), SECTION)
    exposed = exposed_metric_names(exposition())
    assert sorted(exposed - documented) == [], "exposed but not documented"
    assert sorted(documented - exposed) == [], "documented but not exposed"


def test_the_section_lists_every_label_value() -> None:
    rows = metric_rows(section_text())
    assert re.findall(r"`(\d{3})`", rows["nodesync_webhook_requests_total"]) == list(WEBHOOK_CODES)
    assert re.findall(r"`([a-z_]+)`", rows["nodesync_journal_decisions"])[1:] == list(
        DECISION_VERDICTS
    )
    assert re.findall(r"`([a-z_]+)`", rows["nodesync_journal_unavailable_total"])[1:] == list(
        FAILURE_REASONS
    )
    for name in ("nodesync_alerts_received_total", "nodesync_journal_alerts"):
        assert re.findall(r"`([a-z_]+)`", rows[name]) == ["status", "firing", "resolved"]


def test_every_label_value_exists_from_the_start() -> None:
    registry = CollectorRegistry()
    WebhookMetrics(registry)
    samples = {
        (s.name, tuple(sorted(s.labels.items())))
        for f in text_string_to_metric_families(generate_latest(registry).decode())
        for s in f.samples
    }
    for code in WEBHOOK_CODES:
        assert ("nodesync_webhook_requests_total", (("code", code),)) in samples
    for status in ("firing", "resolved"):
        assert ("nodesync_alerts_received_total", (("status", status),)) in samples


@pytest.mark.prometheus
def test_promtool_accepts_the_webhook_exposition() -> None:
    check_metrics(exposition())
