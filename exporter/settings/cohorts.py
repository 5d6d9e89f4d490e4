"""The flags of the cohort breaker (:class:`CohortSettings`), declared once
(exporter.settings.declare). The guards' settings hold them as ``group(CohortSettings,
builds=CohortPolicy)``: its value is the model's :class:`~exporter.model.cohorts.CohortPolicy`,
which knows no flags."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.model.cohorts import BUILD_KEYS, DEFAULT_KEYS
from exporter.settings.declare import setting
from exporter.settings.values import COHORT_KEYS, FRACTION, POSITIVE_COUNT, POSITIVE_DURATION


@dataclass(frozen=True, slots=True)
class CohortSettings:
    """The flags of :class:`~exporter.model.cohorts.CohortPolicy`."""

    cohort_keys: tuple[str, ...] = setting(
        "--cohort.keys",
        ",".join(DEFAULT_KEYS),
        "what a wave's nodes are grouped by, each key a cohort of its own: "
        f"{', '.join(BUILD_KEYS)} (from the Node's status.nodeInfo) or a label key; "
        "comma-separated, at most 12, empty for none (the cohort breaker off)",
        COHORT_KEYS,
        doc="what a wave's nodes are grouped by, each key making cohorts of its own: "
        f"{', '.join(f'`{k}`' for k in BUILD_KEYS)} (from the Node's `status.nodeInfo`) or a "
        "label key (by default the instance type, the zone and the node pool as Karpenter, EKS, "
        "GKE and AKS label it); comma-separated, at most 12, empty for none, which turns the "
        "cohort breaker off (see [rules.md](rules.md#cohorts))",
    )
    cohort_min_nodes: int = setting(
        "--cohort.min-nodes",
        "5",
        "the cohort breaker opens when at least this many nodes of one cohort fail the same way",
        POSITIVE_COUNT,
    )
    cohort_fraction: float = setting(
        "--cohort.fraction",
        "0.5",
        "... and at least this fraction of the cohort's nodes",
        FRACTION,
    )
    cohort_failing_for: float = setting(
        "--cohort.failing-for",
        "5m",
        "a node counts as failing in its cohorts once it has failed this long (a node still "
        "starting does not)",
        POSITIVE_DURATION,
    )
    cohort_max_values: int = setting(
        "--cohort.max-values",
        "10",
        "per wave and key, only the values with the most nodes make cohorts, at most this many",
        POSITIVE_COUNT,
    )
