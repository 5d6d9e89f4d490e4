"""The agent end to end on a real containerd: what /metrics shows, and how it survives the runtime.

Each test starts its own private containerd (see tests/support/containerd.py) and the agent's real
aiohttp application; nothing is faked.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientTimeout
from aiohttp.test_utils import TestClient
from prometheus_client import CollectorRegistry

from exporter.agent.app import make_app
from exporter.model.runtime import ContainerState
from nodesync_sim.real.containerd import LocalContainerd
from nodesync_sim.real.runtime_pods import (
    MixedPod,
    restart_container,
    run_mixed_pod,
    wait_for_state,
)
from tests.agent.conftest import Scrape
from tests.agent.settings import agent_settings
from tests.metrics.exposition import labels, series
from tests.metrics.promtool import check_metrics
from tests.support.docs import METRICS_DOC, documented_metric_names, exposed_metric_names
from tests.support.wait import until_async

#: On the machine's containerd; the test of how the agent reads each release's answers runs on
#: every release too. What the others test is the agent's own (its deadlines, its periods, its
#: exposition, its counting across attempts), the same whatever the release.
pytestmark = [pytest.mark.containerd]

SYNC_PERIOD = 0.2
#: How long a change may take to show in /metrics.
WITHIN = 20.0
CRI_TIMEOUT = 0.5


def _value(text: str, name: str, **kv: str) -> float | None:
    return series(text, name).get(labels(**kv))


def _phases(text: str) -> dict[str, float]:
    return {
        dict(key)["phase"]: value
        for key, value in series(text, "nodesync_pods").items()
        if dict(key).get("source") == "runtime"
    }


# On every release: the phases, states and termination reasons come from the release's own
# answers.
@pytest.mark.containerd_releases
async def test_mixed_pod_phases_states_and_termination_reasons(
    containerd: LocalContainerd, agent: TestClient, scrape: Scrape
) -> None:
    await run_mixed_pod(containerd.endpoint, name="mixed")

    def settled(text: str) -> bool:
        return _value(text, "nodesync_container_terminations_total", reason="OOMKilled") == 1

    text = await until_async(
        scrape, accept=settled, timeout=WITHIN, what="the OOM kill to be counted"
    )

    assert _value(text, "nodesync_cri_up") == 1
    assert _value(text, "nodesync_cri_runtime_condition", condition="RuntimeReady") == 1
    # One pod: a running, an exit-0, an exit-1 and an OOM-killed container. A non-zero exit
    # makes the pod Failed (DESIGN's rule), whatever else runs beside it.
    assert _phases(text) == {
        "Pending": 0,
        "Running": 0,
        "Succeeded": 0,
        "Failed": 1,
        "Unknown": 0,
    }
    assert _value(text, "nodesync_containers", state="running") == 1
    assert _value(text, "nodesync_containers", state="exited") == 3
    assert _value(text, "nodesync_containers", state="created") == 0
    for reason in ("Completed", "Error", "OOMKilled"):
        assert _value(text, "nodesync_container_terminations_total", reason=reason) == 1, reason
    assert _value(text, "nodesync_source_up", source="runtime") == 1
    assert _value(text, "nodesync_source_up", source="host") == 1
    assert _value(text, "nodesync_source_up", source="kubelet") == 0  # no kubelet here
    last_sync = _value(text, "nodesync_last_sync_timestamp_seconds", source="runtime")
    assert last_sync is not None
    assert abs(last_sync - time.time()) < 30
    assert (_value(text, "nodesync_host_memory_available_bytes") or 0) > 0
    assert (_value(text, "nodesync_host_filesystem_available_bytes", fs="imagefs") or 0) > 0
    assert series(text, "nodesync_cri_request_duration_seconds_bucket")
    list_calls = _value(
        text, "nodesync_cri_request_duration_seconds_count", operation_type="list_containers"
    )
    assert list_calls is not None
    assert list_calls >= 1


@pytest.mark.prometheus
async def test_exposition_passes_promtool_and_matches_the_docs(
    containerd: LocalContainerd, agent: TestClient, scrape: Scrape
) -> None:
    await run_mixed_pod(containerd.endpoint, name="docs")
    # The stats families come from the first stats refresh, a task of its own that starts
    # after the first sync cycle: a cycle that already counts the OOM kill may be published
    # before it. Wait for both.
    text = await until_async(
        scrape,
        accept=lambda t: (
            _value(t, "nodesync_container_terminations_total", reason="OOMKilled") == 1
            and _value(t, "nodesync_runtime_stats_timestamp_seconds") is not None
        ),
        timeout=WITHIN,
        what="the mixed pod to settle and the first stats refresh",
    )
    check_metrics(text)
    markdown = METRICS_DOC.read_text()
    documented = set().union(
        *(documented_metric_names(markdown, s) for s in ("Agent", "HTTP server", "Process"))
    )
    exposed = exposed_metric_names(text)
    undocumented = exposed - documented
    assert not undocumented, f"exported but not in docs/metrics.md: {sorted(undocumented)}"
    # Sparse series (loops, errors) exist only while there is something to report.
    sparse = {
        "nodesync_container_oom_loop",
        "nodesync_container_crash_loop",
        "nodesync_cri_request_errors_total",
    }
    # This agent has no API server: what needs the API's view of the pods is absent, not zero.
    needs_api = {
        "nodesync_pod_pending_since_timestamp_seconds",
        "nodesync_pod_container_waiting",
        "nodesync_pod_container_last_terminated",
        "nodesync_drift_pods",
        "nodesync_drift_oldest_timestamp_seconds",
        # The cleanup handshake goes through the Node: without an API server, no cleanup.
        "nodesync_cleanup_requests_total",
        "nodesync_cleanup_removed_total",
        "nodesync_cleanup_last_timestamp_seconds",
    }
    assert not exposed & needs_api
    missing = documented - exposed - sparse - needs_api
    assert not missing, f"documented but not exported by a real agent: {sorted(missing)}"


async def test_frozen_runtime_reports_down_and_unknown_then_recovers(
    containerd: LocalContainerd, agent: TestClient, scrape: Scrape
) -> None:
    await run_mixed_pod(containerd.endpoint, name="frozen")
    await until_async(
        scrape,
        accept=lambda t: _phases(t).get("Failed") == 1,
        timeout=WITHIN,
        what="the pod to be seen",
    )

    containerd.freeze()
    try:
        text = await until_async(
            scrape,
            accept=lambda t: _value(t, "nodesync_cri_up") == 0,
            timeout=WITHIN,
            what="cri_up 0",
        )
        assert _phases(text)["Unknown"] == 1
        assert _phases(text)["Failed"] == 0
        assert _value(text, "nodesync_source_up", source="runtime") == 0
        assert _value(text, "nodesync_source_up", source="host") == 1
        timeouts = series(text, "nodesync_cri_request_errors_total")
        assert any(
            dict(k)["grpc_code"] == "DEADLINE_EXCEEDED" and v >= 1 for k, v in timeouts.items()
        )
        # Every scrape above answered (within the scrape's own deadline) while containerd was
        # frozen: a scrape writes the last snapshot and never waits on the runtime.
    finally:
        containerd.thaw()

    await until_async(
        scrape,
        accept=lambda t: _value(t, "nodesync_cri_up") == 1,
        timeout=WITHIN,
        what="recovery after thaw",
    )

    containerd.restart()
    text = await until_async(
        scrape,
        accept=lambda t: _value(t, "nodesync_cri_up") == 1 and _phases(t).get("Failed") == 1,
        timeout=WITHIN,
        what="recovery after a restart",
    )
    assert _phases(text)["Unknown"] == 0


async def test_stopped_runtime_is_unavailable_and_the_agent_keeps_serving(
    containerd: LocalContainerd, agent: TestClient, scrape: Scrape
) -> None:
    await until_async(
        scrape,
        accept=lambda t: _value(t, "nodesync_cri_up") == 1,
        timeout=WITHIN,
        what="first sync",
    )
    containerd.stop()
    text = await until_async(
        scrape, accept=lambda t: _value(t, "nodesync_cri_up") == 0, timeout=WITHIN, what="cri_up 0"
    )
    errors = series(text, "nodesync_cri_request_errors_total")
    assert any(dict(k)["grpc_code"] == "UNAVAILABLE" for k in errors)
    health = await agent.get("/healthz")
    assert health.status == 200
    ready = await agent.get("/readyz")
    assert ready.status == 200
    containerd.start()
    await until_async(
        scrape,
        accept=lambda t: _value(t, "nodesync_cri_up") == 1,
        timeout=WITHIN,
        what="recovery after start",
    )


async def test_oom_loop_shows_across_recreated_attempts(
    containerd: LocalContainerd, agent: TestClient, scrape: Scrape
) -> None:
    pod = await run_mixed_pod(containerd.endpoint, name="oomy", namespace="loops")
    await until_async(
        scrape,
        accept=lambda t: (
            _value(t, "nodesync_container_terminations_total", reason="OOMKilled") == 1
        ),
        timeout=WITHIN,
        what="the first OOM kill",
    )
    # kubelet restarts the container: a new attempt that is OOM-killed again. The old attempt
    # stays listed as exited; the loop must show after the container was recreated.
    new_id = await restart_container(containerd.endpoint, pod, MixedPod.OOM)
    await wait_for_state(containerd.endpoint, new_id, ContainerState.EXITED)
    key = {"namespace": "loops", "pod": "oomy", "container": MixedPod.OOM}
    text = await until_async(
        scrape,
        accept=lambda t: _value(t, "nodesync_container_oom_loop", **key) == 2,
        timeout=WITHIN,
        what="the OOM loop series",
    )
    assert _value(text, "nodesync_container_terminations_total", reason="OOMKilled") == 2
    # Two non-zero exits are not yet a crash loop (threshold 3); the third makes one.
    assert _value(text, "nodesync_container_crash_loop", **key) is None
    third = await restart_container(containerd.endpoint, pod, MixedPod.OOM)
    await wait_for_state(containerd.endpoint, third, ContainerState.EXITED)
    text = await until_async(
        scrape,
        accept=lambda t: _value(t, "nodesync_container_crash_loop", **key) == 3,
        timeout=WITHIN,
        what="the crash loop series",
    )
    # Only the looping container has loop series: sparse, bounded labels.
    assert set(series(text, "nodesync_container_oom_loop")) == {labels(**key)}


STATS_FAMILIES = {
    "nodesync_runtime_memory_working_set_bytes",
    "nodesync_runtime_writable_layer_bytes",
    "nodesync_runtime_stats_timestamp_seconds",
}


async def _agent_with(
    containerd: LocalContainerd,
    tmp_path: Path,
    closed_port: int,
    aiohttp_client: Callable[..., Awaitable[TestClient]],
    **overrides: Any,
) -> Scrape:
    settings = agent_settings(containerd, tmp_path, closed_port, **overrides)
    client = await aiohttp_client(make_app(settings, CollectorRegistry()))

    async def _scrape() -> str:
        response = await client.get("/metrics", timeout=ClientTimeout(total=1.0))
        assert response.status == 200
        return await response.text()

    return _scrape


def _calls(text: str, operation_type: str) -> float:
    return (
        _value(text, "nodesync_cri_request_duration_seconds_count", operation_type=operation_type)
        or 0
    )


async def test_stats_have_their_own_period_and_the_state_the_sync_period(
    containerd: LocalContainerd,
    tmp_path: Path,
    unused_tcp_port: int,
    aiohttp_client: Callable[..., Awaitable[TestClient]],
) -> None:
    await run_mixed_pod(containerd.endpoint, name="usage")
    scrape = await _agent_with(
        containerd, tmp_path, unused_tcp_port, aiohttp_client, stats_period=3600.0
    )
    first = await until_async(
        scrape,
        accept=lambda t: (
            _value(t, "nodesync_runtime_stats_timestamp_seconds") is not None
            and _value(t, "nodesync_containers", state="running") == 1
        ),
        timeout=WITHIN,
        what="the first stats refresh",
    )
    stamp = _value(first, "nodesync_runtime_stats_timestamp_seconds")
    assert (_value(first, "nodesync_runtime_memory_working_set_bytes") or 0) > 0
    cycles = _calls(first, "list_containers")
    # Five more sync cycles: the state is read each time, the stats not again.
    text = await until_async(
        scrape,
        accept=lambda t: _calls(t, "list_containers") >= cycles + 5,
        timeout=WITHIN,
        what="five more sync cycles",
    )
    assert _calls(text, "list_container_stats") == 1
    assert _value(text, "nodesync_runtime_stats_timestamp_seconds") == stamp
    last_sync = _value(text, "nodesync_last_sync_timestamp_seconds", source="runtime")
    assert last_sync is not None
    assert stamp is not None
    assert last_sync > stamp  # the state is newer than the stats it is served with


async def test_stats_period_zero_reads_no_stats_and_their_families_are_absent(
    containerd: LocalContainerd,
    tmp_path: Path,
    unused_tcp_port: int,
    aiohttp_client: Callable[..., Awaitable[TestClient]],
) -> None:
    await run_mixed_pod(containerd.endpoint, name="nostats")
    scrape = await _agent_with(
        containerd, tmp_path, unused_tcp_port, aiohttp_client, stats_period=0.0
    )
    text = await until_async(
        scrape,
        accept=lambda t: _calls(t, "list_containers") >= 5,
        timeout=WITHIN,
        what="five sync cycles",
    )
    assert _value(text, "nodesync_cri_up") == 1
    assert not exposed_metric_names(text) & STATS_FAMILIES
    assert _calls(text, "list_container_stats") == 0
