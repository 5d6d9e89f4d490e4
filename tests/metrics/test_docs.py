from __future__ import annotations

from pathlib import Path

import pytest

from tests.metrics.every_series import rich_agent_exposition
from tests.metrics.promtool import check_metrics
from tests.support.docs import METRICS_DOC, documented_metric_names, exposed_metric_names


def test_agent_exposition_matches_the_doc() -> None:
    markdown = METRICS_DOC.read_text()
    # the agent's sections, its listener's and its process's (shared with the controller)
    documented = set().union(
        *(documented_metric_names(markdown, s) for s in ("Agent", "HTTP server", "Process"))
    )
    exposed = exposed_metric_names(rich_agent_exposition())
    assert sorted(exposed - documented) == [], "exposed but not documented"
    assert sorted(documented - exposed) == [], "documented but not exposed"


@pytest.mark.prometheus
def test_promtool_accepts_the_full_agent_exposition() -> None:
    check_metrics(rich_agent_exposition())


DOC_SAMPLE = """\
# Metrics
| `nodesync_outside_sections` | gauge |
## Agent: runtime
| Name | Type |
|---|---|
| `nodesync_a` | gauge |
| `nodesync_b_total` | counter |
### Notes
| `nodesync_c` | histogram |
Some `nodesync_not_a_row` text.
## Controller
| `nodesync_d` | gauge |
"""


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        pytest.param(
            None,
            {
                "nodesync_outside_sections",
                "nodesync_a",
                "nodesync_b_total",
                "nodesync_c",
                "nodesync_d",
            },
            id="whole-doc",
        ),
        pytest.param("Agent", {"nodesync_a", "nodesync_b_total", "nodesync_c"}, id="agent"),
        pytest.param("Controller", {"nodesync_d"}, id="controller"),
    ],
)
def test_documented_metric_names(prefix: str | None, expected: set[str]) -> None:
    assert documented_metric_names(DOC_SAMPLE, section_prefix=prefix) == expected


def test_exposed_metric_names() -> None:
    exposition = """\
# TYPE nodesync_g gauge
nodesync_g 1
# TYPE nodesync_c_total counter
nodesync_c_total 3
# TYPE nodesync_c_created gauge
nodesync_c_created 1.7e9
# TYPE nodesync_h_seconds histogram
nodesync_h_seconds_bucket{le="+Inf"} 1
nodesync_h_seconds_count 1
nodesync_h_seconds_sum 0.1
# TYPE nodesync_h_seconds_created gauge
nodesync_h_seconds_created 1.7e9
# TYPE nodesync_job_created gauge
nodesync_job_created 1.7e9
"""
    assert exposed_metric_names(exposition) == {
        "nodesync_g",
        "nodesync_c_total",
        "nodesync_h_seconds",
        "nodesync_job_created",
    }


@pytest.mark.prometheus
def test_promtool_check_fails_on_a_lint_finding() -> None:
    bad = "# HELP nodesync_bad_total A gauge.\n# TYPE nodesync_bad_total gauge\n"
    with pytest.raises(AssertionError, match="promtool check metrics rc="):
        check_metrics(bad + "nodesync_bad_total 1\n")


def test_promtool_check_fails_clearly_without_promtool(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(pytest.fail.Exception, match="promtool not found"):
        check_metrics("")
