"""docs/metrics.md and the controller's /metrics name the same metrics: the Controller sections
(cluster view, webhook, rollback), plus the Kubernetes API client section for the instruments of
its watches and the HTTP server section for its listener's."""

from __future__ import annotations

import pytest

from tests.controller.every_series import rich_controller_exposition
from tests.metrics.docs_table import DOC, documented_metric_names, exposed_metric_names
from tests.metrics.promtool import check_metrics

SECTIONS = ("Controller", "Kubernetes API client", "HTTP server")


def test_controller_exposition_matches_the_doc() -> None:
    markdown = DOC.read_text()
    documented = set().union(*(documented_metric_names(markdown, s) for s in SECTIONS))
    exposed = exposed_metric_names(rich_controller_exposition())
    assert sorted(exposed - documented) == [], "exposed but not documented"
    assert sorted(documented - exposed) == [], "documented but not exposed"


def test_the_controller_section_is_exactly_the_controller_families() -> None:
    markdown = DOC.read_text()
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
