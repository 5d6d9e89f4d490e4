"""The agent's aiohttp application: /metrics, /healthz, /readyz, and the sync loop as a resource."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from functools import partial

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from exporter import __version__
from exporter.agent.exposition import agent_families
from exporter.agent.sync import SOURCE_CRI, AgentSync
from exporter.cri.client import CRIClient
from exporter.cri.snapshot import RuntimeReader
from exporter.host.kubelet import KubeletProbe
from exporter.host.probes import read_host
from exporter.metrics.collector import SnapshotCollector
from exporter.metrics.cri_requests import CRIRequestMetrics, SyncMetrics
from exporter.metrics.selfmetrics import build_info_family
from exporter.settings import AgentSettings

log = logging.getLogger(__name__)

SETTINGS = web.AppKey("settings", AgentSettings)
REGISTRY = web.AppKey("registry", CollectorRegistry)
SYNC = web.AppKey("sync", AgentSync)


async def _agent_ctx(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    registry = app[REGISTRY]
    client = CRIClient(
        settings.cri_endpoint, timeout=settings.cri_timeout, observer=CRIRequestMetrics(registry)
    )
    kubelet = KubeletProbe(
        settings.kubelet_healthz_url, settings.kubelet_root_dir, settings.kubelet_timeout
    )
    sync = AgentSync(
        RuntimeReader(client),
        kubelet,
        partial(read_host, settings.containerd_root, settings.kubelet_root_dir),
        SyncMetrics(registry),
    )
    app[SYNC] = sync
    build_info = build_info_family(__version__)
    registry.register(SnapshotCollector(lambda: [build_info, *agent_families(sync.state)]))
    task = asyncio.create_task(sync.run(settings.sync_period), name="agent-sync")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await kubelet.close()
        await client.close()


async def metrics(request: web.Request) -> web.Response:
    encode, content_type = choose_encoder(request.headers.get("Accept", ""))
    body = encode(request.app[REGISTRY])
    return web.Response(body=body, headers={"Content-Type": content_type})


async def healthz(request: web.Request) -> web.Response:
    """Alive while the sync loop keeps cycling (a hung loop would serve stale data forever)."""
    settings = request.app[SETTINGS]
    sync = request.app[SYNC]
    cri = sync.state.sources.get(SOURCE_CRI)
    stale_after = 3 * settings.sync_period + 4 * settings.cri_timeout
    last = sync.last_cycle_end
    if last is not None and time.monotonic() - last > stale_after:
        return web.json_response({"status": "sync loop stalled"}, status=503)
    return web.json_response({"status": "ok", "cri_up": bool(cri and cri.up)})


async def readyz(request: web.Request) -> web.Response:
    if not request.app[SYNC].state.synced:
        return web.json_response({"status": "first sync not finished"}, status=503)
    return web.json_response({"status": "ok"})


def make_app(settings: AgentSettings, registry: CollectorRegistry | None = None) -> web.Application:
    app = web.Application()
    app[SETTINGS] = settings
    app[REGISTRY] = registry if registry is not None else CollectorRegistry(auto_describe=True)
    app.cleanup_ctx.append(_agent_ctx)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app
