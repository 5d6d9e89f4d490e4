"""The agent's aiohttp application: /metrics, /healthz, /readyz, and the sync loop as a resource."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from functools import partial
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from exporter import __version__
from exporter.agent.exposition import agent_families
from exporter.agent.keys import CLEANUP, REGISTRY, SETTINGS, SYNC
from exporter.agent.runtime_events import RuntimeEvents
from exporter.agent.settings import AgentSettings
from exporter.agent.sources import SOURCE_CRI
from exporter.agent.sync import TRIGGERS, AgentSync
from exporter.cri.client import CRIClient
from exporter.cri.events import subscribe
from exporter.cri.snapshot import RuntimeReader
from exporter.host.kubelet import KubeletProbe
from exporter.host.probes import read_host
from exporter.metrics.collector import SnapshotCollector
from exporter.metrics.cri_events import EventMetrics
from exporter.metrics.cri_requests import CRIRequestMetrics, SyncMetrics
from exporter.metrics.selfmetrics import (
    build_info_family,
    register_process_metrics,
    start_family,
)
from exporter.model.runtime_events import TOPIC_LABELS
from exporter.serve import harden, landing_page
from exporter.tasks import cancel_and_wait

if TYPE_CHECKING:
    from exporter.agent.api_connection import APIConnection

log = logging.getLogger(__name__)

LANDING_PAGE = landing_page(
    "nodesync agent",
    "Per-node exporter: the container runtime, kubelet and the host, as metrics.",
    [
        ("/metrics", "metrics"),
        ("/healthz", "liveness: the sync loop runs"),
        ("/readyz", "readiness: the first sync finished"),
    ],
    __version__,
)


async def _api_side(settings: AgentSettings, registry: CollectorRegistry) -> APIConnection | None:
    if not settings.node_name:
        log.warning("no --node.name (NODE_NAME): running without the API server's view")
        return None
    from exporter.agent.api_connection import connect  # loads the API boundary

    return await connect(settings, registry)


async def _publish_when_synced(side: APIConnection, sync: AgentSync) -> None:
    """The API view's first complete lists are published at once, not a sync period later."""
    await side.objects.wait_synced()
    sync.wake()


async def _agent_ctx(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    registry = app[REGISTRY]
    side = await _api_side(settings, registry)
    client = CRIClient(
        settings.cri_endpoint, timeout=settings.cri_timeout, observer=CRIRequestMetrics(registry)
    )
    kubelet = KubeletProbe(
        settings.kubelet_healthz_url, settings.kubelet_root_dir, settings.kubelet_timeout
    )
    reader = RuntimeReader(client)
    event_metrics = EventMetrics(registry, TOPIC_LABELS, TRIGGERS)
    sync = AgentSync(
        reader,
        kubelet,
        partial(read_host, settings.containerd_root, settings.kubelet_root_dir),
        SyncMetrics(registry),
        api=side.objects if side is not None else None,
        stats=reader if settings.stats_period > 0 else None,
        drift_grace_seconds=settings.drift_grace_period,
        changes=event_metrics,
        node=side.objects.node if side is not None else lambda: None,
    )
    app[SYNC] = sync
    static = [build_info_family(__version__), start_family(time.time())]
    registry.register(SnapshotCollector(lambda: [*static, *agent_families(sync.state)]))
    tasks: list[asyncio.Task[object]] = [
        asyncio.create_task(sync.run(settings.sync_period), name="agent-sync"),
        asyncio.create_task(
            RuntimeEvents(partial(subscribe, client), sync, event_metrics).run(),
            name="agent-runtime-events",
        ),
    ]
    if settings.stats_period > 0:
        tasks.append(asyncio.create_task(sync.run_stats(settings.stats_period), name="agent-stats"))
    if side is not None:
        tasks.append(asyncio.create_task(side.objects.run(), name="agent-api-view"))
        tasks.append(asyncio.create_task(_publish_when_synced(side, sync), name="agent-api-synced"))
    # The cleanup's own healthz probe (a session of its own: never queued behind the sync's).
    healthz = KubeletProbe(
        settings.kubelet_healthz_url, settings.kubelet_root_dir, settings.kubelet_timeout
    )
    if side is not None and settings.cleanup:
        from exporter.agent.cleanup import NodeCleanup  # the API side's: kube's writer
        from exporter.metrics.cleanup import cleanup_families

        cleanup = NodeCleanup(
            settings.node_name,
            node=side.objects.node,
            drift=lambda: sync.state.drift,
            runtime=client,
            runtime_error=partial(_runtime_error, sync),
            api=side.writer,
            kubelet_healthy=healthz.healthy,
            call_timeout=settings.cleanup_call_timeout,
            own_pod_uid=settings.pod_uid,
        )
        app[CLEANUP] = cleanup
        registry.register(SnapshotCollector(lambda: cleanup_families(cleanup.totals())))
        tasks.append(asyncio.create_task(cleanup.run(settings.sync_period), name="agent-cleanup"))
    try:
        yield
    finally:
        await cancel_and_wait(tasks)
        await kubelet.close()
        await healthz.close()
        await client.close()
        if side is not None:
            await side.api.close()


def _runtime_error(sync: AgentSync) -> str:
    """Why the runtime cannot be read, as the last sync found ("" while it can)."""
    source = sync.state.sources.get(SOURCE_CRI)
    return (
        source.error or "the runtime does not answer"
        if source is not None and not source.up
        else ""
    )


async def metrics(request: web.Request) -> web.Response:
    encode, content_type = choose_encoder(request.headers.get("Accept", ""))
    body = encode(request.app[REGISTRY])
    return web.Response(body=body, headers={"Content-Type": content_type})


async def healthz(request: web.Request) -> web.Response:
    """Alive while both sync schedules (the runtime's, the node probes') keep cycling: a hung
    loop would serve stale data forever."""
    settings = request.app[SETTINGS]
    sync = request.app[SYNC]
    cri = sync.state.sources.get(SOURCE_CRI)
    stale_after = 3 * settings.sync_period + 4 * max(settings.cri_timeout, settings.kubelet_timeout)
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
    harden(app, app[REGISTRY], settings.server)
    register_process_metrics(app[REGISTRY])
    app.cleanup_ctx.append(_agent_ctx)
    app.router.add_get("/", LANDING_PAGE)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app
