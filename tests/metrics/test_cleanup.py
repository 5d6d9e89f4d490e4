from __future__ import annotations

import pytest

from exporter.metrics.cleanup import CleanupTotals, cleanup_families
from tests.metrics.exposition import labels, render, series
from tests.metrics.promtool import check_metrics

NOW = 1_700_000_000.0


def test_before_any_cleanup_the_counters_are_zero_and_there_is_no_timestamp() -> None:
    text = render(cleanup_families(CleanupTotals()))
    assert series(text, "nodesync_cleanup_requests_total") == {
        labels(result="done"): 0.0,
        labels(result="failed"): 0.0,
        labels(result="unavailable"): 0.0,
    }
    assert series(text, "nodesync_cleanup_removed_total") == {
        labels(kind="sandbox"): 0.0,
        labels(kind="container"): 0.0,
    }
    assert series(text, "nodesync_cleanup_last_timestamp_seconds") == {}


def test_totals_are_exported() -> None:
    totals = CleanupTotals(
        done=3,
        failed=1,
        unavailable=2,
        removed_sandboxes=5,
        removed_containers=2,
        last_finished_at=NOW,
    )
    text = render(cleanup_families(totals))
    assert series(text, "nodesync_cleanup_requests_total") == {
        labels(result="done"): 3.0,
        labels(result="failed"): 1.0,
        labels(result="unavailable"): 2.0,
    }
    assert series(text, "nodesync_cleanup_removed_total") == {
        labels(kind="sandbox"): 5.0,
        labels(kind="container"): 2.0,
    }
    assert series(text, "nodesync_cleanup_last_timestamp_seconds") == {labels(): NOW}


@pytest.mark.prometheus
def test_promtool_accepts_the_cleanup_families() -> None:
    check_metrics(render(cleanup_families(CleanupTotals(done=1, last_finished_at=NOW))))
