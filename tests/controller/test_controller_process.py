"""``nodesync controller`` as a process, against the test API server: SIGTERM lets a request in
progress finish, and the process exits within 10 s whatever its clients do (a half-sent
authenticated request held it for 61 s); with few file descriptors, many connections neither
take them all nor flood the log (at the limit, every request had timed out and asyncio had
written 397,627 error lines in 55 s)."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import socket
import sqlite3
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import ClientError, ClientSession

from nodesync_sim.fake.apiserver import APIServer
from tests.controller.alert_builders import alert, body
from tests.controller.webhook_support import AUTH, TOKEN
from tests.metrics.exposition import labels, series
from tests.support.wait import until_async
from tests.test_serve import answer, closed_within

#: What docs/install.md promises: exit within this after SIGTERM, so that Kubernetes' default
#: 30 s grace period (and the 10 s the agent's DaemonSet sets) is never reached.
EXIT_WITHIN = 10.0
DELIVERY = json.dumps(body(alert("aaaa"))).encode()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Controller:
    process: asyncio.subprocess.Process
    port: int
    journal: Path
    log_file: Path

    def log(self) -> str:
        return self.log_file.read_text()

    async def exit_code_within(self, seconds: float) -> int:
        return await asyncio.wait_for(self.process.wait(), seconds)


@pytest.fixture
def open_files() -> int | None:
    """The open-file limit (soft and hard) of the controller's process; None: as inherited."""
    return None


@pytest.fixture
async def controller(
    server: APIServer, tmp_path: Path, open_files: int | None
) -> AsyncIterator[Controller]:
    port = _free_port()
    log_file = tmp_path / "controller.log"

    def limit() -> None:
        if open_files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))

    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    journal = tmp_path / "journal.db"
    log = log_file.open("wb")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "exporter",
        "controller",
        "--web.listen-address",
        f"127.0.0.1:{port}",
        "--kubeconfig",
        str(kubeconfig),
        "--journal.path",
        str(journal),
        "--web.shutdown-timeout",
        "3s",
        "--log.format",
        "json",
        env={**os.environ, "NODESYNC_WEBHOOK_TOKEN": TOKEN},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=log,
        preexec_fn=limit,
    )
    log.close()
    running = Controller(process, port, journal, log_file)

    async def ready() -> bool:
        if process.returncode is not None:
            pytest.fail(f"the controller exited: {running.log()[-2000:]}")
        try:
            async with (
                ClientSession() as session,
                session.get(f"http://127.0.0.1:{port}/readyz") as r,
            ):
                return r.status == 200
        except ClientError:
            return False

    try:
        await until_async(ready, timeout=60, what="the controller ready")
        yield running
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def _half_sent(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """An authenticated delivery whose head and first half of the body were sent."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        f"POST /alerts HTTP/1.1\r\nHost: x\r\nAuthorization: {AUTH['Authorization']}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(DELIVERY)}\r\n\r\n"
    )
    writer.write(head.encode() + DELIVERY[: len(DELIVERY) // 2])
    await writer.drain()
    return reader, writer


async def _in_progress(port: int) -> None:
    """Until the half-sent delivery is being handled: besides the scrape asking, one request."""

    async def handled() -> bool:
        async with ClientSession() as session, session.get(f"http://127.0.0.1:{port}/metrics") as r:
            text = await r.text()
        return series(text, "nodesync_http_requests_in_flight").get(labels()) == 2.0

    await until_async(handled, timeout=30, what="the half-sent delivery in progress")


async def _listening(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    return True


@pytest.mark.timeout(120)
async def test_sigterm_exits_within_10_s_with_a_half_sent_request_open(
    controller: Controller,
) -> None:
    reader, writer = await _half_sent(controller.port)
    try:
        await _in_progress(controller.port)
        sent = time.monotonic()
        controller.process.send_signal(signal.SIGTERM)
        assert await controller.exit_code_within(EXIT_WITHIN + 5) == 0
        took = time.monotonic() - sent
        assert took < EXIT_WITHIN, f"exited {took:.1f} s after SIGTERM"
        assert await closed_within(reader, 5) == b""  # no answer: Alertmanager retries
    finally:
        writer.close()
    log = controller.log()
    assert '"msg":"shutting down"' in log
    assert '"level":"error"' not in log


@pytest.mark.timeout(120)
async def test_sigterm_lets_a_request_in_progress_finish(controller: Controller) -> None:
    reader, writer = await _half_sent(controller.port)
    try:
        await _in_progress(controller.port)
        controller.process.send_signal(signal.SIGTERM)

        async def stopped_listening() -> bool:
            return not await _listening(controller.port)

        await until_async(stopped_listening, timeout=EXIT_WITHIN, what="the listener closed")
        writer.write(DELIVERY[len(DELIVERY) // 2 :])  # the rest, during the shutdown
        await writer.drain()
        status, _, answered = answer(await closed_within(reader, EXIT_WITHIN))
        assert (status, answered["new"]) == (200, 1)  # type: ignore[index]
        assert await controller.exit_code_within(EXIT_WITHIN) == 0
    finally:
        writer.close()
    with sqlite3.connect(controller.journal) as conn:
        assert conn.execute("SELECT fingerprint FROM alerts").fetchall() == [("aaaa",)]
    conn.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("open_files", [160])
async def test_few_descriptors_many_connections_and_a_bounded_log(
    controller: Controller, open_files: int
) -> None:
    cap = open_files - 64  # what serve keeps for the process: the journal, the API, the log
    assert '"msg":"fewer connections than --web.max-connections' in controller.log()
    before = len(controller.log().splitlines())
    held: list[asyncio.StreamWriter] = []
    refused = 0
    try:
        for _ in range(3 * open_files):  # far more than the process could hold
            reader, writer = await asyncio.open_connection("127.0.0.1", controller.port)
            held.append(writer)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n"), 10)
            if head.startswith(b"HTTP/1.1 503"):
                refused += 1
        assert refused >= 3 * open_files - cap
    finally:
        for writer in held:
            writer.close()

    async def room_again() -> bool:
        try:
            async with (
                ClientSession() as session,
                session.post(
                    f"http://127.0.0.1:{controller.port}/alerts",
                    data=DELIVERY,
                    headers={**AUTH, "Content-Type": "application/json"},
                ) as r,
            ):
                return r.status == 200
        except ClientError:
            return False

    await until_async(
        room_again, timeout=30, what="a delivery accepted once the connections closed"
    )
    lines = controller.log().splitlines()[before:]
    assert len(lines) < 20, lines[:20]  # one line a minute per kind, not one per connection
    assert not [line for line in lines if '"level":"error"' in line], lines
