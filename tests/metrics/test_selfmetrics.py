from __future__ import annotations

import platform

import pytest

from exporter.metrics.selfmetrics import SourceStatus, build_info_family, self_families
from tests.metrics.exposition import labels, render, series
from tests.metrics.promtool import check_metrics

SOURCES = {
    "runtime": SourceStatus(up=True, last_success_timestamp=1_700_000_100.5),
    "host": SourceStatus(up=False, last_success_timestamp=1_700_000_000.0),
    "kubelet": SourceStatus(up=False, last_success_timestamp=None),
}


def test_source_up_for_every_source() -> None:
    text = render(self_families(SOURCES))
    assert series(text, "nodesync_source_up") == {
        labels(source="runtime"): 1.0,
        labels(source="host"): 0.0,
        labels(source="kubelet"): 0.0,
    }


def test_last_sync_timestamp_only_after_a_success() -> None:
    text = render(self_families(SOURCES))
    assert series(text, "nodesync_last_sync_timestamp_seconds") == {
        labels(source="runtime"): 1_700_000_100.5,
        labels(source="host"): 1_700_000_000.0,
    }


def test_build_info() -> None:
    text = render([build_info_family("1.2.3")])
    assert series(text, "nodesync_build_info") == {
        labels(version="1.2.3", python_version=platform.python_version()): 1.0
    }


@pytest.mark.prometheus
def test_promtool_accepts() -> None:
    check_metrics(render([*self_families(SOURCES), build_info_family("1.2.3")]))
