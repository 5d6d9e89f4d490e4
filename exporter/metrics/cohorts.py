"""Metric families of the cohort breaker (exporter.model.cohorts): the cohorts of the waves at
risk that have failing nodes, their figures, and which breakers are open (pure).

Sparse, so that a wave that joins well costs no series: a cohort appears once one of its nodes
has failed for ``--cohort.failing-for``, and goes when none does. At most ``--cohort.keys``
(12) times ``--cohort.max-values`` (10) cohorts per wave at risk, each with one size series
and, per way of failing, one failing series and one breaker series while it is open.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily, Metric

from exporter.model.cohorts import MODES, Cohort, CohortPolicy

LABELS = ["wave", "cohort_key", "cohort"]


def cohort_families(cohorts: Iterable[Cohort], policy: CohortPolicy) -> list[Metric]:
    nodes = GaugeMetricFamily(
        "nodesync_cohort_nodes",
        "Nodes of a cohort of a wave at risk (nodes built alike: one value of one cohort key), "
        "for cohorts with failing nodes.",
        labels=LABELS,
    )
    failing = GaugeMetricFamily(
        "nodesync_cohort_failing_nodes",
        "Nodes of the cohort failing one way (mode) for --cohort.failing-for or longer.",
        labels=[*LABELS, "mode"],
    )
    open_ = GaugeMetricFamily(
        "nodesync_cohort_breaker_open",
        "1 while the cohort's breaker is open for a way of failing: its node rollbacks are "
        "held (only open ones).",
        labels=[*LABELS, "mode"],
    )
    for c in cohorts:
        if not any(c.failing.values()):
            continue
        key = [c.wave, c.key, c.value]
        nodes.add_metric(key, c.nodes)
        for mode in MODES:
            n = c.failing.get(mode, 0)
            if n:
                failing.add_metric([*key, mode], n)
            if c.open(mode, policy):
                open_.add_metric([*key, mode], 1)
    return [nodes, failing, open_]
