"""The cohort breaker's families: sparse (a cohort without a failing node has no series), one
failing series per way of failing, a breaker series only while it is open."""

from __future__ import annotations

from exporter.metrics.cohorts import cohort_families
from exporter.model.cohorts import Cohort, CohortPolicy
from tests.metrics.exposition import render


def test_only_cohorts_with_failing_nodes_and_open_breakers_have_series() -> None:
    cohorts = [
        Cohort("w1", "os_image", "good", 180, {"not_ready": 3}),
        Cohort("w1", "os_image", "bad", 20, {"not_ready": 18, "lease_lost": 1}),
        Cohort("w1", "kernel_version", "6.1", 200, {}),
    ]
    lines = sorted(
        line
        for line in render(cohort_families(cohorts, CohortPolicy())).splitlines()
        if not line.startswith("#")
    )
    bad = 'cohort="bad",cohort_key="os_image"'
    good = 'cohort="good",cohort_key="os_image"'
    assert lines == [
        f'nodesync_cohort_breaker_open{{{bad},mode="not_ready",wave="w1"}} 1.0',
        f'nodesync_cohort_failing_nodes{{{bad},mode="lease_lost",wave="w1"}} 1.0',
        f'nodesync_cohort_failing_nodes{{{bad},mode="not_ready",wave="w1"}} 18.0',
        f'nodesync_cohort_failing_nodes{{{good},mode="not_ready",wave="w1"}} 3.0',
        f'nodesync_cohort_nodes{{{bad},wave="w1"}} 20.0',
        f'nodesync_cohort_nodes{{{good},wave="w1"}} 180.0',
    ]
