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
from tests.metrics.docs_table import DOC, documented_metric_names, exposed_metric_names
from tests.metrics.promtool import check_metrics

SECTION = "Controller: webhook"


def exposition() -> str:
    registry = CollectorRegistry()
    rich_webhook(registry)
    return generate_latest(registry).decode()


def section_text() -> str:
    text = DOC.read_text()
    start = text.index(f"## {SECTION}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def test_the_section_names_exactly_the_webhook_metrics() -> None:
    documented = documented_metric_names(DOC.read_text(), SECTION)
    exposed = exposed_metric_names(exposition())
    assert sorted(exposed - documented) == [], "exposed but not documented"
    assert sorted(documented - exposed) == [], "documented but not exposed"


def test_the_section_lists_every_label_value() -> None:
    rows = {
        m.group(1): m.group(2)
        for m in re.finditer(
            r"^\| `(nodesync_[a-z_]+)` \| [a-z]+ \| ([^|]*) \|", section_text(), re.M
        )
    }
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
