"""Fixtures for the API boundary: the test API server in the test's loop, a KubeAPI with request
metrics, ``cluster`` (either API server, for the contract suites: tests/kube/cluster.py), and
helpers to run informers and wait for conditions."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import pytest
from prometheus_client import CollectorRegistry

from exporter.kube.api import KubeAPI
from exporter.kube.informer import Informer, InformerTiming
from exporter.metrics.kube_requests import KubeRequestMetrics
from nodesync_sim.fake.apiserver import APIServer
from nodesync_sim.real.kube_apiserver import CONTROLLER, LocalKubeAPIServer
from tests.kube.cluster import FAKE, REAL, SERVERS, Cluster, FakeCluster, RealCluster
from tests.support.realkube import CONTROLLER_RBAC, DELETE_NODES_RBAC, rbac_applied

T = TypeVar("T")

#: Fast retries so failure tests finish quickly; the protocol is the same as with the defaults.
FAST = InformerTiming(
    watch_timeout_seconds=5.0,
    backoff_initial_seconds=0.02,
    backoff_max_seconds=0.2,
    short_watch_seconds=0.5,
)


async def eventually(
    predicate: Callable[[], bool], what: str = "condition", within: float = 10.0
) -> None:
    """Poll ``predicate`` until it holds; fail the test after ``within`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not predicate():
        if loop.time() > deadline:
            pytest.fail(f"timed out after {within} s waiting for: {what}")
        await asyncio.sleep(0.01)


@asynccontextmanager
async def running(informer: Informer[T], *, synced: bool = True) -> AsyncIterator[Informer[T]]:
    """Run the informer in a task (synced first, unless told otherwise); cancel it after."""
    task = asyncio.create_task(informer.run(), name=f"informer {informer.name}")
    try:
        if synced:
            async with asyncio.timeout(10):
                await informer.wait_synced()
        yield informer
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


class Recorder:
    """A handler that records (type, old name/version, new name/version) tuples."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any, Any]] = []

    def __call__(self, type_: str, old: Any, new: Any) -> None:
        self.events.append((type_, old, new))

    def names(self) -> list[tuple[str, str]]:
        return [(t, (new if new is not None else old).name) for t, old, new in self.events]

    def clear(self) -> None:
        self.events.clear()


@pytest.fixture
async def server() -> AsyncIterator[APIServer]:
    async with APIServer(bookmark_interval=0.1) as srv:
        yield srv


@asynccontextmanager
async def _cluster(request: pytest.FixtureRequest, real: str) -> AsyncIterator[Cluster]:
    if request.param == FAKE:
        async with APIServer(bookmark_interval=0.1) as srv:
            yield FakeCluster(srv, "contract")
        return
    cluster = RealCluster(request.getfixturevalue(real))
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(params=SERVERS)
async def cluster(request: pytest.FixtureRequest) -> AsyncIterator[Cluster]:
    """The test API server (a new one) or the session's real kube-apiserver, with a namespace
    of the test's own; what the test created on the real one is deleted after it."""
    async with _cluster(request, "kubeapi") as cluster:
        yield cluster


@pytest.fixture(params=SERVERS)
async def own_cluster(request: pytest.FixtureRequest) -> AsyncIterator[Cluster]:
    """As ``cluster``, with a real kube-apiserver of the test's own (about 5 s to start), for
    tests that restart it or compact its etcd."""
    async with _cluster(request, "private_kubeapi") as cluster:
        yield cluster


@pytest.fixture(scope="module")
def controller_rbac(kubeapi: LocalKubeAPIServer) -> Iterator[None]:
    """The controller's shipped RBAC, with the delete-nodes component, for the module."""
    with rbac_applied(kubeapi, CONTROLLER, [CONTROLLER_RBAC, DELETE_NODES_RBAC], ["/api/v1/nodes"]):
        yield


@pytest.fixture
async def controller_api(
    cluster: Cluster, request: pytest.FixtureRequest
) -> AsyncIterator[KubeAPI]:
    """The product's client as the controller's service account."""
    if cluster.kind == REAL:
        request.getfixturevalue("controller_rbac")
    async with await cluster.client(CONTROLLER) as client:
        yield client


@pytest.fixture
def node(cluster: Cluster) -> str:
    """A fresh Node of the test's own (a real server gives it the not-ready taint)."""
    name = cluster.unique("node")
    cluster.create(cluster.path("nodes"), {"metadata": {"name": name}})
    return name


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def metrics(registry: CollectorRegistry) -> KubeRequestMetrics:
    return KubeRequestMetrics(registry)


@pytest.fixture
async def api(server: APIServer, metrics: KubeRequestMetrics) -> AsyncIterator[KubeAPI]:
    async with KubeAPI(server.aio_configuration(), observer=metrics) as kube:
        yield kube


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """A sample's value; 0 when the series does not exist (yet)."""
    return registry.get_sample_value(name, labels) or 0.0
