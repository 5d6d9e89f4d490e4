"""The agent's aiohttp application: /metrics, /healthz, /readyz, and the sync loop as a resource."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from functools import partial

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from exporter import __version__
from exporter.agent.apiview import AgentAPIView
from exporter.agent.cleanup import NodeCleanup
from exporter.agent.exposition import agent_families
from exporter.agent.sync import SOURCE_CRI, AgentSync
from exporter.cri.client import CRIClient
from exporter.cri.snapshot import RuntimeReader
from exporter.host.kubelet import KubeletProbe
from exporter.host.probes import read_host
from exporter.kube.api import KubeAPI
from exporter.kube.config import ConfigError, load_configuration
from exporter.kube.writer import KubeWriter
from exporter.metrics.cleanup import cleanup_families
from exporter.metrics.collector import SnapshotCollector
from exporter.metrics.cri_requests import CRIRequestMetrics, SyncMetrics
from exporter.metrics.kube_requests import KubeRequestMetrics
from exporter.metrics.selfmetrics import build_info_family, start_family
from exporter.settings import AgentSettings
from exporter.tasks import cancel_and_wait

log = logging.getLogger(__name__)

SETTINGS = web.AppKey("settings", AgentSettings)
REGISTRY = web.AppKey("registry", CollectorRegistry)
SYNC = web.AppKey("sync", AgentSync)
CLEANUP = web.AppKey("cleanup", NodeCleanup)  # set when the agent answers cleanup requests


async def _api_view(
    settings: AgentSettings, registry: CollectorRegistry
) -> tuple[KubeAPI, AgentAPIView] | tuple[None, None]:
    """The API side, when it can be configured; the agent works without it (source down)."""
    if not settings.node_name:
        log.warning("no --node-name (NODE_NAME): running without the API server's view")
        return None, None
    try:
        configuration = await load_configuration(settings.kubeconfig)
    except ConfigError as exc:
        log.warning("running without the API server's view: %s", exc)
        return None, None
    api = KubeAPI(configuration, observer=KubeRequestMetrics(registry))
    view = AgentAPIView(api, settings.node_name, initial_jitter_seconds=settings.api_initial_jitter)
    return api, view


async def _agent_ctx(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    registry = app[REGISTRY]
    api, view = await _api_view(settings, registry)
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
        api=view,
        drift_grace_seconds=settings.drift_grace_period,
    )
    app[SYNC] = sync
    static = [build_info_family(__version__), start_family(time.time())]
    registry.register(SnapshotCollector(lambda: [*static, *agent_families(sync.state)]))
    tasks: list[asyncio.Task[object]] = [
        asyncio.create_task(sync.run(settings.sync_period), name="agent-sync")
    ]
    if view is not None:
        tasks.append(asyncio.create_task(view.run(), name="agent-api-view"))
    if api is not None and view is not None and settings.cleanup:
        cleanup = NodeCleanup(
            settings.node_name,
            node=view.node,
            drift=lambda: sync.state.drift,
            runtime=client,
            api=KubeWriter(api, component="nodesync-agent"),
            call_timeout=settings.cleanup_call_timeout,
        )
        app[CLEANUP] = cleanup
        registry.register(SnapshotCollector(lambda: cleanup_families(cleanup.totals())))
        tasks.append(asyncio.create_task(cleanup.run(settings.sync_period), name="agent-cleanup"))
    try:
        yield
    finally:
        await cancel_and_wait(tasks)
        await kubelet.close()
        await client.close()
        if api is not None:
            await api.close()


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
