"""Every metric name the rules and dashboards read exists: nodesync_* names in docs/metrics.md
(the source of truth for what the agent and the controller export), recording-rule names
(level:metric:operations) defined in rules/, and nothing else but Prometheus' own series."""

from __future__ import annotations

from tests.dashboards.grafana import (
    dashboard_files,
    label_values_metric,
    load,
    metric_names,
    queries,
    substitute,
    variable_query,
    variables,
)
from tests.rules.rulefiles import all_rules
from tests.support.docs import documented_metric_types

HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
PROMETHEUS_OWN = {"ALERTS", "ALERTS_FOR_STATE", "up"}

PENDING: dict[str, str] = {}
"""Names a dashboard may show before docs/metrics.md lists them, while the part that exports
them is being built: name → what. Each must leave this list once documented."""


def recording_rules() -> set[str]:
    return {str(rule.data["record"]) for rule in all_rules() if not rule.is_alert}


def used_names() -> dict[str, set[str]]:
    """Metric name → where it is used (rule or dashboard panel)."""
    used: dict[str, set[str]] = {}
    for rule in all_rules():
        for name in metric_names(rule.expr):
            used.setdefault(name, set()).add(f"{rule.file.name} {rule.name}")
    for path in dashboard_files():
        dashboard = load(path)
        for query in queries(path, dashboard):
            for name in metric_names(substitute(query.expr, {"node": "n"})):
                used.setdefault(name, set()).add(query.where)
        for variable in variables(dashboard).values():
            parsed = label_values_metric(variable_query(variable))
            if parsed is not None:
                used.setdefault(parsed[0], set()).add(f"{path.name} variable {variable['name']}")
    return used


def _base(name: str, docs: dict[str, str]) -> str:
    """A histogram's series name → the documented histogram name."""
    for suffix in HISTOGRAM_SUFFIXES:
        base = name.removesuffix(suffix)
        if base != name and docs.get(base) == "histogram":
            return base
    return name


def test_the_doc_table_reader_finds_every_section() -> None:
    docs = documented_metric_types()
    assert docs["nodesync_cri_request_duration_seconds"] == "histogram"
    assert docs["nodesync_container_terminations_total"] == "counter"
    assert docs["nodesync_node_condition"] == "gauge"
    assert len(docs) > 50


def test_every_nodesync_metric_used_is_documented_metric_types() -> None:
    docs = documented_metric_types()
    missing = {
        name: sorted(where)
        for name, where in used_names().items()
        if name.startswith("nodesync_") and _base(name, docs) not in docs and name not in PENDING
    }
    assert not missing, f"used but not in docs/metrics.md: {missing}"


def test_histogram_suffixes_are_used_only_on_histograms() -> None:
    docs = documented_metric_types()
    wrong = {
        name
        for name in used_names()
        if name.startswith("nodesync_")
        and name.endswith(HISTOGRAM_SUFFIXES)
        and _base(name, docs) == name
        and name not in docs
    }
    assert not wrong


def test_every_recording_rule_used_is_defined_in_rules() -> None:
    defined = recording_rules()
    undefined = {
        name: sorted(where)
        for name, where in used_names().items()
        if ":" in name and name not in defined
    }
    assert not undefined, f"recording rules used but not defined in rules/: {undefined}"


def test_no_other_metric_is_used() -> None:
    other = {
        name: sorted(where)
        for name, where in used_names().items()
        if not name.startswith("nodesync_") and ":" not in name and name not in PROMETHEUS_OWN
    }
    assert not other, f"metrics that are neither nodesync's nor recording rules: {other}"


def test_pending_names_are_still_pending() -> None:
    """Once the doc lists a pending name, it must leave PENDING (so the check above covers it);
    a pending name nothing uses any more must leave too."""
    docs = documented_metric_types()
    used = used_names()
    assert not {name for name in PENDING if name in docs}, "documented now: remove from PENDING"
    assert not {name for name in PENDING if name not in used}, "unused: remove from PENDING"


def test_the_dashboards_and_rules_read_the_metrics_they_are_about() -> None:
    """The name extraction finds what it must: a guard against it silently finding nothing."""
    used = used_names()
    for name in (
        "nodesync_cri_request_duration_seconds_bucket",
        "nodesync_node_created_timestamp_seconds",
        "node:nodesync_node_lease_age_seconds:max",
        "nodesync:lease_stale_threshold_seconds",
        "ALERTS",
    ):
        assert name in used, name
