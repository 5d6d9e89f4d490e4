"""Fixtures the agent's tests share: an agent on the test's containerd and its scrape, and the
shipped RBAC on the real kube-apiserver."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientTimeout
from aiohttp.test_utils import TestClient
from prometheus_client import CollectorRegistry

from exporter.agent.app import make_app
from exporter.model.kube import LEASE_NAMESPACE
from nodesync_sim.real.containerd import LocalContainerd
from nodesync_sim.real.kube_apiserver import AGENT, LocalKubeAPIServer
from tests.agent.settings import agent_settings
from tests.support.realkube import AGENT_RBAC, rbac_applied

Scrape = Callable[[], Awaitable[str]]

NODE_LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases"


@pytest.fixture
def agent_rbac(kubeapi: LocalKubeAPIServer) -> Iterator[None]:
    """The shipped agent RBAC on the shared server for the test."""
    with rbac_applied(kubeapi, AGENT, [AGENT_RBAC], ["/api/v1/nodes", NODE_LEASES]):
        yield


@pytest.fixture
def agent_options() -> dict[str, Any]:
    """The agent's settings beyond the defaults of :func:`agent_settings`; a test module
    overrides this fixture to change them. Stats every second, not every minute: a first stats
    read that misses its 0.5 s CRI deadline on a busy machine is read again before a test's
    wait runs out."""
    return {"stats_period": 1.0}


@pytest.fixture
async def agent(
    containerd: LocalContainerd,
    tmp_path: Path,
    unused_tcp_port: int,
    aiohttp_client: Callable[..., Awaitable[TestClient]],
    agent_options: dict[str, Any],
) -> TestClient:
    """The agent's app on the test's containerd, served to a test client."""
    settings = agent_settings(containerd, tmp_path, unused_tcp_port, **agent_options)
    return await aiohttp_client(make_app(settings, CollectorRegistry()))


@pytest.fixture
def scrape(agent: TestClient) -> Scrape:
    """One GET /metrics of :func:`agent`: its text."""

    async def _scrape() -> str:
        # The scrape must never wait on the runtime: a 1 s client deadline enforces it.
        response = await agent.get("/metrics", timeout=ClientTimeout(total=1.0))
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=")
        return await response.text()

    return _scrape
