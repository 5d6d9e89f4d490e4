"""docs/metrics.md and the controller's /metrics name the same metrics: the Controller sections
(cluster view, webhook, rollback), plus the Kubernetes API client section for the instruments of
its watches and the HTTP server section for its listener's."""

from __future__ import annotations

import re

import pytest

from exporter.metrics.nodes import GROUPS, NODE_FAMILIES
from tests.controller.every_series import rich_controller_exposition
from tests.metrics.promtool import check_metrics
from tests.support.docs import METRICS_DOC, documented_metric_names, exposed_metric_names

SECTIONS = ("Controller", "Kubernetes API client", "HTTP server", "Process")


def test_controller_exposition_matches_the_doc() -> None:
    markdown = METRICS_DOC.read_text()
    documented = set().union(*(documented_metric_names(markdown, s) for s in SECTIONS))
    exposed = exposed_metric_names(rich_controller_exposition())
    assert sorted(exposed - documented) == [], "exposed but not documented"
    assert sorted(documented - exposed) == [], "documented but not exposed"


def test_the_controller_section_is_exactly_the_controller_families() -> None:
    markdown = METRICS_DOC.read_text()
    # "## Controller" itself, not "## Controller: webhook" and the like
    own = documented_metric_names(markdown, "Controller") - documented_metric_names(
        markdown, "Controller: "
    )
    exposed = exposed_metric_names(
        rich_controller_exposition(with_kube_requests=False, with_hook=False)
    )
    assert sorted(exposed - own) == [], "exposed but not in the Controller section"
    assert sorted(own - exposed) == [], "in the Controller section but not exposed"


@pytest.mark.prometheus
def test_promtool_accepts_the_full_controller_exposition() -> None:
    check_metrics(rich_controller_exposition())


def _switch_rows(markdown: str) -> dict[str, tuple[str, set[str]]]:
    """The rows of docs/metrics.md's collector switch table: switch -> (default, series)."""
    section = markdown.split("### Collector switches", 1)[1].split("\n### ", 1)[0]
    rows: dict[str, tuple[str, set[str]]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`--collector."):
            rows[cells[0].strip("`")] = (cells[1], set(re.findall(r"`(nodesync_\w+)`", cells[2])))
    return rows


def test_the_collector_switches_are_documented_as_declared() -> None:
    """Every switch, its default and the families it exports, in docs/metrics.md; and every
    per-node family has a switch."""
    rows = _switch_rows(METRICS_DOC.read_text())
    assert rows == {g.flag: ("on" if g.default else "off", set(g.families)) for g in GROUPS}
    switched = {f for g in GROUPS for f in g.families}
    assert {f.name for f in NODE_FAMILIES} <= switched


def test_the_configuration_doc_names_every_switch() -> None:
    configuration = (METRICS_DOC.parent / "configuration.md").read_text()
    for g in GROUPS:
        assert f"`{g.flag}`, `--no-{g.flag.removeprefix('--')}`" in configuration
