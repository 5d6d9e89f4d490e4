from __future__ import annotations

import pytest

from exporter.metrics.drift import drift_families
from exporter.model.drift import Drift, DriftItem, DriftKind
from tests.metrics.exposition import labels, render, series
from tests.metrics.promtool import check_metrics

NOW = 1_700_000_000.0
KINDS = [k.value for k in DriftKind]


def drift(*items: DriftItem) -> Drift:
    return Drift(computed_at=NOW, grace_seconds=60.0, items=items)


SOME = drift(
    DriftItem(DriftKind.ORPHAN_SANDBOX, "x", "default", "old", NOW - 900, sandbox_id="s1"),
    DriftItem(DriftKind.ORPHAN_SANDBOX, "y", "default", "older", NOW - 1800, sandbox_id="s2"),
    DriftItem(DriftKind.KUBELET_ONLY, "k", "", "", NOW - 120),
)


@pytest.mark.parametrize(
    ("value", "counts", "oldest"),
    [
        pytest.param(
            SOME,
            {"orphan_sandbox": 2.0, "kubelet_only": 1.0},
            {"orphan_sandbox": NOW - 1800, "kubelet_only": NOW - 120},
            id="some-drift",
        ),
        pytest.param(drift(), {}, {}, id="no-drift"),
    ],
)
def test_drift_families(value: Drift, counts: dict[str, float], oldest: dict[str, float]) -> None:
    text = render(drift_families(value))
    assert series(text, "nodesync_drift_pods") == {
        labels(kind=k): counts.get(k, 0.0) for k in KINDS
    }
    assert series(text, "nodesync_drift_oldest_timestamp_seconds") == {
        labels(kind=k): v for k, v in oldest.items()
    }


def test_no_drift_computed_no_families() -> None:
    assert drift_families(None) == []


@pytest.mark.prometheus
@pytest.mark.parametrize("value", [pytest.param(SOME, id="some"), pytest.param(drift(), id="none")])
def test_promtool_accepts(value: Drift) -> None:
    check_metrics(render(drift_families(value)))
