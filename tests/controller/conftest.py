"""Fixtures for the controller: the test API server (with a clock the test sets, so creation times
are known), a kubeconfig for it, and the controller app served by pytest-aiohttp."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from prometheus_client import CollectorRegistry

from exporter.controller.app import make_app
from exporter.controller.settings import ControllerSettings
from exporter.model.rfc3339 import format_micro_time, format_time
from nodesync_sim.fake.apiserver import APIServer
from nodesync_sim.fake.apiserver.store import Store
from tests.controller.builders import T0
from tests.metrics.exposition import series

LEASES = "kube-node-lease"


@dataclass
class SimClock:
    """The test API server's clock: creation timestamps come from here."""

    now: float = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> SimClock:
    return SimClock()


@pytest.fixture
async def server(clock: SimClock) -> AsyncIterator[APIServer]:
    async with APIServer(store=Store(clock=clock), bookmark_interval=0.2) as srv:
        yield srv


@pytest.fixture
def settings(server: APIServer, tmp_path: Path) -> ControllerSettings:
    return ControllerSettings(
        listen=("127.0.0.1", 0),
        kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")),
        wave_label="example.com/scale-out",
        wave_gap=120.0,
    )


Client = TestClient[Any, Any]
AiohttpClient = Callable[..., Awaitable[Client]]


@pytest.fixture
async def controller(aiohttp_client: AiohttpClient, settings: ControllerSettings) -> Client:
    return await aiohttp_client(make_app(settings, registry=CollectorRegistry()))


async def scrape(client: Client) -> str:
    response = await client.get("/metrics")
    assert response.status == 200
    return await response.text()


async def value(client: Client, name: str, **labels: str) -> float | None:
    """One sample of a fresh scrape (None when the series does not exist)."""
    return series(await scrape(client), name).get(frozenset(labels.items()))


def node_object(
    name: str, *, ready: str = "True", transition: float = T0, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": ready,
                    "reason": "KubeletReady" if ready == "True" else "KubeletNotReady",
                    "lastTransitionTime": format_time(transition),
                    "lastHeartbeatTime": format_time(transition),
                },
                {
                    "type": "DiskPressure",
                    "status": "False",
                    "lastTransitionTime": format_time(transition),
                },
            ]
        },
    }


def lease_object(name: str, renew: float) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": 40,
            "renewTime": format_micro_time(renew),
        },
    }
