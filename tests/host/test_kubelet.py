"""kubelet healthz against real HTTP servers on loopback, and pod directories from a real tree."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import RawTestServer, TestServer

from exporter.host.kubelet import KubeletProbe, is_pod_uid, probe_healthz, read_pod_dirs

ServerFactory = Callable[[web.Application], Awaitable[TestServer]]
RawServerFactory = Callable[
    [Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]], Awaitable[RawTestServer]
]

UID_A = "0b3e5c1e-7a52-4f0e-9c1b-3f8f2b6d9a10"
UID_B = "d2f7a9c4-1e6b-4c3d-8a5f-6b9e0c2d4f71"
STATIC_UID = "6f1d2c3b4a5e6f708192a3b4c5d6e7f8"  # static pods: hex MD5 of their source


def app_answering(status: int, body: str) -> web.Application:
    async def healthz(request: web.Request) -> web.Response:
        return web.Response(status=status, text=body)

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    return app


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest.fixture
def closed_port_url(unused_tcp_port: int) -> str:
    return f"http://127.0.0.1:{unused_tcp_port}/healthz"


async def test_healthz_ok(aiohttp_server: ServerFactory, session: aiohttp.ClientSession) -> None:
    server = await aiohttp_server(app_answering(200, "ok"))

    assert await probe_healthz(session, str(server.make_url("/healthz")), 1.0) is True


@pytest.mark.parametrize(
    ("status", "body"),
    [(500, "ok"), (503, "[-]ping failed"), (200, "not ok"), (200, ""), (404, "404 page not found")],
)
async def test_healthz_not_ok(
    aiohttp_server: ServerFactory, session: aiohttp.ClientSession, status: int, body: str
) -> None:
    server = await aiohttp_server(app_answering(status, body))

    assert await probe_healthz(session, str(server.make_url("/healthz")), 1.0) is False


@pytest.mark.parametrize("chunks", [[b"o", b"k"], [b"ok", b"\n"], [b""] * 3 + [b"ok"]])
async def test_healthz_body_split_across_chunks(
    aiohttp_raw_server: RawServerFactory, session: aiohttp.ClientSession, chunks: list[bytes]
) -> None:
    async def chunked(request: web.BaseRequest) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for chunk in chunks:
            await response.write(chunk)
        await response.write_eof()
        return response

    server = await aiohttp_raw_server(chunked)

    assert await probe_healthz(session, str(server.make_url("/healthz")), 1.0) is True


async def test_healthz_long_body_is_not_ok(
    aiohttp_server: ServerFactory, session: aiohttp.ClientSession
) -> None:
    server = await aiohttp_server(app_answering(200, "ok" + " " * 4096 + "but not really"))

    assert await probe_healthz(session, str(server.make_url("/healthz")), 1.0) is False


async def test_healthz_redirect_is_not_followed(
    aiohttp_server: ServerFactory, session: aiohttp.ClientSession
) -> None:
    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPFound("/ok")

    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/healthz", redirect)
    app.router.add_get("/ok", ok)
    server = await aiohttp_server(app)

    assert await probe_healthz(session, str(server.make_url("/healthz")), 1.0) is False


async def test_healthz_slow_answer_times_out(
    aiohttp_server: ServerFactory, session: aiohttp.ClientSession
) -> None:
    never = asyncio.Event()
    entered = asyncio.Event()

    async def hang(request: web.Request) -> web.Response:
        entered.set()
        await never.wait()
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/healthz", hang)
    server = await aiohttp_server(app)
    loop = asyncio.get_running_loop()
    started = loop.time()

    healthy = await probe_healthz(session, str(server.make_url("/healthz")), 0.2)

    assert healthy is False
    assert entered.is_set()  # the request reached the handler: this was a timeout, not a refusal
    assert loop.time() - started < 1.0


async def test_healthz_closed_port_is_down(
    session: aiohttp.ClientSession, closed_port_url: str
) -> None:
    assert await probe_healthz(session, closed_port_url, 1.0) is False


def make_pods_dir(root: Path) -> Path:
    pods = root / "pods"
    for name in (UID_A, UID_B, STATIC_UID, "not-a-uid", "lost+found"):
        (pods / name / "volumes").mkdir(parents=True)
    (pods / "c0ffee00-0000-4000-8000-000000000000").write_text("a file named like a uid")
    (pods / "0b3e5c1e-7a52-4f0e-9c1b-3f8f2b6d9a1").mkdir()  # one digit short
    return root


def test_read_pod_dirs_lists_uid_directories(tmp_path: Path) -> None:
    root = make_pods_dir(tmp_path)

    assert read_pod_dirs(str(root)) == (frozenset({UID_A, UID_B, STATIC_UID}), True)


def test_read_pod_dirs_ignores_symlinks(tmp_path: Path) -> None:
    root = make_pods_dir(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = root / "pods" / "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"
    link.symlink_to(elsewhere, target_is_directory=True)

    uids, readable = read_pod_dirs(str(root))

    assert readable is True
    assert link.name not in uids


def test_read_pod_dirs_empty_dir_is_readable(tmp_path: Path) -> None:
    (tmp_path / "pods").mkdir()

    assert read_pod_dirs(str(tmp_path)) == (frozenset(), True)


def test_read_pod_dirs_missing_dir_is_unreadable(tmp_path: Path) -> None:
    assert read_pod_dirs(str(tmp_path / "no-kubelet")) == (frozenset(), False)
    assert read_pod_dirs(str(tmp_path)) == (frozenset(), False)


def test_read_pod_dirs_pods_not_a_directory(tmp_path: Path) -> None:
    (tmp_path / "pods").write_text("")

    assert read_pod_dirs(str(tmp_path)) == (frozenset(), False)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (UID_A, True),
        (UID_A.upper(), True),
        (STATIC_UID, True),
        ("not-a-uid", False),
        (UID_A + "0", False),
        (STATIC_UID[:-1], False),
        ("", False),
    ],
)
def test_is_pod_uid(name: str, expected: bool) -> None:
    assert is_pod_uid(name) is expected


async def test_probe_reads_health_and_pod_dirs(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    server = await aiohttp_server(app_answering(200, "ok"))
    root = make_pods_dir(tmp_path)

    async with KubeletProbe(str(server.make_url("/healthz")), str(root), 1.0) as probe:
        first = await probe.read()
        (root / "pods" / UID_A / "volumes").rmdir()
        (root / "pods" / UID_A).rmdir()
        second = await probe.read()

    assert first.healthy is True
    assert first.pod_uids == frozenset({UID_A, UID_B, STATIC_UID})
    assert first.pod_dir_readable is True
    assert first.error == ""
    assert second.pod_uids == frozenset({UID_B, STATIC_UID})
    assert second.taken_at >= first.taken_at


async def test_probe_reports_missing_kubelet_as_down(closed_port_url: str, tmp_path: Path) -> None:
    probe = KubeletProbe(closed_port_url, str(tmp_path / "no-kubelet"), 1.0)
    try:
        snap = await probe.read()
    finally:
        await probe.close()

    assert snap.healthy is False
    assert snap.pod_uids == frozenset()
    assert snap.pod_dir_readable is False
    assert "healthz" in snap.error
    assert "pod dirs" in snap.error


async def test_probe_reports_unhealthy_status(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    server = await aiohttp_server(app_answering(500, "internal error"))
    (tmp_path / "pods").mkdir()

    async with KubeletProbe(str(server.make_url("/healthz")), str(tmp_path), 1.0) as probe:
        snap = await probe.read()

    assert snap.healthy is False
    assert snap.pod_dir_readable is True
    assert snap.error == "healthz: HTTP 500"


async def test_probe_close_is_idempotent_and_probe_reusable(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    server = await aiohttp_server(app_answering(200, "ok"))
    probe = KubeletProbe(str(server.make_url("/healthz")), str(tmp_path), 1.0)
    await probe.close()  # nothing opened yet
    try:
        assert (await probe.read()).healthy is True
        await probe.close()
        await probe.close()
        assert (await probe.read()).healthy is True  # a new session is opened on demand
    finally:
        await probe.close()
