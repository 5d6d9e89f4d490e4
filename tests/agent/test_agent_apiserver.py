"""The agent with both sides real: a real containerd and the test API server over HTTP.

Drift compares what the API server wants on this node with what containerd runs and what
kubelet's pod directories hold; every count must go back to 0 once its cause is removed.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientTimeout
from aiohttp.test_utils import TestClient
from prometheus_client import CollectorRegistry

from exporter.agent.app import make_app
from nodesync_sim.fake.apiserver.server import APIServer
from nodesync_sim.real.containerd import LocalContainerd
from nodesync_sim.real.runtime_pods import ContainerSpec, remove_pod, run_pod
from tests.agent.settings import agent_settings
from tests.metrics.exposition import labels, series
from tests.support.wait import until_async

pytestmark = pytest.mark.containerd

NODE = "node-a"
#: How long a change may take to show in /metrics.
WITHIN = 20.0
GRACE = 0.5
#: How long one scrape may take: the agent answers in the test's own event loop, which its
#: sync shares, so on busy cores a scrape can wait seconds behind a CRI listing.
SCRAPE_WITHIN = 10.0
Scrape = Callable[[], Awaitable[str]]


@dataclass
class Env:
    containerd: LocalContainerd
    api: APIServer
    kubelet_root: Path
    client: TestClient

    async def scrape(self) -> str:
        response = await self.client.get("/metrics", timeout=ClientTimeout(total=SCRAPE_WITHIN))
        assert response.status == 200
        return await response.text()


def _pod(name: str, node: str = NODE) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "busybox"}]},
        "status": {"phase": "Running"},
    }


def _node() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}


def _create(env: Env, pod: dict[str, Any]) -> str:
    """Create a pod in the API server; its uid is the server's."""
    return str(env.api.store.create("pods", pod, namespace="default")["metadata"]["uid"])


@pytest.fixture
async def env(
    containerd: LocalContainerd,
    tmp_path: Path,
    unused_tcp_port: int,
    aiohttp_client: Callable[..., Awaitable[TestClient]],
) -> AsyncIterator[Env]:
    async with APIServer() as api:
        api.store.create("nodes", _node())
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        kubelet_root = tmp_path / "kubelet"
        (kubelet_root / "pods").mkdir(parents=True)
        settings = agent_settings(
            containerd,
            kubelet_root,
            unused_tcp_port,
            node_name=NODE,
            kubeconfig=str(kubeconfig),
            api_initial_jitter=0.0,
            drift_grace_period=GRACE,
        )
        client = await aiohttp_client(make_app(settings, CollectorRegistry()))
        yield Env(containerd, api, kubelet_root, client)


def _drift(text: str) -> dict[str, float]:
    return {dict(k)["kind"]: v for k, v in series(text, "nodesync_drift_pods").items()}


def _api_phase(text: str, phase: str) -> float | None:
    return series(text, "nodesync_pods").get(labels(phase=phase, source="apiserver"))


async def test_drift_kinds_appear_and_go_back_to_zero(env: Env) -> None:
    endpoint = env.containerd.endpoint
    sleeper = [ContainerSpec("app", ["/bin/sleep", "inf"])]
    # A desired pod that runs: no drift.
    healthy_uid = _create(env, _pod("healthy"))
    await run_pod(endpoint, "healthy", "default", healthy_uid, sleeper)
    # A pod deleted in the API whose sandbox stayed in containerd: an orphan sandbox.
    orphan_uid = str(uuid.uuid4())
    orphan = await run_pod(endpoint, "gone", "default", orphan_uid, sleeper)
    # A desired pod without any sandbox: missing.
    missing_uid = _create(env, _pod("waiting"))
    # A pod directory kubelet left behind, known to neither side.
    leftover = env.kubelet_root / "pods" / str(uuid.uuid4())
    leftover.mkdir()
    # A pod bound to another node is not this agent's business.
    _create(env, _pod("elsewhere", "node-b"))

    text = await until_async(
        env.scrape,
        accept=lambda t: (
            _drift(t).get("orphan_sandbox") == 1
            and _drift(t).get("missing_sandbox") == 1
            and _drift(t).get("kubelet_only") == 1
        ),
        timeout=WITHIN,
        what="orphan, missing and kubelet-only drift",
    )
    assert _drift(text)["stale_sandbox"] == 0
    assert _drift(text)["orphan_container"] == 0
    assert series(text, "nodesync_source_up")[labels(source="apiserver")] == 1
    assert _api_phase(text, "Running") == 2  # the two pods bound to node-a
    oldest = series(text, "nodesync_drift_oldest_timestamp_seconds")
    assert set(oldest) == {
        labels(kind="orphan_sandbox"),
        labels(kind="missing_sandbox"),
        labels(kind="kubelet_only"),
    }
    assert all(time.time() - 120 < v <= time.time() for v in oldest.values())

    # Remove each cause: every count goes back to 0, and the timestamps disappear.
    await remove_pod(endpoint, orphan.sandbox_id)
    await run_pod(endpoint, "waiting", "default", missing_uid, sleeper)
    leftover.rmdir()
    text = await until_async(
        env.scrape,
        accept=lambda t: bool(_drift(t)) and set(_drift(t).values()) == {0.0},
        timeout=WITHIN,
        what="drift back to 0",
    )
    assert series(text, "nodesync_drift_oldest_timestamp_seconds") == {}


async def test_api_failure_keeps_cri_metrics_and_recovers_without_losing_events(env: Env) -> None:
    await until_async(
        env.scrape,
        accept=lambda t: series(t, "nodesync_source_up").get(labels(source="apiserver")) == 1,
        timeout=WITHIN,
        what="the API view to sync",
    )
    # The API server answers 500 to everything and drops its watches.
    env.api.faults.fail_next(10_000, 500)
    env.api.drop_watches()
    # Once the pod watch fails too, there is no API view of the pods: no apiserver samples.
    text = await until_async(
        env.scrape,
        accept=lambda t: (
            series(t, "nodesync_source_up").get(labels(source="apiserver")) == 0
            and _api_phase(t, "Pending") is None
        ),
        timeout=WITHIN,
        what="the API source to go down",
    )
    assert series(text, "nodesync_cri_up") == {labels(): 1.0}
    assert series(text, "nodesync_source_up")[labels(source="runtime")] == 1
    errors = series(text, "nodesync_kube_request_errors_total")
    assert any(dict(k)["code"] == "500" for k in errors), errors

    # Meanwhile a pod is bound to the node: the agent must see it after recovery.
    pod = _pod("late")
    pod["status"] = {"phase": "Pending"}
    _create(env, pod)
    env.api.faults.clear()
    text = await until_async(
        env.scrape,
        accept=lambda t: (
            series(t, "nodesync_source_up").get(labels(source="apiserver")) == 1
            and _api_phase(t, "Pending") == 1
        ),
        timeout=WITHIN,
        what="recovery with the pod created during the outage",
    )


async def test_api_server_stopped_and_restarted(env: Env) -> None:
    await until_async(
        env.scrape,
        accept=lambda t: series(t, "nodesync_source_up").get(labels(source="apiserver")) == 1,
        timeout=WITHIN,
        what="the API view to sync",
    )
    await env.api.stop()
    text = await until_async(
        env.scrape,
        accept=lambda t: series(t, "nodesync_source_up").get(labels(source="apiserver")) == 0,
        timeout=WITHIN,
        what="the API source to go down",
    )
    assert series(text, "nodesync_cri_up") == {labels(): 1.0}
    _create(env, _pod("during"))
    await env.api.start()  # same port, same store
    await until_async(
        env.scrape,
        accept=lambda t: (
            series(t, "nodesync_source_up").get(labels(source="apiserver")) == 1
            and _api_phase(t, "Running") == 1
        ),
        timeout=WITHIN,
        what="recovery after the restart",
    )


async def test_without_api_server_the_agent_reports_the_source_down(
    containerd: LocalContainerd,
    tmp_path: Path,
    unused_tcp_port: int,
    aiohttp_client: Callable[..., Awaitable[TestClient]],
) -> None:
    settings = agent_settings(
        containerd,
        tmp_path,
        unused_tcp_port,
        node_name=NODE,
        kubeconfig=str(tmp_path / "missing-kubeconfig"),
    )
    client = await aiohttp_client(make_app(settings, CollectorRegistry()))

    async def scrape() -> str:
        return await (await client.get("/metrics")).text()

    text = await until_async(
        scrape,
        accept=lambda t: series(t, "nodesync_cri_up") == {labels(): 1.0},
        timeout=WITHIN,
        what="the first sync",
    )
    assert series(text, "nodesync_source_up")[labels(source="apiserver")] == 0
    assert series(text, "nodesync_drift_pods") == {}
