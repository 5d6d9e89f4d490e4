"""The webhook as ``nodesync controller`` serves it, on real sockets: Content-Encodings it cannot
decode are a JSON 4xx (a broken gzip was a 500 that Alertmanager retried forever), a body that
does not arrive is a 408, idle connections do not delay a delivery, and an alert whose node,
namespace or pod label is not a valid name is accepted with its delivery and refused on its own,
its name never in a request."""

from __future__ import annotations

import dataclasses
import gzip
import json
import logging
import time
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import ClientSession

from exporter.controller.keys import CLUSTER
from exporter.controller.settings import ControllerSettings
from exporter.logs import JSONFormatter
from exporter.model.names import is_dns1123_subdomain
from exporter.settings.server import ServerSettings
from tests.controller.alert_builders import alert, body
from tests.controller.served_hook import ServedHook, intake, served_hook
from tests.controller.webhook_support import AUTH, hook_settings
from tests.support.wait import until_async
from tests.test_serve import answer, closed_within, connect

SERVER = ServerSettings(idle_timeout=30, read_timeout=0.5, max_connections=1000, shutdown_timeout=2)
DELIVERY = json.dumps(body(alert("aaaa"))).encode()


@pytest.fixture
async def hook(settings: ControllerSettings, tmp_path: Path) -> AsyncIterator[ServedHook]:
    async with served_hook(settings, hook_settings(tmp_path), SERVER) as served:
        yield served


async def _post(
    hook: ServedHook, data: bytes, encoding: str | None
) -> tuple[int, str, dict[str, str]]:
    headers = {**AUTH, "Content-Type": "application/json"}
    if encoding is not None:
        headers["Content-Encoding"] = encoding
    async with (
        ClientSession(auto_decompress=False) as session,
        session.post(f"{hook.url}/alerts", data=data, headers=headers) as r,
    ):
        return r.status, r.content_type, await r.json(content_type=None)


@pytest.mark.parametrize(
    ("encoding", "data", "status", "reason"),
    [
        (None, DELIVERY, 200, None),
        ("identity", DELIVERY, 200, None),
        ("gzip", gzip.compress(DELIVERY), 200, None),
        ("GZIP", gzip.compress(DELIVERY), 200, None),
        ("deflate", zlib.compress(DELIVERY), 200, None),
        ("gzip", DELIVERY, 400, "bad_encoding"),  # says gzip, is not
        # cut short: aiohttp does not check a gzip trailer, the JSON is cut short
        ("gzip", gzip.compress(DELIVERY)[:-12], 400, "malformed_payload"),
        ("gzip", gzip.compress(DELIVERY)[:20] + b"\x00" * 40, 400, "malformed_payload"),
        ("deflate", b"\xff" * 64, 400, "bad_encoding"),
        ("br", b"\x1b\x00" * 16, None, "bad_encoding"),  # 400 or 415, by what aiohttp has
        ("zstd", b"\x28\xb5\x2f\xfd" * 8, None, "bad_encoding"),
        ("compress", DELIVERY, 415, "bad_encoding"),
        ("x-gzip", gzip.compress(DELIVERY), 415, "bad_encoding"),
        ("gzip, gzip", gzip.compress(gzip.compress(DELIVERY)), 415, "bad_encoding"),
        ("", DELIVERY, 415, "bad_encoding"),
    ],
)
async def test_content_encodings(
    hook: ServedHook,
    encoding: str | None,
    data: bytes,
    status: int | None,
    reason: str | None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO):
        code, content_type, answer_ = await _post(hook, data, encoding)
    assert content_type == "application/json"
    assert code == status if status is not None else code in (400, 415)
    if code == 200:
        assert answer_["new"] == 1
    else:
        assert set(answer_) == {"error"}
        assert hook.metric("nodesync_http_client_errors_total", reason=reason or "") >= 1
        assert (await hook.journal.counts()).deliveries == 0
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_a_body_that_does_not_arrive_is_a_408(hook: ServedHook) -> None:
    reader, writer = await connect(hook.served.port)
    head = (
        f"POST /alerts HTTP/1.1\r\nHost: x\r\nAuthorization: {AUTH['Authorization']}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(DELIVERY)}\r\n\r\n"
    )
    writer.write(head.encode() + DELIVERY[:100])
    await writer.drain()
    started = time.monotonic()
    status, headers, answered = answer(await closed_within(reader, 10))
    writer.close()
    assert (status, headers["Connection"]) == (408, "close")
    assert answered == {"error": "the body did not arrive in time (--web.read-timeout)"}
    assert time.monotonic() - started < SERVER.read_timeout + 3
    assert hook.metric("nodesync_http_client_errors_total", reason="body_timeout") == 1
    assert hook.metric("nodesync_webhook_requests_total", code="408") == 1


async def test_300_idle_connections_do_not_delay_a_delivery(hook: ServedHook) -> None:
    idle = [await connect(hook.served.port) for _ in range(300)]
    server = hook.served.runner.server
    assert server is not None

    async def accepted() -> bool:
        return len(server.connections) >= 300

    try:
        await until_async(accepted, timeout=15.0, what="300 idle connections accepted")
        started = time.monotonic()
        code, _, answered = await _post(hook, DELIVERY, None)
        took = time.monotonic() - started
        assert (code, answered["new"]) == (200, 1)
        assert took < 5.0  # not the idle timeout's wait, nor a queue behind 300 connections
        # and they are still open: nothing was closed to make room
        assert len(server.connections) >= 300
    finally:
        for _, writer in idle:
            writer.close()


INVALID = {
    "..": {"node": ".."},
    "status": {"node": "old-0/status"},
    "huge": {"node": "n" * 16_000},
    "namespace": {"node": "worker-1", "namespace": "../kube-system", "pod": "p"},
    "pod": {"node": "worker-1", "namespace": "default", "pod": "p/eviction"},
}


async def test_invalid_names_are_refused_alone_and_never_requested(
    hook: ServedHook, caplog: pytest.LogCaptureFixture
) -> None:
    alerts = []
    for i, lbls in enumerate(INVALID.values()):
        a = alert(f"{i + 1:04x}", node=lbls["node"])
        if "pod" in lbls:
            labels = {**a.labels, "nodesync_action": "evict_pod", **lbls}
            a = dataclasses.replace(a, labels=labels)
        alerts.append(a)
    valid = alert("ffff", node="worker-9")  # a valid name, no such node
    delivery = json.dumps(body(*alerts, valid)).encode()
    code, _, answered = await _post(hook, delivery, None)
    assert (code, answered["new"]) == (200, len(INVALID) + 1)  # the whole group accepted

    async def synced() -> bool:
        return hook.served.runner.app[CLUSTER].synced

    await until_async(synced, timeout=15.0, what="the cluster view")
    deciding = intake(hook)
    with caplog.at_level(logging.INFO):
        assert await deciding.run_once() == len(INVALID) + 1
    reasons = {d.alert_key[0]: d.reason for d in await hook.journal.decisions()}
    assert reasons == {**{f"{i + 1:04x}": "invalid_name" for i in range(len(INVALID))},
                       "ffff": "unknown_node"}  # fmt: skip
    paths = hook.recording.paths
    assert "/api/v1/nodes/worker-9" in paths  # the valid name is looked up for its Event
    for lbls in INVALID.values():
        for value in lbls.values():
            if not is_dns1123_subdomain(value) or value == "../kube-system":
                assert not [p for p in paths if value in p], value
    assert "/api/v1/" not in paths
    assert not [r for r in caplog.records if "could not record an event" in r.getMessage()]
    # the 16,000-character name is cut in every line as written
    assert max(len(JSONFormatter().format(r)) for r in caplog.records) < 4000
