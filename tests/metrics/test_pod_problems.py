from __future__ import annotations

import pytest

from exporter.metrics.pod_problems import pod_problem_families
from exporter.metrics.pods import pods_family
from exporter.model.phase import PodPhase
from exporter.model.pod_problems import PodProblem
from tests.metrics.exposition import labels, render, samples, series
from tests.metrics.promtool import check_metrics

PROBLEMS = [
    PodProblem("pending", "u1", "default", "slow", since=1_700_000_000.0),
    PodProblem("waiting", "u2", "batch", "hog", container="hog", reason="CrashLoopBackOff"),
    PodProblem(
        "last_terminated",
        "u2",
        "batch",
        "hog",
        container="hog",
        reason="OOMKilled",
        restart_count=7,
    ),
    PodProblem("waiting", "u1", "default", "slow", container="app", reason="ImagePullBackOff"),
]
RUNTIME = {PodPhase.RUNNING: 3, PodPhase.UNKNOWN: 1}
API = {"Running": 2, "Pending": 2, "Succeeded": 0, "Failed": 0, "Unknown": 0}


def test_problems_become_sparse_series() -> None:
    text = render(pod_problem_families(PROBLEMS))
    assert series(text, "nodesync_pod_pending_since_timestamp_seconds") == {
        labels(namespace="default", pod="slow"): 1_700_000_000.0
    }
    assert series(text, "nodesync_pod_container_waiting") == {
        labels(namespace="batch", pod="hog", container="hog", reason="CrashLoopBackOff"): 1.0,
        labels(namespace="default", pod="slow", container="app", reason="ImagePullBackOff"): 1.0,
    }
    assert series(text, "nodesync_pod_container_last_terminated") == {
        labels(namespace="batch", pod="hog", container="hog", reason="OOMKilled"): 7.0
    }


def test_no_problems_no_series() -> None:
    assert samples(render(pod_problem_families([]))) == {}


def test_api_unavailable_no_families() -> None:
    assert pod_problem_families(None) == []


@pytest.mark.prometheus
def test_promtool_accepts() -> None:
    check_metrics(render([pods_family(RUNTIME, API), *pod_problem_families(PROBLEMS)]))
