"""The controller's aiohttp application: /metrics, /healthz, /readyz, with the API client and the
cluster watch as resources.

Resources start in ``cleanup_ctx`` order: the API client (``KUBE_API``), then the cluster watch
(``CLUSTER``). Further parts of the controller (the Alertmanager webhook and the executor,
exporter.controller.wiring) are installed by functions passed as ``extensions``: each gets the
application before it starts, adds its routes and appends its own cleanup contexts, which run
after these two, so ``app[KUBE_API]`` and ``app[CLUSTER]`` are ready when theirs start, and
they stop before these are torn down. The keys are exporter.controller.keys.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from exporter import __version__, heap
from exporter.controller.cluster import ClusterWatch
from exporter.controller.exposition import SOURCE_APISERVER, controller_families
from exporter.controller.keys import (
    CLUSTER,
    COHORT_KEYS,
    GIVEN_API,
    KUBE_API,
    KUBE_METRICS,
    READINESS,
    REGISTRY,
    SETTINGS,
)
from exporter.controller.settings import ControllerSettings
from exporter.kube.api import KubeAPI
from exporter.kube.config import load_configuration
from exporter.kube.observer import RequestObserver
from exporter.metrics.collector import SnapshotCollector
from exporter.metrics.kube_requests import KubeRequestMetrics
from exporter.metrics.selfmetrics import build_info_family, register_process_metrics
from exporter.serve import harden, landing_page
from exporter.tasks import cancel_and_wait

Extension = Callable[[web.Application], None]

LANDING_PAGE = landing_page(
    "nodesync controller",
    "Cluster view of every Node and node Lease, scale-out waves, and (with a webhook token) "
    "the Alertmanager webhook POST /alerts and its rollbacks.",
    [
        ("/metrics", "metrics"),
        ("/healthz", "liveness: the cluster watch runs"),
        ("/readyz", "readiness: Nodes and Leases listed, the journal takes writes"),
    ],
    __version__,
)


async def connect(settings: ControllerSettings, observer: RequestObserver | None = None) -> KubeAPI:
    """An API client from ``--kubeconfig``, or from the pod's service account when it is empty."""
    return KubeAPI(
        await load_configuration(settings.kubeconfig, context=settings.context), observer=observer
    )


async def _kube_ctx(app: web.Application) -> AsyncIterator[None]:
    if app[GIVEN_API]:
        yield  # the caller's client: the caller closes it
        return
    api = await connect(app[SETTINGS], app[KUBE_METRICS])
    app[KUBE_API] = api
    try:
        yield
    finally:
        await api.close()


async def _cluster_ctx(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    registry = app[REGISTRY]
    cluster = ClusterWatch(
        app[KUBE_API],
        wave_label=settings.wave_label or None,
        wave_gap=settings.wave_gap,
        collectors=settings.collectors,
        join=settings.join,
        cohort_keys=app.get(COHORT_KEYS, ()),
    )
    app[CLUSTER] = cluster
    build_info = build_info_family(__version__)
    collector = SnapshotCollector(
        lambda: controller_families(
            cluster.view() if cluster.synced else None,
            {SOURCE_APISERVER: cluster.status()},
            build_info,
            settings.collectors,
            cluster.join_families() if cluster.synced else (),
        )
    )
    registry.register(collector)
    cluster.start()
    frozen = asyncio.create_task(_freeze_when_synced(cluster), name="freeze-heap")
    try:
        yield
    finally:
        await cancel_and_wait([frozen])
        heap.unfreeze()
        await cluster.stop()
        registry.unregister(collector)


async def _freeze_when_synced(cluster: ClusterWatch) -> None:
    """Once the view is listed, what the process holds is mostly there for good: keep it out of
    the garbage collector's full passes (exporter.heap)."""
    await cluster.wait_synced()
    heap.freeze()


async def metrics(request: web.Request) -> web.Response:
    """The node series as the cluster watch keeps them (text rendered node by node as watch
    events arrived: a scrape only joins bytes), then the registry's families (the waves, the
    watches' status, the API client's, the webhook's and the executor's: a few hundred samples,
    whatever the cluster's size), collected in the event loop and rendered in a thread.

    Every node family is a gauge, whose lines read the same in both text formats; the
    registry's part comes last, so OpenMetrics' ``# EOF`` ends the answer."""
    encode, content_type = choose_encoder(request.headers.get("Accept", ""))
    cluster = request.app[CLUSTER]
    nodes = cluster.exposition() if cluster.synced else []
    families = list(request.app[REGISTRY].collect())
    collected = CollectorRegistry(auto_describe=False)
    collected.register(SnapshotCollector(lambda: families))
    rest = await asyncio.to_thread(encode, collected)
    return web.Response(body=b"".join([*nodes, rest]), headers={"Content-Type": content_type})


async def healthz(request: web.Request) -> web.Response:
    """Alive while the watches run (they retry failures themselves; a stopped watch is a bug)."""
    cluster = request.app[CLUSTER]
    if not cluster.running:
        return web.json_response({"status": "cluster watch stopped"}, status=503)
    return web.json_response({"status": "ok", "apiserver_up": cluster.status().up})


async def readyz(request: web.Request) -> web.Response:
    """Ready once Nodes and Leases were both listed (before that the view is incomplete), and
    while every check of ``READINESS`` passes (the webhook's journal takes writes).
    A follower is ready too: it serves its metrics and takes over at once when it leads, and a
    rolling update waits for each new replica to be ready."""
    cluster = request.app[CLUSTER]
    if not cluster.synced:
        return web.json_response(
            {
                "status": "waiting for the first list",
                "nodes_synced": cluster.nodes.synced,
                "leases_synced": cluster.leases.synced,
            },
            status=503,
        )
    for check in request.app[READINESS]:
        reason = check()
        if reason is not None:
            return web.json_response({"status": reason}, status=503)
    return web.json_response({"status": "ok"})


def make_app(
    settings: ControllerSettings,
    *,
    api: KubeAPI | None = None,
    registry: CollectorRegistry | None = None,
    extensions: Iterable[Extension] = (),
) -> web.Application:
    """The controller. ``api``: use this client (the caller closes it, and it reports requests
    to its own observer) instead of connecting with ``settings.kubeconfig`` (then API requests
    are counted in ``registry``); ``registry``: serve this registry (default: a new one)."""
    app = web.Application()
    app[SETTINGS] = settings
    app[REGISTRY] = registry if registry is not None else CollectorRegistry(auto_describe=True)
    app[GIVEN_API] = api is not None
    app[READINESS] = []
    if api is not None:
        app[KUBE_API] = api  # requests are reported to the observer it was built with
    else:
        app[KUBE_METRICS] = KubeRequestMetrics(app[REGISTRY])
    harden(app, app[REGISTRY], settings.server)
    register_process_metrics(app[REGISTRY])
    app.cleanup_ctx.append(_kube_ctx)
    app.cleanup_ctx.append(_cluster_ctx)
    app.router.add_get("/", LANDING_PAGE)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    for extend in extensions:
        extend(app)
    return app
