"""Every dashboard query, executed against a real Prometheus that scraped a real agent (on a
real containerd) and the real controller, with the shipped rules/*.yml loaded (see scenario.py
for the cluster). Each query must be accepted, read only metrics Prometheus holds, and return
data, except the few listed in NO_DATA with the reason."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from exporter.model.outcomes import OUTCOMES
from nodesync_sim.real.containerd import missing_binaries as missing_containerd_binaries
from tests.dashboards.grafana import (
    Query,
    dashboard_files,
    label_values_metric,
    live_problems,
    load,
    queries,
    variable_query,
    variables,
)
from tests.dashboards.scenario import NODE, NODES, Scenario
from tests.support.prometheus import require_prometheus_binaries
from tests.support.wait import until

pytestmark = [pytest.mark.prometheus, pytest.mark.containerd]

NO_DATA: dict[str, str] = {
    "scaleout-overview.json / Dry-run precision per rule / A": (
        "no alert episode ends in the scenario (node-b's alert keeps firing): a rule without "
        "a dry-run episode ended has no precision; the outcomes panel shows its zeros"
    ),
}
"""Queries that legitimately return nothing in the scenario: "<file> / <panel title> / <refId>"
→ why. A query listed here that returns data makes the test fail: remove it from the list."""

SETTLE_SECONDS = 30.0


def _values(multi: bool) -> dict[str, str]:
    """Values for the dashboards' own variables: every node for a multi-value $node (Grafana
    sends a regex), the agent's node otherwise. $datasource never appears in a query."""
    return {"node": "|".join(NODES) if multi else NODE}


def _all_queries() -> list[tuple[Query, dict[str, str]]]:
    found = []
    for path in dashboard_files():
        dashboard = load(path)
        node = variables(dashboard)["node"]
        values = _values(bool(node.get("multi") or node.get("includeAll")))
        found += [(query, values) for query in queries(path, dashboard)]
    return found


def _problems(scenario: Scenario, with_queries: list[tuple[Query, dict[str, str]]]) -> list[str]:
    problems: list[str] = []
    for values in {tuple(sorted(v.items())) for _, v in with_queries}:
        group = [q for q, v in with_queries if tuple(sorted(v.items())) == values]
        problems += live_problems(scenario.prom, group, dict(values), NO_DATA)
    return problems


@pytest.fixture(scope="module")
def scenario() -> Iterator[Scenario]:
    require_prometheus_binaries()
    missing = missing_containerd_binaries()
    if missing:
        pytest.fail(f"a real containerd is required; missing: {', '.join(missing)}", pytrace=False)
    cluster = Scenario()
    try:
        cluster.start()
        yield cluster
    finally:
        leftovers = cluster.close()
    assert not leftovers, f"the dashboard scenario left things behind: {leftovers}"


@pytest.mark.timeout(120)
def test_every_panel_query_returns_data(scenario: Scenario) -> None:
    with_queries = _all_queries()
    assert len(with_queries) > 50
    # Rates need two scrapes, recording rules an evaluation, alerts a rule evaluation after that.
    until(
        lambda: _problems(scenario, with_queries),
        accept=lambda problems: not problems,
        timeout=SETTLE_SECONDS,
        what="every dashboard query to return data (the last value: the queries without)",
        interval=0.5,
    )

    keys = {f"{q.dashboard} / {q.panel_title} / {q.ref_id}" for q, _ in with_queries}
    assert not set(NO_DATA) - keys, (
        f"NO_DATA names queries that do not exist: {set(NO_DATA) - keys}"
    )
    now_with_data = []
    for query, values in with_queries:
        if query.key in NO_DATA:
            expr = query.substituted(values)
            if scenario.prom.query(expr):
                now_with_data.append(query.key)
    assert not now_with_data, (
        f"these queries have data now; remove them from NO_DATA: {now_with_data}"
    )


@pytest.mark.timeout(120)
def test_the_node_variable_lists_every_node(scenario: Scenario) -> None:
    for path in dashboard_files():
        parsed = label_values_metric(variable_query(variables(load(path))["node"]))
        assert parsed is not None, path.name
        metric, label = parsed
        result = scenario.prom.wait_for(
            f"group by ({label}) ({metric})", lambda r: len(r) == len(NODES), timeout=30
        )
        assert {sample["metric"][label] for sample in result} == set(NODES)


@pytest.mark.timeout(120)
def test_the_pending_rollback_alert_shows_on_the_overview(scenario: Scenario) -> None:
    def alerts(result: list[dict[str, Any]]) -> set[tuple[str, str | None]]:
        return {(s["metric"]["alertname"], s["metric"].get("node")) for s in result}

    # The agent's alerts on node-a may come first: wait for node-b's, which needs the
    # controller's node metrics.
    result = scenario.prom.wait_for(
        'ALERTS{alertname=~"Nodesync.*"}',
        lambda r: ("NodesyncNewNodeNotReady", "node-b") in alerts(r),
        timeout=60,
    )
    assert ("NodesyncNewNodeNotReady", "node-b") in alerts(result)


def _panel_expr(key: str, values: dict[str, str]) -> str:
    [query] = [q for q, _ in _all_queries() if q.key == key]
    return query.substituted(values)


@pytest.mark.timeout(120)
def test_the_rollback_delivered_by_alertmanager_shows_on_the_overview(scenario: Scenario) -> None:
    """The shipped Alertmanager route delivered node-b's rollback alert to the hook, which
    decided it in dry run: the overview's rollback panel shows the decision as such, and no
    NodeRollback (a dry run makes none)."""
    values = _values(True)
    key = "scaleout-overview.json / Rollbacks by phase, decisions by verdict"
    decisions = scenario.prom.wait_for(
        _panel_expr(f"{key} / B", values),
        lambda r: any(s["metric"]["verdict"] == "dry_run" and s["value"][1] == "1" for s in r),
        timeout=30,
    )
    assert {s["metric"]["verdict"] for s in decisions if s["value"][1] != "0"} == {"dry_run"}
    phases = scenario.prom.query(_panel_expr(f"{key} / A", values))
    assert [s["value"][1] for s in phases if s["value"][1] != "0"] == []
    received = scenario.prom.query(
        'sum by (status) (nodesync_alerts_received_total{status="firing"})'
    )
    assert [s["value"][1] for s in received] == ["1"]
    steps = scenario.prom.wait_for(
        'sum by (action, result) (nodesync_actions_total{result="dry_run"}) > 0',
        lambda r: any(s["metric"]["action"] == "cordon" for s in r),
        timeout=30,
    )
    assert {s["metric"]["result"] for s in steps} == {"dry_run"}
    # Decided in a dry run, node-b's alert is held back by it: the "why nothing happened"
    # panel lists it.
    held = scenario.prom.wait_for(
        _panel_expr("scaleout-overview.json / Alerts held back: which guard, and why / A", values),
        lambda r: bool(r),
        timeout=30,
    )
    assert [
        (s["metric"]["alertname"], s["metric"]["node"], s["metric"]["reason"]) for s in held
    ] == [("NodesyncNewNodeNotReady", "node-b", "dry_run")]
    # Its rule shows on the outcomes panel from that decision, every outcome at 0: the episode
    # has not ended (the alert still fires).
    outcomes = scenario.prom.wait_for(
        _panel_expr("scaleout-overview.json / Alert episode outcomes, per rule / A", values),
        lambda r: bool(r),
        timeout=30,
    )
    assert {s["metric"]["alertname"] for s in outcomes} == {"NodesyncNewNodeNotReady"}
    assert {s["metric"]["outcome"] for s in outcomes} == set(OUTCOMES)
    assert {s["value"][1] for s in outcomes} == {"0"}


@pytest.mark.timeout(120)
def test_a_panel_reading_a_metric_that_does_not_exist_is_reported(scenario: Scenario) -> None:
    [path] = [p for p in dashboard_files() if p.name == "scaleout-overview.json"]
    dashboard: dict[str, Any] = copy.deepcopy(load(path))
    bogus = copy.deepcopy(next(p for p in dashboard["panels"] if p["type"] == "timeseries"))
    bogus["id"] = 999
    bogus["title"] = "Bogus"
    bogus["targets"] = [
        {
            **bogus["targets"][0],
            "refId": "A",
            "expr": 'sum by (node) (nodesync_no_such_thing{node=~"$node"})',
        },
        {**bogus["targets"][0], "refId": "B", "expr": "nodesync_no_such_total or vector(0)"},
    ]
    dashboard["panels"].append(bogus)
    scenario.prom.wait_for_targets(timeout=30)
    bogus_queries = [q for q in queries(path, dashboard) if q.panel_id == 999]
    problems = live_problems(scenario.prom, bogus_queries, _values(True), NO_DATA)
    assert any("Bogus" in p and "no metric nodesync_no_such_thing" in p for p in problems)
    assert any("Bogus" in p and "no data" in p for p in problems)
    # a query that always has data (or vector(0)) is still caught by its unknown name
    assert any("target B" in p and "no metric nodesync_no_such_total" in p for p in problems)
