"""A simulator against the in-process test API server, with fast timers, for tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp

from exporter.kube.api import KubeAPI
from nodesync_sim.fake.apiserver import APIServer
from nodesync_sim.fake.scaleout.audit import WriteAudit
from nodesync_sim.fake.scaleout.scenario_file import parse
from nodesync_sim.fake.scaleout.simulator import Simulator

T = TypeVar("T")

FAST: dict[str, Any] = {
    "lease_renew_seconds": 0.2,
    "status_update_seconds": 0.5,
    "ready_after_seconds": 0.3,
    "node_monitor_grace_seconds": 1.0,
    "pod_sync_seconds": 0.1,
    "pod_start_seconds": 0.1,
    "pod_stop_seconds": 0.2,
    "crash_backoff_seconds": 0.2,
    "crash_backoff_max_seconds": 0.4,
    "agent_sync_seconds": 0.2,
    "drift_grace_seconds": 0.5,
}


def doc(**more: Any) -> dict[str, Any]:
    """A scenario document with the fast timers and ``more`` keys."""
    return {"name": "test", "timing": dict(FAST), **more}


@dataclass
class Env:
    server: APIServer
    sim: Simulator
    audit: WriteAudit

    def node(self, name: str) -> dict[str, Any]:
        return self.server.store.get("nodes", name)

    def ready(self, name: str) -> dict[str, Any]:
        return next(c for c in self.node(name)["status"]["conditions"] if c["type"] == "Ready")

    def pod(self, name: str, namespace: str = "default") -> dict[str, Any] | None:
        return self.server.store.try_get("pods", name, namespace=namespace)


@asynccontextmanager
async def simulating(
    document: dict[str, Any],
    *,
    waves: bool = True,
    prepare: Callable[[APIServer, WriteAudit], None] | None = None,
) -> AsyncIterator[Env]:
    """The simulator of ``document`` on a new server; ``prepare`` sees the server first."""
    audit = WriteAudit()
    async with APIServer(authorizer=audit) as server:
        if prepare is not None:
            prepare(server, audit)
        api = KubeAPI(server.aio_configuration())
        sim = Simulator(parse(document), api, backdate=server.store.creation_time)
        try:
            await sim.start()
            if waves:
                sim.start_waves()
            yield Env(server, sim, audit)
        finally:
            await sim.stop()
            await api.close()


async def scrape(port: int) -> str:
    """The metrics served on ``port`` (the simulated agents')."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as response,
    ):
        assert response.status == 200
        return await response.text()
