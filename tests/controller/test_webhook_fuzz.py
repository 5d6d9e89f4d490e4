"""Fuzz: 10,000 generated deliveries, on a real socket, to the webhook as ``nodesync controller``
serves it: valid groups, damaged ones, NaN and Infinity, invalid UTF-8, deep nesting, cut and
random bytes, broken and unknown Content-Encodings, invalid node, namespace and pod names.

Every answer is JSON and none is a 5xx; each is the answer the shared decoder predicts (200
exactly when ``decode_payload`` accepts the body as sent); nothing is logged at ERROR; the intake
then decides every recorded alert, refuses each invalid name with ``invalid_name``, and no API
request carries one; the process' memory stays bounded.

A seeded generator written here rather than hypothesis: ten thousand examples through one
server and one journal in well under a minute, every run the same bodies (the seed is in the
failure message), and no shrinking of a stateful server needed.
"""

from __future__ import annotations

import asyncio
import copy
import gc
import gzip
import hashlib
import json
import logging
import random
import shutil
import tempfile
import zlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
from aiohttp import ClientSession, TCPConnector

from exporter.controller.keys import CLUSTER
from exporter.controller.settings import ControllerSettings
from exporter.model.names import is_dns1123_label, is_dns1123_subdomain
from exporter.model.payload import PayloadError, decode_payload
from exporter.settings.server import ServerSettings
from tests.controller.alert_builders import alert, body, rfc3339
from tests.controller.builders import T0
from tests.controller.served_hook import ServedHook, intake, served_hook
from tests.controller.webhook_support import AUTH, hook_settings
from tests.support.wait import until_async

SEED = 16
SENDERS = 4
EXAMPLES = 10_000
LIMIT = 256 * 1024  # --webhook.max-body-bytes for this run: over-size bodies happen too
#: Resident memory may grow this much from the first thousand deliveries to the last.
RSS_GROWTH = 64 * 1024 * 1024

VALID_NODES = ["worker-1", "worker-2", "ip-10-0-0-7.ec2.internal"]
INVALID_NODES = ["..", ".", "old-0/status", "a%2Fstatus", "UPPER-node", "n" * 254,
                 "x" * 16_000, "a b", "ünï", "node\x00", "-lead", "trail-", "dots..dots",
                 "../../api/v1/namespaces/kube-system/secrets", "worker-1?watch=1",
                 "worker-1#frag"]  # fmt: skip
INVALID_NAMESPACES = ["..", "kube-system/pods", "a.b", "N" * 10, "n" * 64, "ns\n"]
INVALID_PODS = ["..", "p/eviction", "P", "p" * 254, "p?dryRun=All"]
INVALID = set(INVALID_NODES) | set(INVALID_NAMESPACES) | set(INVALID_PODS)
assert not any(is_dns1123_subdomain(n) for n in INVALID_NODES + INVALID_PODS)
assert not any(is_dns1123_label(n) for n in INVALID_NAMESPACES)

JSONISH: list[Any] = [None, True, 0, -1, 2**64, 1.5, "", "4", "firing", "resolved", "x" * 70,
                      "\ud800", "2026-11-30T01:02:03Z", [], {}, [1, [2, [3]]],
                      {"a": {"b": []}}]  # fmt: skip
TOP_FIELDS = ["version", "groupKey", "status", "receiver", "truncatedAlerts", "groupLabels",
              "commonLabels", "commonAnnotations", "externalURL", "alerts"]  # fmt: skip
ALERT_FIELDS = ["status", "labels", "annotations", "startsAt", "endsAt", "generatorURL",
                "fingerprint"]  # fmt: skip


GROUP = body(alert())
ALERT = GROUP["alerts"][0]
STARTS = [rfc3339(T0), rfc3339(T0 + 60.25), "2026-11-30T01:02:03.000001Z"]


def _fingerprint(name: str) -> str:
    """One alert key per invalid name, so that each is recorded and decided."""
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass
class Delivery:
    data: bytes
    headers: dict[str, str]
    predictable: bool  # authorised, JSON, identity or a valid gzip/deflate: the decoder decides
    kind: str


@dataclass
class Generator:
    rng: random.Random
    kinds: dict[str, int] = field(default_factory=dict)
    last: str = ""

    def alerts(self) -> list[dict[str, Any]]:
        out = []
        for _ in range(self.rng.randint(0, 4)):
            roll = self.rng.random()
            if roll < 0.6:
                fingerprint, node = f"{self.rng.randint(1, 40):04x}", self.rng.choice(VALID_NODES)
                extra = {}
            elif roll < 0.85:
                node = self.rng.choice(INVALID_NODES)
                fingerprint, extra = _fingerprint(node), {}
            else:
                namespace = self.rng.choice([*INVALID_NAMESPACES, "default"])
                pod = self.rng.choice([*INVALID_PODS, "p-1"]) if namespace == "default" else "p"
                fingerprint, node = _fingerprint(namespace + "/" + pod), "worker-1"
                extra = {"nodesync_action": "evict_pod", "namespace": namespace, "pod": pod}
            one = dict(ALERT)
            one["fingerprint"] = fingerprint
            one["labels"] = {**ALERT["labels"], "node": node, **extra}
            one["startsAt"] = self.rng.choice(STARTS)
            # a resolved copy resolves its alert: rare, or few would be left to decide
            if self.rng.random() < 0.05:
                one["status"] = "resolved"
            out.append(one)
        return out

    def valid(self) -> dict[str, Any]:
        group = dict(GROUP)
        group["alerts"] = self.alerts()
        group["truncatedAlerts"] = self.rng.choice([0, 0, 3])
        return group

    def damaged(self) -> dict[str, Any]:
        group = self.valid()
        for _ in range(self.rng.randint(1, 3)):
            alerts = group.get("alerts")
            objects = [a for a in alerts if isinstance(a, dict)] if isinstance(alerts, list) else []
            if objects and self.rng.random() < 0.6:
                target = self.rng.choice(objects)
                key = self.rng.choice(ALERT_FIELDS)
            else:
                target, key = group, self.rng.choice(TOP_FIELDS)
            if self.rng.random() < 0.2:
                target.pop(key, None)
            else:
                target[key] = copy.deepcopy(self.rng.choice(JSONISH))
        return group

    def text(self) -> bytes:
        """A body as bytes, damaged below the JSON level or not at all."""
        kind = self.rng.choices(
            ["valid", "damaged", "nan", "utf8", "deep", "cut", "random", "big", "escape"],
            weights=[12, 30, 8, 10, 10, 10, 8, 2, 10],
        )[0]
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        self.last = kind
        group = self.damaged() if kind == "damaged" else self.valid()
        raw = json.dumps(group).encode()
        if kind == "nan":
            token = self.rng.choice([b"NaN", b"Infinity", b"-Infinity"])
            raw = raw.replace(
                b'"truncatedAlerts": ', b'"truncatedAlerts": ' + token + b', "x": ', 1
            )
        elif kind == "utf8":
            bad = self.rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
                                   b"\x80", b"\xe2\x82"])  # fmt: skip
            at = self.rng.randrange(len(raw))
            raw = raw[:at] + bad + raw[at:]
        elif kind == "deep":
            depth = self.rng.choice([50, 500, 5_000, 100_000])
            nest = b"[" * depth + b"]" * depth
            raw = self.rng.choice(
                [nest, raw.replace(b'"receiver": ', b'"receiver": ' + nest + b', "r": ', 1)]
            )
        elif kind == "cut":
            raw = raw[: self.rng.randrange(len(raw))]
        elif kind == "random":
            raw = self.rng.randbytes(self.rng.randint(0, 200))
        elif kind == "big":
            raw = raw.replace(b'"receiver": ', b'"receiver": "' + b"r" * LIMIT + b'", "r": ', 1)
        elif kind == "escape":
            raw = raw.replace(b'"receiver": ', b'"receiver": "\\ud800\\u0000\\"", "r": ', 1)
        return raw

    def delivery(self) -> Delivery:
        raw = self.text()
        headers = {**AUTH, "Content-Type": "application/json"}
        predictable = True
        transport = self.rng.choices(
            ["plain", "gzip", "deflate", "fake-gzip", "cut-gzip", "unknown", "type", "auth"],
            weights=[70, 8, 4, 4, 3, 4, 4, 3],
        )[0]
        self.kinds[f"transport:{transport}"] = self.kinds.get(f"transport:{transport}", 0) + 1
        if transport == "gzip":
            headers["Content-Encoding"] = "gzip"
            data = gzip.compress(raw)
        elif transport == "deflate":
            headers["Content-Encoding"] = "deflate"
            data = zlib.compress(raw)
        elif transport == "fake-gzip":
            headers["Content-Encoding"] = self.rng.choice(["gzip", "deflate", "br", "zstd"])
            data, predictable = raw, False
        elif transport == "cut-gzip":
            headers["Content-Encoding"] = "gzip"
            packed = gzip.compress(raw)
            data, predictable = packed[: self.rng.randrange(len(packed))], False
        elif transport == "unknown":
            headers["Content-Encoding"] = self.rng.choice(["compress", "x-gzip", "gzip, gzip",
                                                           "identity;q=0", "\u00e9"])  # fmt: skip
            data, predictable = raw, False
        elif transport == "type":
            headers["Content-Type"] = self.rng.choice(["text/plain", "application/xml", ""])
            data, predictable = raw, False
        elif transport == "auth":
            headers["Authorization"] = self.rng.choice(["", "Bearer nope", "Basic eA=="])
            data, predictable = raw, False
        else:
            data = raw
        return Delivery(data, headers, predictable, f"{transport}/{self.last}")


def predicted(raw: bytes) -> tuple[int, str]:
    """What the webhook answers a predictable delivery of ``raw`` (after decoding)."""
    if len(raw) > LIMIT:
        return 413, f"the body is larger than {LIMIT} bytes"
    try:
        decode_payload(raw)
    except PayloadError as exc:
        return 400, exc.message
    return 200, ""


def deliveries(seed: int) -> Iterator[tuple[Delivery, bytes]]:
    """The deliveries, each with the body the webhook reads after its Content-Encoding."""
    gen = Generator(random.Random(seed))
    for _ in range(EXAMPLES):
        d = gen.delivery()
        decoded = d.data
        if d.predictable and d.headers.get("Content-Encoding") == "gzip":
            decoded = gzip.decompress(d.data)
        elif d.predictable and d.headers.get("Content-Encoding") == "deflate":
            decoded = zlib.decompress(d.data)
        yield d, decoded


@pytest.fixture
def shm_dir() -> Iterator[Path]:
    """The journal on tmpfs: this test is about what the webhook accepts, not about disks, and
    thousands of fsyncs would be most of its time."""
    base = "/dev/shm" if Path("/dev/shm").is_dir() else None
    path = Path(tempfile.mkdtemp(prefix="nodesync-fuzz-", dir=base))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def hook(settings: ControllerSettings, shm_dir: Path) -> AsyncIterator[ServedHook]:
    server = ServerSettings(idle_timeout=30, read_timeout=1, max_connections=100)
    webhook = hook_settings(shm_dir, max_body_bytes=LIMIT)
    async with served_hook(settings, webhook, server) as served:
        yield served


def check(n: int, d: Delivery, decoded: bytes, status: int, content_type: str, answer: Any) -> None:
    """The answer to delivery ``n`` is the one its body and headers call for."""
    where = f"seed {SEED} delivery {n} ({d.kind}): {status} {answer}"
    assert content_type == "application/json", where
    assert status < 500, where
    if d.predictable:
        expected, message = predicted(decoded)
        assert status == expected, where
        if expected != 200:
            assert answer == {"error": message}, where
    elif d.kind.startswith("cut-gzip/") and status == 200:
        # cut in the trailer only: aiohttp does not check it, and the JSON is whole
        whole = zlib.decompressobj(wbits=31).decompress(d.data)
        assert predicted(whole)[0] == 200, where
    elif d.kind.startswith("fake-gzip/"):
        # a body not in its encoding may never end as aiohttp decodes it (a large one
        # declared deflate): the read timeout ends it
        assert status in (400, 408, 413, 415), where
    else:
        assert status in (400, 401, 413, 415), where


@pytest.mark.timeout(300)
async def test_ten_thousand_generated_deliveries(
    hook: ServedHook, caplog: pytest.LogCaptureFixture
) -> None:
    process = psutil.Process()
    codes: dict[int, int] = {}
    rss: dict[str, int] = {}
    generated = enumerate(deliveries(SEED))

    async def send(session: ClientSession) -> None:
        """Post deliveries, one at a time, until there are none left (a few of these run at
        once, as Alertmanager's HA pair and retries do)."""
        for n, (d, decoded) in generated:
            async with session.post(
                f"{hook.url}/alerts", data=d.data, headers=d.headers, auto_decompress=False
            ) as r:
                answer = await r.json(content_type=None)
            check(n, d, decoded, r.status, r.content_type, answer)
            codes[r.status] = codes.get(r.status, 0) + 1
            if n == 999:
                gc.collect()
                rss["warm"] = process.memory_info().rss

    with caplog.at_level(logging.WARNING):
        async with ClientSession(connector=TCPConnector(limit=SENDERS)) as session:
            await asyncio.gather(*(send(session) for _ in range(SENDERS)))
    gc.collect()
    growth = process.memory_info().rss - rss["warm"]
    assert growth < RSS_GROWTH, f"resident memory grew by {growth / 2**20:.1f} MiB"
    assert sum(codes.values()) == EXAMPLES
    assert {200, 400, 401, 413, 415} <= set(codes), codes
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    # client mistakes are logged once a minute per reason, not once per request
    assert len(caplog.records) < 20, [r.getMessage() for r in caplog.records][:20]

    # what was recorded is decided as the leader would, against a cluster without nodes
    async def synced() -> bool:
        return bool(hook.served.runner.app[CLUSTER].synced)

    await until_async(synced, timeout=15.0, what="the cluster view")
    decided = await intake(hook).run_once()
    decisions = await hook.journal.decisions()
    assert decided == len(decisions) > 0
    by_reason: dict[str, int] = {}
    for d in decisions:
        by_reason[d.reason] = by_reason.get(d.reason, 0) + 1
    assert by_reason.get("invalid_name", 0) >= 10, by_reason
    assert set(by_reason) <= {"invalid_name", "unknown_node", "resolved"}, by_reason
    for path in hook.recording.paths:
        segments = path.split("?")[0].split("/")
        assert not INVALID & set(segments), path
        assert not [n for n in INVALID if len(n) > 3 and n in path], path
        assert path.rstrip("/") not in ("/api/v1", "/api"), path
