from __future__ import annotations

import pytest

from tests.controller.rich import rich_controller_exposition
from tests.metrics.docs_table import DOC, documented_metric_names, exposed_metric_names
from tests.metrics.promtool import check_metrics


def test_controller_exposition_matches_the_doc() -> None:
    documented = documented_metric_names(DOC.read_text(), section_prefix="Controller")
    exposed = exposed_metric_names(rich_controller_exposition())
    assert sorted(exposed - documented) == [], "exposed but not documented"
    assert sorted(documented - exposed) == [], "documented but not exposed"


@pytest.mark.prometheus
def test_promtool_accepts_the_full_controller_exposition() -> None:
    check_metrics(rich_controller_exposition())
