from __future__ import annotations

from collections.abc import Mapping

import pytest

from exporter.metrics.pods import pods_family
from exporter.model.phase import PodPhase, phase_counts
from tests.metrics.every_series import rich_runtime
from tests.metrics.exposition import labels, render, series

RUNTIME = {PodPhase.RUNNING: 3, PodPhase.UNKNOWN: 1}
API = {"Running": 2, "Pending": 2, "Succeeded": 0, "Failed": 0, "Unknown": 0}


def phases(source: str, values: Mapping[str, float]) -> dict[frozenset[tuple[str, str]], float]:
    return {labels(phase=p.value, source=source): float(values.get(p.value, 0)) for p in PodPhase}


@pytest.mark.parametrize(
    ("runtime", "api", "expected"),
    [
        pytest.param(
            RUNTIME,
            API,
            phases("runtime", {"Running": 3, "Unknown": 1}) | phases("apiserver", API),
            id="both-sources",
        ),
        pytest.param(
            RUNTIME, None, phases("runtime", {"Running": 3, "Unknown": 1}), id="api-unavailable"
        ),
        pytest.param(None, {"Failed": 1}, phases("apiserver", {"Failed": 1}), id="api-only"),
        pytest.param(None, None, {}, id="neither"),
    ],
)
def test_pods_family_holds_both_sources(
    runtime: Mapping[PodPhase, int] | None,
    api: Mapping[str, int] | None,
    expected: dict[frozenset[tuple[str, str]], float],
) -> None:
    assert series(render([pods_family(runtime, api)]), "nodesync_pods") == expected


def test_runtime_phases_of_a_snapshot() -> None:
    text = render([pods_family(phase_counts(rich_runtime(), ()), None)])
    assert series(text, "nodesync_pods") == {
        labels(phase="Pending", source="runtime"): 2.0,
        labels(phase="Running", source="runtime"): 1.0,
        labels(phase="Succeeded", source="runtime"): 1.0,
        labels(phase="Failed", source="runtime"): 0.0,
        labels(phase="Unknown", source="runtime"): 1.0,
    }


def test_runtime_down_counts_last_known_pods_unknown() -> None:
    text = render([pods_family(phase_counts(None, ["u1", "u2"]), None)])
    assert series(text, "nodesync_pods")[labels(phase="Unknown", source="runtime")] == 2.0
    assert sum(series(text, "nodesync_pods").values()) == 2.0
