"""The hardened HTTP server both roles use (exporter.serve), on real sockets on 127.0.0.1: the
framework's own errors in JSON, counted and logged once a minute; idle and slow connections
closed within the idle timeout; a cap on open connections; a bounded log when descriptors run
out; a shutdown that waits for requests in progress at most the shutdown timeout."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import resource
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from aiohttp import ClientSession, web
from prometheus_client import CollectorRegistry

from exporter import serve
from exporter.metrics.http import CLIENT_ERROR_REASONS
from exporter.serve import Served, connection_cap, harden
from exporter.serve.lifecycle import bounded_exception_handler
from exporter.settings.server import ServerSettings
from tests.metrics.exposition import labels, series
from tests.support.wait import until_async

FAST = ServerSettings(idle_timeout=0.5, read_timeout=0.5, max_connections=50, shutdown_timeout=1)


@dataclass
class Running:
    served: Served
    registry: CollectorRegistry
    finish: asyncio.Event  # /slow answers once this is set

    @property
    def port(self) -> int:
        return self.served.port

    def refused(self, reason: str) -> float:
        text = _exposition(self.registry)
        return series(text, "nodesync_http_client_errors_total").get(labels(reason=reason), 0.0)


def _exposition(registry: CollectorRegistry) -> str:
    from prometheus_client import generate_latest

    return generate_latest(registry).decode()


def tiny_app(
    registry: CollectorRegistry, finish: asyncio.Event, settings: ServerSettings
) -> web.Application:
    app = web.Application()
    harden(app, registry, settings)

    async def ok(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def slow(request: web.Request) -> web.Response:
        await request.read()
        await finish.wait()
        return web.json_response({"status": "finished"})

    app.router.add_get("/healthz", ok)
    app.router.add_post("/slow", slow)
    return app


async def start(settings: ServerSettings = FAST) -> Running:
    registry = CollectorRegistry()
    finish = asyncio.Event()
    served = Served(tiny_app(registry, finish, settings), "127.0.0.1", 0)
    await served.start()
    return Running(served, registry, finish)


@pytest.fixture
async def running() -> AsyncIterator[Running]:
    r = await start()
    yield r
    await r.served.stop()


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bytes:
    """What the server sent until it closed the connection; fails after ``seconds``."""
    data = b""
    async with asyncio.timeout(seconds):
        try:
            while chunk := await reader.read(65536):
                data += chunk
        except ConnectionResetError:  # closed with what the client sent still unread
            pass
    return data


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


def answer(data: bytes) -> tuple[int, dict[str, str], object]:
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, json.loads(body) if body else None


async def test_the_framework_s_own_errors_are_json(running: Running) -> None:
    async with ClientSession(f"http://127.0.0.1:{running.port}") as session:
        async with session.get("/nowhere") as r:
            assert (r.status, r.content_type) == (404, "application/json")
            assert await r.json() == {"error": "Not Found"}
        async with session.post("/healthz") as r:
            assert (r.status, r.content_type) == (405, "application/json")
            assert r.headers["Allow"] == "GET,HEAD"
            assert await r.json() == {"error": "Method Not Allowed"}
        async with session.get("/healthz") as r:
            assert r.status == 200
    assert running.refused("not_found") == 1
    assert running.refused("method_not_allowed") == 1
    text = _exposition(running.registry)
    assert set(series(text, "nodesync_http_client_errors_total")) == {
        labels(reason=r) for r in CLIENT_ERROR_REASONS
    }


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * 9000 + b"\r\n\r\n",
        b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /slow HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabc",
        b"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n",
    ],
    ids=["header", "long-header", "long-line", "bad-chunk", "two-lengths", "version"],
)
async def test_a_request_the_server_cannot_parse_is_a_json_400_and_no_error_line(
    running: Running, request_bytes: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        for _ in range(20):
            reader, writer = await connect(running.port)
            writer.write(request_bytes)
            await writer.drain()
            status, headers, body = answer(await closed_within(reader, 5))
            writer.close()
            assert (status, headers["Content-Type"]) == (400, "application/json; charset=utf-8")
            assert isinstance(body, dict)
            assert body["error"].startswith("bad request")
    assert running.refused("bad_http") == 20
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # once a minute, whatever the rate


async def test_an_idle_connection_is_closed_after_the_idle_timeout(running: Running) -> None:
    reader, writer = await connect(running.port)
    started = time.monotonic()
    assert await closed_within(reader, 5) == b""
    elapsed = time.monotonic() - started
    writer.close()
    assert 0.4 <= elapsed < 3.0  # 0.5 s, with the event loop's rounding and a busy machine


async def test_a_slow_request_head_is_closed_after_the_idle_timeout(running: Running) -> None:
    reader, writer = await connect(running.port)
    started = time.monotonic()
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100
    closed = asyncio.ensure_future(closed_within(reader, 5))
    for byte in head:  # a byte every 20 ms: never a whole head within the timeout
        if closed.done():
            break
        writer.write(bytes([byte]))
        await asyncio.sleep(0.02)
    assert await closed == b""
    writer.close()
    assert time.monotonic() - started < 3.0


async def test_a_keep_alive_connection_is_closed_once_idle(running: Running) -> None:
    reader, writer = await connect(running.port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 200")
    answered = time.monotonic()
    rest = await closed_within(reader, 5)
    writer.close()
    assert rest.startswith(b"{")
    assert 0.4 <= time.monotonic() - answered < 3.0


async def test_connections_over_the_cap_are_answered_503_and_closed() -> None:
    r = await start(ServerSettings(idle_timeout=30, read_timeout=1, max_connections=5))
    held = []
    try:
        for _ in range(5):
            held.append(await connect(r.port))
        # each held connection is one of the server's once it is accepted: wait for that
        server = r.served.runner.server
        assert server is not None
        await until_async(
            lambda: len(server.connections) == 5, timeout=5.0, what="5 connections accepted"
        )
        reader, writer = await connect(r.port)
        status, _, body = answer(await closed_within(reader, 5))
        writer.close()
        assert (status, body) == (503, {"error": "too many connections; retry"})
        assert r.refused("too_many_connections") == 1
        _, first = held.pop()
        first.close()
        await until_async(
            lambda: len(server.connections) < 5, timeout=5.0, what="a connection closed"
        )
        url = f"http://127.0.0.1:{r.port}/healthz"
        async with ClientSession() as session, session.get(url) as response:
            assert response.status == 200
    finally:
        for _, w in held:
            w.close()
        await r.served.stop()


async def test_running_out_of_descriptors_is_logged_once_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    bounded_exception_handler(loop)
    try:
        with caplog.at_level(logging.ERROR, logger="asyncio"):
            for _ in range(10_000):  # what the accept loop says, at any rate
                loop.call_exception_handler(
                    {
                        "message": "socket.accept() out of system resource",
                        "exception": OSError(errno.EMFILE, "Too many open files"),
                    }
                )
    finally:
        loop.set_exception_handler(previous)
    assert len(caplog.records) == 1
    assert "Too many open files" in caplog.records[0].__dict__["error"]


def test_the_connection_cap_fits_the_open_file_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    limits = {"soft": 256, "hard": 512}

    def getrlimit(which: int) -> tuple[int, int]:
        return limits["soft"], limits["hard"]

    def setrlimit(which: int, value: tuple[int, int]) -> None:
        limits["soft"] = value[0]

    monkeypatch.setattr(resource, "getrlimit", getrlimit)
    monkeypatch.setattr(resource, "setrlimit", setrlimit)
    assert connection_cap(100) == 100
    assert limits["soft"] == 512  # raised to the hard limit
    assert connection_cap(1000) == 512 - serve.FD_RESERVE


async def test_shutdown_waits_for_a_request_in_progress(running: Running) -> None:
    reader, writer = await connect(running.port)
    writer.write(b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    await writer.drain()
    server = running.served.runner.server
    assert server is not None
    await until_async(lambda: server.requests_count == 1, timeout=5.0, what="the request handled")
    stopping = asyncio.ensure_future(running.served.stop())
    await asyncio.sleep(0)
    running.finish.set()  # it finishes within the shutdown timeout: answered
    status, _, body = answer(await closed_within(reader, 5))
    writer.close()
    await asyncio.wait_for(stopping, 5)
    assert (status, body) == (200, {"status": "finished"})


async def test_shutdown_ends_a_half_sent_request_after_the_shutdown_timeout() -> None:
    r = await start()
    reader, writer = await connect(r.port)
    writer.write(b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nhalf")
    await writer.drain()
    server = r.served.runner.server
    assert server is not None
    await until_async(lambda: server.requests_count == 1, timeout=5.0, what="the request handled")
    started = time.monotonic()
    await asyncio.wait_for(r.served.stop(), 10)
    assert time.monotonic() - started < FAST.shutdown_timeout * 2 + 1
    assert await closed_within(reader, 5) == b""
    writer.close()
