"""Read the project's Grafana dashboards and check them: structure, queries, metric names.

Grafana is not installable here, so the dashboards are checked by what can be checked without
it: a schema of our own (:func:`structure_problems`), every query parsed by promtool as a
recording rule (:func:`promtool_problems`), and every query executed against a real Prometheus
(:func:`live_problems`). :func:`metric_names` lists the metric names a PromQL expression reads,
for the check against docs/metrics.md.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodesync_sim.real.prometheus import LocalPrometheus, QueryError

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS_DIR = ROOT / "dashboards"

DATASOURCE_REF = "${datasource}"
NODE_QUERY = "label_values(nodesync_node_created_timestamp_seconds, node)"
REQUIRED_VARIABLES = ("datasource", "node")
REQUIRED_KEYS = (
    "uid",
    "title",
    "description",
    "tags",
    "schemaVersion",
    "panels",
    "templating",
    "time",
    "refresh",
)
MIN_SCHEMA_VERSION = 36
ROW = "row"
PANEL_TYPES = ("timeseries", "stat", "bargauge", "table", "gauge")

GRAFANA_BUILTINS = {
    "__rate_interval": "1m",
    "__interval": "15s",
    "__interval_ms": "15000",
    "__range": "1h",
    "__range_s": "3600",
    "__range_ms": "3600000",
}
"""Values for Grafana's built-in variables when a query is parsed or executed outside Grafana."""

_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")


def dashboard_files() -> list[Path]:
    return sorted(DASHBOARDS_DIR.glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"{path.name}: not a JSON object"
    return data


def panels(dashboard: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, rows and panels nested in collapsed rows included."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", []) if panel.get("type") == ROW else ()


def query_panels(dashboard: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Panels that query (every panel but rows)."""
    return (panel for panel in panels(dashboard) if panel.get("type") != ROW)


@dataclass(frozen=True)
class Query:
    dashboard: str
    panel_id: int
    panel_title: str
    ref_id: str
    expr: str

    @property
    def where(self) -> str:
        return f"{self.dashboard} panel {self.panel_id} {self.panel_title!r} target {self.ref_id}"

    @property
    def key(self) -> str:
        """``<file> / <panel title> / <refId>``: names the query in lists of exceptions."""
        return f"{self.dashboard} / {self.panel_title} / {self.ref_id}"

    def substituted(self, values: Mapping[str, str]) -> str:
        return substitute(self.expr, values)


def queries(path: Path, dashboard: Mapping[str, Any] | None = None) -> list[Query]:
    data = dashboard if dashboard is not None else load(path)
    return [
        Query(path.name, int(panel["id"]), str(panel["title"]), str(t["refId"]), str(t["expr"]))
        for panel in query_panels(data)
        for t in panel.get("targets", [])
        if "expr" in t
    ]


def variables(dashboard: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in dashboard.get("templating", {}).get("list", [])}


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """Replace ``$name``, ``${name}``, ``${name:fmt}`` and ``[[name]]`` by ``values`` (the
    dashboard's own variables) or Grafana's built-ins; unknown variables stay as they are."""
    table = {**GRAFANA_BUILTINS, **values}

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(3)
        return table.get(name, match.group(0))

    return _VARIABLE.sub(replace, expr)


def used_variables(expr: str) -> set[str]:
    return {m.group(1) or m.group(2) or m.group(3) for m in _VARIABLE.finditer(expr)}


# ---------------------------------------------------------------------------------------------
# Metric names read by a PromQL expression.

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(
    r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE
)
_IDENT = re.compile(r"(?<![\w.:])[a-zA-Z_:][a-zA-Z0-9_:]*")
_KEYWORDS = frozenset(
    {
        "and",
        "or",
        "unless",
        "bool",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "offset",
        "inf",
        "nan",
    }
)


def _strip_brackets(text: str, opening: str, closing: str) -> str:
    out = []
    depth = 0
    for char in text:
        if char == opening:
            depth += 1
        elif char == closing and depth:
            depth -= 1
        elif not depth:
            out.append(char)
    return "".join(out)


def metric_names(expr: str) -> set[str]:
    """Metric names (and recording-rule names) a PromQL expression selects.

    Strings, label matchers, ranges and grouping label lists are removed; what is left that is
    an identifier, not followed by ``(`` (a function) and not a keyword, is a metric name.
    ``{__name__="x"}`` selectors are not recognised (the project does not use them).
    """
    text = _STRING.sub('""', expr)
    text = _strip_brackets(text, "{", "}")
    text = _strip_brackets(text, "[", "]")
    text = _GROUPING.sub(" ", text)
    text = re.sub(r"\b(?:group_left|group_right)\b", " ", text)
    names = set()
    for match in _IDENT.finditer(text):
        rest = text[match.end() :].lstrip()
        if rest.startswith("("):
            continue
        if match.group(0).lower() in _KEYWORDS:
            continue
        names.add(match.group(0))
    return names


_LABEL_VALUES = re.compile(
    r"^\s*label_values\(\s*([a-zA-Z_:][\w:]*)\s*(?:\{[^}]*\})?\s*,\s*(\w+)\s*\)\s*$"
)


def variable_query(variable: Mapping[str, Any]) -> str:
    query = variable.get("query")
    if isinstance(query, dict):
        return str(query.get("query", ""))
    return str(query or "")


def label_values_metric(query: str) -> tuple[str, str] | None:
    """``label_values(metric, label)`` → (metric, label); None for other variable queries."""
    match = _LABEL_VALUES.match(query)
    return (match.group(1), match.group(2)) if match else None


# ---------------------------------------------------------------------------------------------
# Structure.


def _datasource_problems(where: str, datasource: Any) -> list[str]:
    if not isinstance(datasource, dict):
        return [f"{where}: datasource must be {{type: prometheus, uid: {DATASOURCE_REF}}}"]
    problems = []
    if datasource.get("type") != "prometheus":
        problems.append(f"{where}: datasource type {datasource.get('type')!r}, not 'prometheus'")
    if datasource.get("uid") != DATASOURCE_REF:
        problems.append(
            f"{where}: datasource uid {datasource.get('uid')!r} is pinned; use {DATASOURCE_REF}"
        )
    return problems


def structure_problems(name: str, dashboard: Mapping[str, Any]) -> list[str]:
    """What is wrong with a dashboard's structure (empty when nothing is)."""
    problems = [f"{name}: missing key {key!r}" for key in REQUIRED_KEYS if key not in dashboard]
    if not isinstance(dashboard.get("schemaVersion"), int) or dashboard["schemaVersion"] < (
        MIN_SCHEMA_VERSION
    ):
        problems.append(f"{name}: schemaVersion must be an integer >= {MIN_SCHEMA_VERSION}")
    if dashboard.get("id") is not None:
        problems.append(f"{name}: id must be null (Grafana assigns it on import)")
    if "__inputs" in dashboard:
        problems.append(f"{name}: __inputs pins a datasource at import; use the variable")

    found = variables(dashboard)
    for required in REQUIRED_VARIABLES:
        if required not in found:
            problems.append(f"{name}: variable {required!r} is missing")
    datasource = found.get("datasource", {})
    if datasource and (datasource.get("type"), datasource.get("query")) != (
        "datasource",
        "prometheus",
    ):
        problems.append(f"{name}: variable 'datasource' must be type datasource, query prometheus")
    for var_name, variable in found.items():
        if variable.get("type") == "query":
            problems += _datasource_problems(
                f"{name}: variable {var_name!r}", variable.get("datasource")
            )
    node = found.get("node", {})
    if node and variable_query(node) != NODE_QUERY:
        problems.append(f"{name}: variable 'node' must query {NODE_QUERY}")

    for annotation in dashboard.get("annotations", {}).get("list", []):
        if annotation.get("builtIn") != 1:
            problems += _datasource_problems(
                f"{name}: annotation {annotation.get('name')!r}", annotation.get("datasource")
            )

    ids: dict[int, str] = {}
    for panel in panels(dashboard):
        title = panel.get("title")
        where = f"{name}: panel {panel.get('id')} {title!r}"
        panel_id = panel.get("id")
        if not isinstance(panel_id, int) or isinstance(panel_id, bool):
            problems.append(f"{where}: id must be an integer")
        elif panel_id in ids:
            problems.append(f"{where}: id {panel_id} is also used by {ids[panel_id]!r}")
        else:
            ids[panel_id] = str(title)
        if not title:
            problems.append(f"{where}: no title")
        grid = panel.get("gridPos", {})
        if not all(isinstance(grid.get(k), int) for k in ("h", "w", "x", "y")):
            problems.append(f"{where}: gridPos needs integer h, w, x, y")
        elif grid["x"] + grid["w"] > 24:
            problems.append(f"{where}: wider than the 24-column grid")
        if panel.get("type") == ROW:
            continue
        if panel.get("type") not in PANEL_TYPES:
            problems.append(f"{where}: type {panel.get('type')!r} is not one of {PANEL_TYPES}")
        if not panel.get("description"):
            problems.append(f"{where}: no description")
        problems += _datasource_problems(where, panel.get("datasource"))
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
        if not isinstance(unit, str) or not unit:
            problems.append(f"{where}: no unit in fieldConfig.defaults.unit")
        targets = panel.get("targets")
        if not targets:
            problems.append(f"{where}: no targets")
            continue
        ref_ids = [t.get("refId") for t in targets]
        if len(set(ref_ids)) != len(ref_ids):
            problems.append(f"{where}: duplicate refIds {ref_ids}")
        for target in targets:
            twhere = f"{where} target {target.get('refId')}"
            if not isinstance(target.get("expr"), str) or not target["expr"].strip():
                problems.append(f"{twhere}: no expr")
                continue
            problems += _datasource_problems(twhere, target.get("datasource"))
            for used in sorted(used_variables(target["expr"])):
                if used not in found and used not in GRAFANA_BUILTINS:
                    problems.append(f"{twhere}: uses undefined variable ${used}")
            multi = node.get("multi") or node.get("includeAll")
            if multi and re.search(r'node\s*=\s*"\$\{?node\}?"', target["expr"]):
                problems.append(f"{twhere}: multi-value $node needs node=~, not node=")
    return problems


# ---------------------------------------------------------------------------------------------
# promtool.


def promtool_problems(promtool: str, named: Mapping[str, str], workdir: Path) -> list[str]:
    """Parse every expression with ``promtool check rules``, each wrapped as a recording rule;
    ``named`` maps a label for messages to the expression (variables already substituted).

    Every expression gets its own rules file, so promtool's errors point at one query."""
    problems = []
    for index, (where, expr) in enumerate(named.items()):
        path = workdir / f"query-{index}.json"
        rule = {"record": f"dashboard:query_{index}:check", "expr": expr}
        path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": [rule]}]}))
        result = subprocess.run(
            [promtool, "check", "rules", str(path)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if result.returncode != 0:
            output = (result.stdout + result.stderr).strip().replace(str(path), "<query>")
            problems.append(f"{where}: promtool rejects {expr!r}:\n{output}")
    return problems


def promtool_check(promtool: str, named: Mapping[str, str]) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="nodesync-dashboards-") as tmp:
        return promtool_problems(promtool, named, Path(tmp))


# ---------------------------------------------------------------------------------------------
# A real Prometheus.


def _is_number(sample: Mapping[str, Any]) -> bool:
    """A sample a panel can show: NaN (e.g. a quantile of an empty histogram) shows nothing."""
    return str(sample["value"][1]).lower() != "nan"


def recorded_names(prometheus: LocalPrometheus) -> set[str]:
    """Names of the recording rules Prometheus loaded: they exist even while a sparse one
    (``cluster:nodesync_actions_paused:bool``) has no sample."""
    return {
        str(rule["name"])
        for group in prometheus.rules()
        for rule in group["rules"]
        if rule.get("type") == "recording"
    }


def live_problems(
    prometheus: LocalPrometheus,
    query_list: list[Query],
    values: Mapping[str, str],
    no_data_allowed: Mapping[str, str],
) -> list[str]:
    """Execute every query; report refused queries, metric names Prometheus does not hold,
    and queries without data (no sample, or only NaN), unless the query's :attr:`Query.key`
    is in ``no_data_allowed`` (key → reason)."""
    known = prometheus.metric_names() | recorded_names(prometheus)
    problems = []
    for query in query_list:
        expr = query.substituted(values)
        allowed = query.key in no_data_allowed
        unknown = sorted(metric_names(expr) - known)
        if unknown and not allowed:
            problems.append(f"{query.where}: Prometheus has no metric {', '.join(unknown)}")
        try:
            result = prometheus.query(expr)
        except QueryError as err:
            problems.append(f"{query.where}: refused: {err}")
            continue
        if not any(_is_number(sample) for sample in result) and not allowed:
            problems.append(f"{query.where}: no data for {expr}")
    return problems
