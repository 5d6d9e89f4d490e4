"""The dashboards' structure (a schema of our own, since Grafana cannot run here) and every
query parsed by promtool, the parser of the Prometheus that will run it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.dashboards.grafana import (
    DASHBOARDS_DIR,
    DATASOURCE_REF,
    dashboard_files,
    load,
    metric_names,
    panels,
    promtool_check,
    queries,
    query_panels,
    structure_problems,
    substitute,
    used_variables,
    variables,
)

EXPECTED = {
    "scaleout-overview.json": "nodesync / Scale-out overview",
    "node.json": "nodesync / Node",
}

# A value for each dashboard variable when a query is only parsed: a regex works for `=~` and
# a plain value for `=`.
PARSE_VALUES = {"node": "node-a"}

FILES = dashboard_files()


def _ids(paths: list[Path]) -> list[str]:
    return [path.name for path in paths]


def test_the_expected_dashboards_exist() -> None:
    assert {path.name: load(path)["title"] for path in FILES} == EXPECTED
    uids = [load(path)["uid"] for path in FILES]
    assert len(set(uids)) == len(uids)


@pytest.mark.parametrize("path", FILES, ids=_ids(FILES))
def test_structure(path: Path) -> None:
    problems = structure_problems(path.name, load(path))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", FILES, ids=_ids(FILES))
def test_every_panel_queries_through_the_datasource_variable(path: Path) -> None:
    dashboard = load(path)
    assert variables(dashboard)["datasource"]["type"] == "datasource"
    for panel in query_panels(dashboard):
        assert panel["datasource"] == {"type": "prometheus", "uid": DATASOURCE_REF}
        for target in panel["targets"]:
            assert target["datasource"] == {"type": "prometheus", "uid": DATASOURCE_REF}
    # nothing anywhere in the file names a datasource by a fixed uid
    text = path.read_text()
    assert text.count('"uid": "') == text.count(f'"uid": "{DATASOURCE_REF}"') + 1  # + dashboard


@pytest.mark.parametrize("path", FILES, ids=_ids(FILES))
def test_panel_ids_are_stable(path: Path) -> None:
    """Ids are links (``viewPanel=<id>``): 1..n in file order, so an added panel does not
    renumber the others unless it is inserted in the middle on purpose."""
    ids = [panel["id"] for panel in panels(load(path))]
    assert ids == list(range(1, len(ids) + 1))


@pytest.mark.parametrize("path", FILES, ids=_ids(FILES))
def test_panels_fit_the_grid_without_overlapping(path: Path) -> None:
    taken: dict[tuple[int, int], int] = {}
    for panel in panels(load(path)):
        grid = panel["gridPos"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in taken, f"panel {panel['id']} overlaps {taken[(x, y)]}"
                taken[(x, y)] = panel["id"]


def _mutated(change: Any) -> list[str]:
    dashboard = copy.deepcopy(load(DASHBOARDS_DIR / "scaleout-overview.json"))
    change(dashboard)
    return structure_problems("mutated.json", dashboard)


def _first_query_panel(dashboard: dict[str, Any]) -> dict[str, Any]:
    return next(p for p in dashboard["panels"] if p["type"] != "row")


MUTATIONS = [
    ("is pinned", lambda d: _first_query_panel(d).update(datasource={"uid": "P1"})),
    ("is pinned", lambda d: _first_query_panel(d)["targets"][0].update(datasource={"uid": "abc"})),
    ("no unit", lambda d: _first_query_panel(d)["fieldConfig"]["defaults"].pop("unit")),
    ("is also used by", lambda d: _first_query_panel(d).update(id=1)),
    ("no expr", lambda d: _first_query_panel(d)["targets"][0].pop("expr")),
    ("no targets", lambda d: _first_query_panel(d).update(targets=[])),
    ("no description", lambda d: _first_query_panel(d).update(description="")),
    ("variable 'datasource' is missing", lambda d: d["templating"]["list"].pop(0)),
    ("variable 'node' is missing", lambda d: d["templating"]["list"].pop(1)),
    ("undefined variable $nope",
     lambda d: _first_query_panel(d)["targets"][0].update(expr='up{x="$nope"}')),
    ("needs node=~", lambda d: _first_query_panel(d)["targets"][0].update(expr='up{node="$node"}')),
    ("schemaVersion", lambda d: d.update(schemaVersion=16)),
    ("__inputs", lambda d: d.update(__inputs=[])),
]  # fmt: skip


@pytest.mark.parametrize(("expected", "change"), [pytest.param(e, c, id=e) for e, c in MUTATIONS])
def test_the_structure_check_finds_mistakes(expected: str, change: Any) -> None:
    problems = _mutated(change)
    assert any(expected in problem for problem in problems), problems


def test_variable_substitution() -> None:
    expr = 'rate(x{node=~"$node", a="${node}", b="[[node]]"}[$__rate_interval]) [$__range]'
    assert substitute(expr, {"node": "n1"}) == ('rate(x{node=~"n1", a="n1", b="n1"}[1m]) [1h]')
    assert used_variables(expr) == {"node", "__rate_interval", "__range"}
    assert substitute("$unknown", {}) == "$unknown"


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum by (node, le) (rate(a_bucket{x="y"}[5m]))', {"a_bucket"}),
        ("histogram_quantile(0.99, b) > on (node) group_left () c", {"b", "c"}),
        ('label_replace(vector(1), "reason", "x", "", "") or d:e:f', {"d:e:f"}),
        ("time() - g offset 5m unless ignoring (job) h", {"g", "h"}),
        ("scalar(nodesync:x) * 1e3 + 0x1f", {"nodesync:x"}),
        ("max_over_time(i[10m:1m]) and bool j", {"i", "j"}),
        ('count(k{a="by (x)"}) without (l)', {"k"}),
    ],
)
def test_metric_names_of_an_expression(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


@pytest.mark.prometheus
def test_every_query_parses_with_promtool(promtool: str) -> None:
    named = {
        query.where: substitute(query.expr, PARSE_VALUES)
        for path in FILES
        for query in queries(path)
    }
    assert len(named) > 50
    leftover = {where: expr for where, expr in named.items() if "$" in expr}
    assert not leftover, f"variables left after substitution: {leftover}"
    problems = promtool_check(promtool, named)
    assert not problems, "\n".join(problems)


@pytest.mark.prometheus
def test_promtool_check_reports_a_broken_query(promtool: str) -> None:
    problems = promtool_check(
        promtool,
        {"good": "sum by (node) (up)", "bad": "sum by (node) (rate(up[5m])", "worse": "up{"},
    )
    assert len(problems) == 2
    assert problems[0].startswith("bad: promtool rejects")
    assert problems[1].startswith("worse: promtool rejects")
