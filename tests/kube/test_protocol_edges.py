"""Answers the test API server never gives but real servers and proxies can: a watch refused
with HTTP 410 (not an ERROR event), a body that is not JSON, a broken watch line. A minimal
aiohttp app stands in for the server; everything else is tested against the test API server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from prometheus_client import CollectorRegistry

from exporter.kube import resources
from exporter.kube.api import KubeAPI
from exporter.kube.config import token_configuration
from exporter.kube.convert import node_info
from exporter.kube.errors import InvalidResponse
from exporter.kube.informer import Informer, InformerTiming
from exporter.metrics.kube_requests import KubeRequestMetrics
from tests.kube.conftest import FAST, Recorder, eventually, running, sample

ServerFactory = Callable[[web.Application], Awaitable[TestServer]]


def node(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": rv}}


class StubAPI:
    """Lists answer ``self.nodes``; the first watch is refused with HTTP 410, later ones stream
    ``self.watch_lines`` and end."""

    def __init__(self) -> None:
        self.nodes = [node("n1", "5"), node("n2", "5")]
        self.list_rv = "5"
        self.watch_requests: list[dict[str, str]] = []
        self.list_requests: list[dict[str, str]] = []
        self.watch_lines: list[bytes] = []
        self.always_gone = False
        # The first watch waits for this before it is refused, so a test can change the
        # server's state first (set by default: most tests do not care).
        self.first_watch_gate = asyncio.Event()
        self.first_watch_gate.set()

    async def nodes_handler(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        if query.get("watch") != "true":
            self.list_requests.append(query)
            body = {"kind": "NodeList", "metadata": {"resourceVersion": self.list_rv}}
            return web.json_response({**body, "items": self.nodes})
        self.watch_requests.append(query)
        if len(self.watch_requests) == 1:
            await self.first_watch_gate.wait()
        if len(self.watch_requests) == 1 or self.always_gone:
            status = {"kind": "Status", "code": 410, "reason": "Gone", "message": "too old"}
            return web.json_response(status, status=410)
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        for line in self.watch_lines:
            await resp.write(line)
        await resp.write_eof()
        return resp

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/v1/nodes", self.nodes_handler)
        app.router.add_get("/api/v1/nodes/{name}", self.not_json)
        return app

    async def not_json(self, request: web.Request) -> web.Response:
        return web.Response(text="<html>proxy error page</html>", content_type="application/json")


@pytest.fixture
def stub() -> StubAPI:
    return StubAPI()


@pytest.fixture
async def stub_api(
    stub: StubAPI, aiohttp_server: ServerFactory, metrics: KubeRequestMetrics
) -> AsyncIterator[KubeAPI]:
    srv = await aiohttp_server(stub.app())
    async with KubeAPI(token_configuration(str(srv.make_url("")), "t"), observer=metrics) as api:
        yield api


async def test_http_410_on_a_watch_relists_with_a_consistent_read(
    stub: StubAPI, stub_api: KubeAPI, registry: CollectorRegistry
) -> None:
    informer = Informer(stub_api, resources.NODES, node_info, timing=FAST)
    events = Recorder()
    informer.add_handler(events)
    stub.first_watch_gate.clear()
    async with running(informer):
        events.clear()
        await eventually(lambda: len(stub.watch_requests) == 1, "the first watch")
        stub.nodes = [node("n1", "9")]  # changed and shrunk while the watch was refused
        stub.list_rv = "9"
        stub.first_watch_gate.set()
        await eventually(lambda: len(stub.list_requests) == 2, "the relist")
        await eventually(lambda: list(informer.store) == ["n1"], "the new list applied")
        await eventually(lambda: len(stub.watch_requests) >= 2, "the watch after the relist")
    assert events.names() == [("DELETED", "n2"), ("MODIFIED", "n1")]
    assert [q["resourceVersion"] for q in stub.list_requests] == ["0", ""]
    assert stub.watch_requests[0]["resourceVersion"] == "5"
    assert stub.watch_requests[0]["allowWatchBookmarks"] == "true"
    assert 5 <= int(stub.watch_requests[0]["timeoutSeconds"]) <= 10
    assert stub.watch_requests[1]["resourceVersion"] == "9"
    assert sample(registry, "nodesync_informer_relists_total", resource="nodes") == 1
    assert sample(registry, "nodesync_kube_request_errors_total", resource="nodes", verb="watch",
                  code="410") == 1  # fmt: skip


async def test_a_body_that_is_not_json_is_an_invalid_response(
    stub_api: KubeAPI, registry: CollectorRegistry
) -> None:
    with pytest.raises(InvalidResponse):
        await stub_api.get(resources.NODES, "n1")
    assert sample(registry, "nodesync_kube_request_errors_total", resource="nodes", verb="get",
                  code="invalid_response") == 1  # fmt: skip


@pytest.mark.parametrize(
    "broken",
    [
        pytest.param(b"{not json\n", id="not JSON"),
        pytest.param(b'{"type": "ADDED", "object": [1]}\n', id="an object that is not one"),
        pytest.param(b'{"object": {}}\n', id="no type"),
    ],
)
async def test_a_broken_watch_line_is_retried_from_the_last_version(
    stub: StubAPI, stub_api: KubeAPI, registry: CollectorRegistry, broken: bytes
) -> None:
    added = {"type": "ADDED", "object": node("n3", "6")}
    stub.watch_lines = [json.dumps(added).encode() + b"\n", broken]
    informer = Informer(stub_api, resources.NODES, node_info, timing=FAST)
    async with running(informer):
        await eventually(lambda: len(stub.watch_requests) >= 4, "watches after the broken one")
        assert sorted(informer.store) == ["n1", "n2", "n3"]
    resumed_from = [q["resourceVersion"] for q in stub.watch_requests[2:4]]
    assert resumed_from == ["6", "6"], "after the bad line, the watch resumes from n3's version"
    assert sample(registry, "nodesync_kube_request_errors_total", resource="nodes", verb="watch",
                  code="invalid_response") >= 1  # fmt: skip


async def test_a_list_whose_version_is_always_gone_is_backed_off(
    stub: StubAPI, stub_api: KubeAPI
) -> None:
    stub.always_gone = True
    timing = InformerTiming(backoff_initial_seconds=0.1, backoff_max_seconds=0.1)
    informer = Informer(stub_api, resources.NODES, node_info, timing=timing)
    loop = asyncio.get_running_loop()
    async with running(informer):
        started = loop.time()
        await eventually(lambda: len(stub.list_requests) >= 5, "five lists")
        elapsed = loop.time() - started
    # Each relist waits at least the initial backoff instead of spinning list -> 410 -> list.
    assert elapsed >= 3 * 0.1
