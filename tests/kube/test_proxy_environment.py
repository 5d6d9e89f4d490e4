"""The API client reaches the server as the environment says, as kubectl does: through the proxy
of ``HTTP_PROXY`` / ``HTTPS_PROXY`` unless ``NO_PROXY`` names the server's host, and with the
credentials ``~/.netrc`` (``NETRC``) holds for it when the configuration has none. The
environment is read once, when the client makes its first request, not before every request.
Two small aiohttp apps stand in for the server and the proxy."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from exporter.kube import resources
from exporter.kube.api import KubeAPI
from exporter.kube.config import Configuration, token_configuration

ServerFactory = Callable[[web.Application], Awaitable[TestServer]]

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")


class Seen:
    """One app that answers every GET with a Node and records what each request carried."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.targets: list[str] = []  # the request line's target, as sent
        self.authorizations: list[str | None] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.targets.append(request.raw_path)
        self.authorizations.append(request.headers.get("Authorization"))
        return web.json_response({"metadata": {"name": self.name, "resourceVersion": "1"}})

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self.handle)
        return app


@pytest.fixture(autouse=True)
def no_proxy_yet(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    empty = tmp_path / "empty-netrc"
    empty.write_text("")
    monkeypatch.setenv("NETRC", str(empty))


async def test_requests_go_through_the_proxy_of_the_environment_read_once(
    aiohttp_server: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, proxy = Seen("server"), Seen("proxy")
    server_url = str((await aiohttp_server(server.app())).make_url(""))
    proxy_url = str((await aiohttp_server(proxy.app())).make_url(""))
    monkeypatch.setenv("HTTP_PROXY", proxy_url)
    async with KubeAPI(token_configuration(server_url, "t")) as api:
        first = await api.get(resources.NODES, "a")
        monkeypatch.delenv("HTTP_PROXY")  # read at the first request, not again
        second = await api.get(resources.NODES, "b")
    assert [first["metadata"]["name"], second["metadata"]["name"]] == ["proxy", "proxy"]
    assert proxy.targets == [f"{server_url.rstrip('/')}/api/v1/nodes/{n}" for n in "ab"]
    assert proxy.authorizations == ["Bearer t", "Bearer t"]
    assert server.targets == []


async def test_no_proxy_naming_the_host_bypasses_the_proxy(
    aiohttp_server: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, proxy = Seen("server"), Seen("proxy")
    server_url = str((await aiohttp_server(server.app())).make_url(""))
    monkeypatch.setenv("HTTP_PROXY", str((await aiohttp_server(proxy.app())).make_url("")))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    async with KubeAPI(token_configuration(server_url, "t")) as api:
        found = await api.get(resources.NODES, "a")
    assert found["metadata"]["name"] == "server"
    assert server.targets == ["/api/v1/nodes/a"]
    assert proxy.targets == []


async def test_the_kubeconfig_proxy_wins_over_the_environment(
    aiohttp_server: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, proxy, configured = Seen("server"), Seen("proxy"), Seen("configured")
    server_url = str((await aiohttp_server(server.app())).make_url(""))
    monkeypatch.setenv("HTTP_PROXY", str((await aiohttp_server(proxy.app())).make_url("")))
    cfg = token_configuration(server_url, "t")
    cfg.proxy = str((await aiohttp_server(configured.app())).make_url(""))
    async with KubeAPI(cfg) as api:
        found = await api.get(resources.NODES, "a")
    assert found["metadata"]["name"] == "configured"
    assert proxy.targets == []
    assert server.targets == []


async def test_netrc_credentials_for_the_server_are_sent_without_configured_ones(
    aiohttp_server: ServerFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    server = Seen("server")
    server_url = str((await aiohttp_server(server.app())).make_url(""))
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login alice password secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    async with KubeAPI(Configuration(server_url.rstrip("/"))) as api:
        await api.get(resources.NODES, "a")
    assert server.authorizations == ["Basic YWxpY2U6c2VjcmV0"]
