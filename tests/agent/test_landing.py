"""The agent's own pages without a runtime to read: ``/`` is a landing page linking its
endpoints, and ``/metrics`` carries the ``process_*`` families and passes promtool."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient
from prometheus_client import CollectorRegistry

from exporter.agent.app import make_app
from exporter.agent.settings import AgentSettings
from tests.metrics.pages import check_landing_page_and_process_metrics


@pytest.mark.prometheus
async def test_landing_page_and_process_metrics(
    tmp_path: Path,
    unused_tcp_port: int,
    aiohttp_client: Callable[..., Awaitable[TestClient]],
) -> None:
    settings = AgentSettings(
        cri_endpoint=f"unix://{tmp_path}/no-runtime.sock",
        listen=("127.0.0.1", 0),
        cri_timeout=0.5,
        kubelet_root_dir=str(tmp_path),
        containerd_root=str(tmp_path),
        kubelet_healthz_url=f"http://127.0.0.1:{unused_tcp_port}/healthz",
        kubelet_timeout=0.5,
    )
    client = await aiohttp_client(make_app(settings, CollectorRegistry()))
    await check_landing_page_and_process_metrics(client, "agent")
