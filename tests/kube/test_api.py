"""KubeAPI against the test API server: reads, selectors, watch framing, errors and metrics."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from exporter.kube import resources
from exporter.kube.api import KubeAPI, WatchEvent
from exporter.kube.errors import (
    Conflict,
    Forbidden,
    Gone,
    NotFound,
    TooManyRequests,
    Unauthorized,
    Unreachable,
)
from exporter.metrics.kube_requests import KubeRequestMetrics
from nodesync_sim.fake.apiserver import APIServer
from tests.kube.conftest import sample

ERRORS = "nodesync_kube_request_errors_total"
DURATION_COUNT = "nodesync_kube_request_duration_seconds_count"


def names(items: list[dict[str, Any]]) -> list[str]:
    return sorted(i["metadata"]["name"] for i in items)


def pod(name: str, node: str, namespace: str = "default", **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
    }


async def test_get_returns_the_object_and_raises_not_found(
    api: KubeAPI, server: APIServer, registry: CollectorRegistry
) -> None:
    server.store.create("nodes", {"metadata": {"name": "node-a"}})
    server.store.create(
        "leases", {"metadata": {"name": "node-a"}, "spec": {}}, namespace="kube-node-lease"
    )
    node = await api.get(resources.NODES, "node-a")
    assert node["metadata"]["uid"] == server.store.get("nodes", "node-a")["metadata"]["uid"]
    lease = await api.get(resources.LEASES, "node-a", "kube-node-lease")
    assert lease["metadata"]["namespace"] == "kube-node-lease"
    with pytest.raises(NotFound) as caught:
        await api.get(resources.NODES, "missing")
    assert (caught.value.code, caught.value.reason) == (404, "NotFound")
    assert sample(registry, DURATION_COUNT, resource="nodes", verb="get") == 2
    assert sample(registry, DURATION_COUNT, resource="leases", verb="get") == 1
    assert sample(registry, ERRORS, resource="nodes", verb="get", code="404") == 1
    assert sample(registry, ERRORS, resource="leases", verb="get", code="404") == 0


async def test_list_with_field_and_label_selectors(api: KubeAPI, server: APIServer) -> None:
    for name, node, app in [
        ("a1", "node-a", "web"),
        ("a2", "node-a", "db"),
        ("b1", "node-b", "web"),
    ]:
        server.store.create("pods", pod(name, node, app=app))
    server.store.create("pods", pod("s1", "node-a", namespace="kube-system", app="web"))

    on_a = await api.list(resources.PODS, field_selector="spec.nodeName=node-a")
    assert names(on_a.items) == ["a1", "a2", "s1"]
    assert int(on_a.resource_version) == server.store.resource_version
    by_name = await api.list(resources.PODS, field_selector="metadata.name=b1")
    assert names(by_name.items) == ["b1"]
    web_in_default = await api.list(resources.PODS, namespace="default", label_selector="app=web")
    assert names(web_in_default.items) == ["a1", "b1"]
    both = await api.list(
        resources.PODS, field_selector="spec.nodeName=node-a", label_selector="app=web"
    )
    assert names(both.items) == ["a1", "s1"]


async def test_list_pages_with_limit_and_continue(api: KubeAPI, server: APIServer) -> None:
    for i in range(5):
        server.store.create("nodes", {"metadata": {"name": f"n{i}"}})
    seen: list[str] = []
    token: str | None = None
    pages = 0
    while True:
        page = await api.list(resources.NODES, limit=2, continue_token=token)
        pages += 1
        seen += names(page.items)
        token = page.continue_token
        if token is None:
            break
    assert (seen, pages) == ([f"n{i}" for i in range(5)], 3)


async def test_unauthorized_is_raised_and_counted(
    server: APIServer, metrics: KubeRequestMetrics, registry: CollectorRegistry
) -> None:
    async with KubeAPI(server.aio_configuration(token="wrong"), observer=metrics) as api:
        with pytest.raises(Unauthorized) as caught:
            await api.list(resources.NODES)
    assert caught.value.code == 401
    assert sample(registry, ERRORS, resource="nodes", verb="list", code="401") == 1


async def test_forbidden_is_raised(
    metrics: KubeRequestMetrics, registry: CollectorRegistry
) -> None:
    def read_leases_only(
        user: str, verb: str, resource: str, subresource: str, namespace: str, name: str
    ) -> bool:
        return resource == "leases"

    async with (
        APIServer(authorizer=read_leases_only) as srv,
        KubeAPI(srv.aio_configuration(), observer=metrics) as api,
    ):
        assert (await api.list(resources.LEASES)).items == []
        with pytest.raises(Forbidden) as caught:
            await api.list(resources.NODES)
    assert (caught.value.code, caught.value.reason) == (403, "Forbidden")
    assert sample(registry, ERRORS, resource="nodes", verb="list", code="403") == 1


async def test_too_many_requests_carries_retry_after(
    api: KubeAPI, server: APIServer, registry: CollectorRegistry
) -> None:
    server.faults.fail_next(1, 429, verb="list", retry_after=2)
    with pytest.raises(TooManyRequests) as caught:
        await api.list(resources.NODES)
    assert caught.value.retry_after == 2.0
    await api.list(resources.NODES)  # the fault is used up
    assert sample(registry, ERRORS, resource="nodes", verb="list", code="429") == 1
    assert sample(registry, DURATION_COUNT, resource="nodes", verb="list") == 2


async def test_unreachable_server(metrics: KubeRequestMetrics, registry: CollectorRegistry) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with APIServer() as srv:
        config = srv.aio_configuration()
    config.host = f"http://127.0.0.1:{port}"
    async with KubeAPI(config, observer=metrics) as api:
        with pytest.raises(Unreachable) as caught:
            await api.get(resources.NODES, "x")
    assert caught.value.code == 0
    assert sample(registry, ERRORS, resource="nodes", verb="get", code="unreachable") == 1


async def test_watch_streams_events_and_bookmarks(
    api: KubeAPI, server: APIServer, registry: CollectorRegistry
) -> None:
    start = (await api.list(resources.NODES)).resource_version
    server.store.create("nodes", {"metadata": {"name": "n1"}})
    server.store.patch("nodes", "n1", {"metadata": {"labels": {"x": "1"}}})
    server.store.delete("nodes", "n1")
    seen: list[WatchEvent] = []
    async with api.watch(resources.NODES, resource_version=start, timeout_seconds=1) as events:
        async for event in events:
            seen.append(event)
    kinds = [e.type for e in seen]
    assert kinds[:3] == ["ADDED", "MODIFIED", "DELETED"]
    assert set(kinds[3:]) == {"BOOKMARK"}, "then only bookmarks until the server's timeout"
    assert seen[1].object["metadata"]["labels"] == {"x": "1"}
    assert sample(registry, "nodesync_kube_watches_total", resource="nodes") == 1
    assert sample(registry, DURATION_COUNT, resource="nodes", verb="watch") == 0


async def test_watch_line_longer_than_the_read_buffer(api: KubeAPI, server: APIServer) -> None:
    start = (await api.list(resources.NODES)).resource_version
    big = "x" * (5 << 20)  # 5 MiB: more than aiohttp's read buffer and line limit
    server.store.create("nodes", {"metadata": {"name": "big", "annotations": {"blob": big}}})
    server.store.create("nodes", {"metadata": {"name": "after"}})
    got: list[tuple[str, int]] = []
    async with api.watch(resources.NODES, resource_version=start, timeout_seconds=2) as events:
        async for event in events:
            meta = event.object["metadata"]
            got.append((meta.get("name", ""), len(meta.get("annotations", {}).get("blob", ""))))
            if meta.get("name") == "after":
                break
    assert got == [("big", len(big)), ("after", 0)]


async def test_watch_from_an_expired_version_yields_a_gone_error_event(
    api: KubeAPI, server: APIServer, registry: CollectorRegistry
) -> None:
    start = (await api.list(resources.NODES)).resource_version
    server.store.create("nodes", {"metadata": {"name": "n1"}})
    server.compact()
    async with api.watch(resources.NODES, resource_version=start, timeout_seconds=5) as events:
        seen = [event async for event in events]
    assert [e.type for e in seen] == ["ERROR"]
    err = seen[0].error()
    assert isinstance(err, Gone)
    assert (err.code, err.reason) == (410, "Expired")
    assert sample(registry, ERRORS, resource="nodes", verb="watch", code="410") == 1


async def test_generic_request_writes_and_translates_conflicts(
    api: KubeAPI, server: APIServer, registry: CollectorRegistry
) -> None:
    server.store.create("nodes", {"metadata": {"name": "n1"}})
    path = resources.NODES.path(name="n1")
    patched = await api.request(
        "PATCH",
        resources.NODES,
        "patch",
        path,
        body={"spec": {"unschedulable": True}},
        content_type="application/merge-patch+json",
    )
    assert patched["spec"]["unschedulable"] is True
    assert server.store.get("nodes", "n1")["spec"]["unschedulable"] is True
    stale = {"metadata": {"resourceVersion": "1"}, "spec": {"unschedulable": False}}
    with pytest.raises(Conflict):
        await api.request(
            "PATCH",
            resources.NODES,
            "patch",
            path,
            body=stale,
            content_type="application/merge-patch+json",
        )
    assert sample(registry, ERRORS, resource="nodes", verb="patch", code="409") == 1
    assert sample(registry, DURATION_COUNT, resource="nodes", verb="patch") == 2
