"""Benchmark: a scale-out storm against the controller and its rollback hook.

1000 nodes join within 60 s and 5% of them fail, with the controller (its cluster watch, the
webhook, the journal and the rollback executor) under measurement. Every part is its own process
talking HTTP on loopback, as in a cluster:

- ``nodesync sim apiserver``: the test API server. Its request counters (``/_sim/counters``)
  count the controller's writes: they are counted by the server, not by the controller.
- 50 old nodes join first and keep their Leases renewed: the established nodes the
  correlated-failure guard judges by. The API server stamps creation times itself, so "old" is
  made with a short ``--scaleout-window`` (60 s): the storm starts once the old nodes will be
  older than the window when the first rollback alert arrives.
- the storm: 1000 new Nodes (labelled with their wave, ``--wave-label``), each with its Lease
  and three pods bound to it (two owned by a ReplicaSet, which a drain evicts, one owned by a
  DaemonSet, which it must leave alone), created at an even pace within 60 s. Every healthy
  node's Lease is renewed every 10 s, as kubelet does. Every 20th new node fails: Ready turns
  False (a status patch, as kubelet writes it) and its Lease stops. A bad batch: the failing
  nodes that joined in the first 30 s fail together 40 s into the join, the later ones 10 s
  after they joined, so the rollbacks start with a burst while nodes still join.
- ``nodesync controller`` with the webhook (token in ``NODESYNC_WEBHOOK_TOKEN``), a fresh
  journal, ``--api-qps 20 --api-burst 20``, a blast radius that admits exactly the 50 failing
  nodes (``--max-rollback-fraction 0.05`` of the 1000-node wave, ``--max-rollbacks 50``) and
  ``--max-concurrent-rollbacks 10``; scraped every 15 s as Prometheus would.
- the node agents' part of the cleanup handshake, played here: a watch on Nodes answers every
  ``nodesync.io/cleanup-request`` with a ``nodesync.io/cleanup-status`` "done" (in
  exporter.model's own format) 1 s later. It writes with PUT (verb ``update``), which the
  controller never uses, so the server's counters tell its writes from the controller's. The
  same watch records every change of every Node: cordons, taints, cleanup requests.
- Prometheus' part (an alert 5 s after a node failed) is played here; Alertmanager's (an HA
  pair: grouping, whole-group re-sends, truncation, duplicates) by bench.storm_alertmanager in
  its own process, which times every acknowledgement from the controller and, with the same
  payloads at the same moments, from a bare aiohttp handler in its own process
  (bench.storm_floor): the floor. Noise rides along: 30 alerts that arrive already resolved
  (nodes that flapped) and 120 firing alerts with ``nodesync_action=none`` (a route without the
  allow list), of which ``max_alerts`` lets 100 through.
- once every failing node's plan finished, Alertmanager replays all its notifications back to
  back, 8 in flight, to the controller and then to the floor: the alerts per second each accepts.

Measured and checked: acknowledgement latency p50/p99 of the controller and of the floor (during
the join, and over the whole run), alerts per second accepted, the controller's API writes per
second from the server's counters (sampled 4 times a second) against ``--api-qps`` and the
token bucket's promise (at most burst + qps * T writes in any T seconds), actions taken against
expected (each failing node cordoned, tainted, drained and asked for its cleanup exactly once,
its DaemonSet pod left alone, no healthy node written to; every step once, in the journal, in
the server's counters, in Events and in the controller's metrics), the controller's RSS and
peak RSS (VmHWM), and the total wall time. To tell causes apart: how long a ``GET /healthz``
waits on each receiver (a probe every 100 ms: a request that does no work), which slow
acknowledgements overlapped a scrape, and the size of the controller's exposition.

No root needed; under 2 minutes on 2 vCPUs:

    .venv/bin/python -m bench.storm [--nodes 1000] [--join-seconds 60]

Prints one JSON document; exits 1 if a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import heapq
import json
import os
import platform
import secrets
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import psutil
from prometheus_client.parser import text_string_to_metric_families

from bench.common import free_port, percentile
from exporter.model.cleanup import CleanupState, CleanupStatus
from exporter.model.kube import LEASE_NAMESPACE, TAINT_NODESYNC
from exporter.model.rfc3339 import format_micro_time, format_time
from exporter.model.rollback import CLEANUP_REQUEST_ANNOTATION, CLEANUP_STATUS_ANNOTATION

JSONObject = dict[str, Any]

WAVE_LABEL = "nodesync.io/wave"
NAMESPACE = "default"
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
#: The writes this benchmark makes itself (nodes, leases, pods, kubelet's status, the agent's
#: answers); every other write the API server counts is the controller's.
OWN_WRITES = frozenset(
    {
        ("create", "nodes"),
        ("create", "leases"),
        ("create", "pods"),
        ("patch", "leases"),
        ("patch", "nodes/status"),
        ("update", "nodes"),
    }
)
ROLLBACK_STEPS = ("cordon", "taint", "drain", "cleanup_runtime", "verify")
STEP_EVENTS = (
    "NodesyncCordon",
    "NodesyncTaint",
    "NodesyncDrain",
    "NodesyncCleanupRuntime",
    "NodesyncVerify",
)
FINAL_PLAN_STATES = frozenset({"done", "failed", "cancelled", "refused"})
#: Window lengths (seconds) over which the controller's write rate is averaged.
WINDOWS = (1.0, 2.0, 3.0, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0)


# ---------------------------------------------------------------- small helpers


def summary_ms(samples: Sequence[float]) -> dict[str, float]:
    if not samples:
        return {"count": 0}
    return {
        "count": len(samples),
        "p50_ms": statistics.median(samples) * 1000,
        "p90_ms": percentile(samples, 0.9) * 1000,
        "p99_ms": percentile(samples, 0.99) * 1000,
        "max_ms": max(samples) * 1000,
    }


def peak_rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return int(psutil.Process(pid).memory_info().rss)


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def start_child(
    argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None, stdin: int | None = None
) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, *argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=stdin,
            env={**os.environ, **(env or {})},
        )


def stop_child(proc: subprocess.Popen[bytes] | None, timeout: float = 10.0) -> None:
    """Terminate one process this benchmark started, by its handle; kill it if it hangs."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)


async def wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, deadline: float) -> None:
    """Until ``url`` answers 200 (the process must not exit meanwhile)."""
    async with aiohttp.ClientSession() as http:
        while True:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with http.get(url, timeout=aiohttp.ClientTimeout(total=1)) as response:
                    if response.status == 200:
                        return
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not come up:\n{log_tail(log)}")
            await asyncio.sleep(0.05)


async def wait_port(port: int, proc: subprocess.Popen[bytes], log: Path, deadline: float) -> None:
    while True:
        with contextlib.suppress(OSError):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"port {port} did not open:\n{log_tail(log)}")
        await asyncio.sleep(0.05)


# ---------------------------------------------------------------- the test API server


class APIError(RuntimeError):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"{status}: {text[:300]}")
        self.status = status


@dataclass
class API:
    """``nodesync sim apiserver`` in a child process, and a session authenticated to it."""

    workdir: Path
    port: int = field(default_factory=free_port)
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    proc: subprocess.Popen[bytes] | None = None
    session: aiohttp.ClientSession | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def log(self) -> Path:
        return self.workdir / "apiserver.log"

    async def start(self) -> None:
        self.proc = start_child(
            [
                "-m",
                "exporter",
                "sim",
                "apiserver",
                "--web.listen-address",
                f"127.0.0.1:{self.port}",
                "--kubeconfig",
                str(self.kubeconfig),
                # Enough history (by count and by age) that no watch falls off it.
                "--history-limit",
                "500000",
                "--history-age",
                "1h",
                "--log-level",
                "warning",
            ],
            self.log,
            env={"NODESYNC_SIM_TOKEN": self.token},
        )
        self.session = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {self.token}"},
            connector=aiohttp.TCPConnector(limit=64),
            timeout=aiohttp.ClientTimeout(total=30),
        )
        deadline = time.monotonic() + 30
        while not self.kubeconfig.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the test API server did not start:\n{log_tail(self.log)}")
            await asyncio.sleep(0.05)
        await self.call("GET", "/api")

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
        stop_child(self.proc)

    async def call(
        self,
        method: str,
        path: str,
        body: object = None,
        content_type: str = "application/json",
        params: Mapping[str, str] | None = None,
    ) -> Any:
        assert self.session is not None
        async with self.session.request(
            method,
            f"{self.url}{path}",
            data=None if body is None else json.dumps(body),
            headers={"Content-Type": content_type},
            params=params,
        ) as response:
            text = await response.text()
            if response.status >= 300:
                raise APIError(response.status, text)
            return json.loads(text) if text else None

    async def merge_patch(self, path: str, body: JSONObject) -> Any:
        return await self.call("PATCH", path, body, "application/merge-patch+json")

    async def counters(self) -> dict[tuple[str, str, int], int]:
        rows = await self.call("GET", "/_sim/counters")
        return {(r["verb"], r["resource"], int(r["code"])): int(r["count"]) for r in rows}


def lease_path(name: str = "") -> str:
    base = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases"
    return f"{base}/{name}" if name else base


def conditions(ready: bool, at: float) -> list[JSONObject]:
    stamp = format_time(at)

    def condition(type_: str, status: str, reason: str, message: str) -> JSONObject:
        return {
            "type": type_,
            "status": status,
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
            "reason": reason,
            "message": message,
        }

    return [
        condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has memory"),
        condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no pressure"),
        condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has PIDs"),
        condition("Ready", "True", "KubeletReady", "kubelet is posting ready status")
        if ready
        else condition(
            "Ready",
            "False",
            "KubeletNotReady",
            "container runtime not ready: RuntimeReady=false reason:DeadlineExceeded",
        ),
    ]


def node_body(name: str, index: int, wave: str | None) -> JSONObject:
    """A Node as kubelet registers it (conditions, capacity, addresses, node info)."""
    resources = {"cpu": "8", "memory": "32827480Ki", "pods": "110"}
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "m5.2xlarge",
        "topology.kubernetes.io/zone": f"eu-west-1{'abc'[index % 3]}",
    }
    if wave:
        labels[WAVE_LABEL] = wave
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"providerID": f"aws:///eu-west-1a/i-{index:017x}"},
        "status": {
            "conditions": conditions(True, time.time()),
            "capacity": resources,
            "allocatable": {**resources, "cpu": "7910m"},
            "addresses": [
                {
                    "type": "InternalIP",
                    "address": f"10.{index // 65536}.{index // 256 % 256}.{index % 256}",
                },
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "machineID": f"{index:032x}",
                "kernelVersion": "6.1.0-18-cloud-amd64",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "containerRuntimeVersion": "containerd://1.6.20",
                "kubeletVersion": "v1.30.4",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def lease_body(node: JSONObject) -> JSONObject:
    meta = node["metadata"]
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": meta["name"],
            "namespace": LEASE_NAMESPACE,
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": meta["name"], "uid": meta["uid"]}
            ],
        },
        "spec": {
            "holderIdentity": meta["name"],
            "leaseDurationSeconds": 40,
            "renewTime": format_micro_time(time.time()),
        },
    }


def pod_bodies(node: str, index: int) -> list[JSONObject]:
    """Two pods of a Deployment's ReplicaSet (evictable) and one of a DaemonSet (never)."""

    def pod(name: str, owner_kind: str, owner: str, app: str) -> JSONObject:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                "labels": {"app": app},
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": owner_kind,
                        "name": owner,
                        "uid": f"00000000-0000-0000-0000-{hash(owner) & 0xFFFFFFFFFFFF:012x}",
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {
                "nodeName": node,
                "containers": [{"name": app, "image": f"registry.example/{app}:1.0"}],
                "terminationGracePeriodSeconds": 30,
            },
        }

    rs = f"web-{index % 40}-5d8f7c9b6"
    return [
        pod(f"{rs}-{node}-a", "ReplicaSet", rs, f"web-{index % 40}"),
        pod(f"{rs}-{node}-b", "ReplicaSet", rs, f"web-{index % 40}"),
        pod(f"node-agent-{node}", "DaemonSet", "node-agent", "node-agent"),
    ]


# ---------------------------------------------------------------- kubelet: lease renewals


@dataclass
class LeaseRenewer:
    """Renews every registered Lease every ``period`` seconds, as kubelet does, on a
    monotonic schedule, until stopped; ``halt(name)`` stops one node's renewals."""

    api: API
    period: float
    issued: int = 0
    ok: int = 0
    failed: int = 0
    max_lateness: float = 0.0
    last_ok: dict[str, float] = field(default_factory=dict)  # wall time of the last renewal
    max_gap: float = 0.0  # longest time between two renewals of a healthy lease
    _heap: list[tuple[float, str]] = field(default_factory=list)
    _halted: set[str] = field(default_factory=set)

    def add(self, name: str, renewed_at: float) -> None:
        self.last_ok[name] = renewed_at
        heapq.heappush(self._heap, (time.monotonic() + self.period, name))

    def halt(self, name: str) -> None:
        self._halted.add(name)

    async def _renew(self, name: str, gate: asyncio.Semaphore) -> None:
        async with gate:
            if name in self._halted:
                return
            now = time.time()
            try:
                await self.api.merge_patch(
                    lease_path(name), {"spec": {"renewTime": format_micro_time(now)}}
                )
            except (aiohttp.ClientError, APIError, TimeoutError):
                self.failed += 1
                return
            self.ok += 1
            if name not in self._halted:
                self.max_gap = max(self.max_gap, now - self.last_ok.get(name, now))
            self.last_ok[name] = now

    async def run(self, stop: asyncio.Event) -> None:
        gate = asyncio.Semaphore(32)
        tasks: set[asyncio.Task[None]] = set()
        while not stop.is_set():
            now = time.monotonic()
            while self._heap and self._heap[0][0] <= now:
                due, name = heapq.heappop(self._heap)
                if name in self._halted:
                    continue
                self.max_lateness = max(self.max_lateness, now - due)
                self.issued += 1
                task = asyncio.create_task(self._renew(name, gate))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                heapq.heappush(self._heap, (due + self.period, name))
            wait = (self._heap[0][0] - time.monotonic()) if self._heap else 0.1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.005, min(wait, 0.1)))
        await asyncio.gather(*tasks, return_exceptions=True)


# ---------------------------------------------------------------- the node agents, a watch


@dataclass
class NodeRecord:
    """What the watch saw happen to one Node."""

    modifications: int = 0
    cordons: int = 0
    uncordons: int = 0
    taints_added: int = 0
    taints_removed: int = 0
    requests: list[str] = field(default_factory=list)  # cleanup request ids, as they changed
    answered: list[str] = field(default_factory=list)
    deleted: bool = False
    first_write_at: float | None = None  # wall time the controller's first change was seen
    answered_at: float | None = None


@dataclass
class NodeWatch:
    """Lists and watches Nodes: records every change of each, and answers cleanup requests as
    the node's agent would (``agent_delay`` later, with the status in the agent's format)."""

    api: API
    agent_delay: float
    records: dict[str, NodeRecord] = field(default_factory=lambda: defaultdict(NodeRecord))
    state: dict[str, tuple[bool, bool, str, str]] = field(default_factory=dict)
    relists: int = 0
    answers_written: int = 0
    answer_conflicts: int = 0
    answer_failures: int = 0
    _answering: set[tuple[str, str]] = field(default_factory=set)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @staticmethod
    def _view(obj: JSONObject) -> tuple[bool, bool, str, str]:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        annotations = meta.get("annotations") or {}
        taints = spec.get("taints") or []
        status = CleanupStatus.from_json(annotations.get(CLEANUP_STATUS_ANNOTATION, ""))
        return (
            spec.get("unschedulable") is True,
            any(t.get("key") == TAINT_NODESYNC for t in taints),
            annotations.get(CLEANUP_REQUEST_ANNOTATION, ""),
            status.id if status is not None else "",
        )

    def _seen(self, kind: str, obj: JSONObject) -> None:
        name = obj["metadata"]["name"]
        record = self.records[name]
        if kind == "DELETED":
            record.deleted = True
            self.state.pop(name, None)
            return
        new = self._view(obj)
        old = self.state.get(name)
        self.state[name] = new
        if old is not None and kind == "MODIFIED":
            record.modifications += 1
            cordoned, tainted, request, answered = new
            if cordoned and not old[0]:
                record.cordons += 1
            if old[0] and not cordoned:
                record.uncordons += 1
            if tainted and not old[1]:
                record.taints_added += 1
            if old[1] and not tainted:
                record.taints_removed += 1
            if request != old[2] and request:
                record.requests.append(request)
            if answered != old[3] and answered:
                record.answered.append(answered)
            if (cordoned, tainted, request) != old[:3] and record.first_write_at is None:
                record.first_write_at = time.time()
        _, _, request, answered = new
        if request and request != answered and (name, request) not in self._answering:
            self._answering.add((name, request))
            task = asyncio.create_task(self._answer(name, request))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _answer(self, name: str, request: str) -> None:
        await asyncio.sleep(self.agent_delay)
        status = CleanupStatus(request, CleanupState.DONE, 0, 0, time.time()).to_json()
        for _ in range(5):
            try:
                node = await self.api.call("GET", f"/api/v1/nodes/{name}")
                annotations = node["metadata"].setdefault("annotations", {})
                if annotations.get(CLEANUP_REQUEST_ANNOTATION) != request:
                    return
                annotations[CLEANUP_STATUS_ANNOTATION] = status
                await self.api.call("PUT", f"/api/v1/nodes/{name}", node)
            except APIError as exc:
                if exc.status == 409:
                    self.answer_conflicts += 1
                    continue
                self.answer_failures += 1
                return
            except (aiohttp.ClientError, TimeoutError):
                self.answer_failures += 1
                return
            self.answers_written += 1
            self.records[name].answered_at = time.time()
            return
        self.answer_failures += 1

    async def _list(self) -> str:
        listed = await self.api.call("GET", "/api/v1/nodes")
        for obj in listed["items"]:
            self._seen("ADDED" if obj["metadata"]["name"] not in self.state else "MODIFIED", obj)
        return str(listed["metadata"]["resourceVersion"])

    async def run(self) -> None:
        assert self.api.session is not None
        rv = await self._list()
        while True:
            params = {
                "watch": "true",
                "resourceVersion": rv,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": "900",
            }
            try:
                async with self.api.session.get(
                    f"{self.api.url}/api/v1/nodes",
                    params=params,
                    timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
                ) as response:
                    async for line in response.content:
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        obj = event["object"]
                        if event["type"] == "ERROR":
                            self.relists += 1
                            rv = await self._list()
                            break
                        rv = str(obj["metadata"]["resourceVersion"])
                        if event["type"] != "BOOKMARK":
                            self._seen(event["type"], obj)
            except (aiohttp.ClientError, TimeoutError):
                await asyncio.sleep(0.2)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


# ---------------------------------------------------------------- samplers


@dataclass
class CounterSample:
    sent: float  # monotonic, when the counters were asked for
    received: float  # monotonic, when they arrived: the server read them in between
    controller_writes: int
    own_writes: int


def split_writes(counts: Mapping[tuple[str, str, int], int]) -> tuple[int, int]:
    """(the controller's writes, this benchmark's writes) in a counter snapshot."""
    controller = own = 0
    for (verb, resource, _), n in counts.items():
        if verb not in WRITE_VERBS:
            continue
        if (verb, resource) in OWN_WRITES:
            own += n
        else:
            controller += n
    return controller, own


async def sample_counters(
    api: API, samples: list[CounterSample], stop: asyncio.Event, period: float
) -> None:
    while not stop.is_set():
        sent = time.monotonic()
        try:
            counts = await api.counters()
        except (aiohttp.ClientError, APIError, TimeoutError):
            counts = None
        received = time.monotonic()
        if counts is not None:
            samples.append(CounterSample(sent, received, *split_writes(counts)))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), max(0.0, period - (received - sent)))


async def sample_rss(pid: int, samples: list[tuple[float, int]], stop: asyncio.Event) -> None:
    process = psutil.Process(pid)
    while not stop.is_set():
        with contextlib.suppress(psutil.Error):
            samples.append((time.monotonic(), process.memory_info().rss))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 1.0)


def write_rates(samples: Sequence[CounterSample], qps: float, burst: int) -> dict[str, Any]:
    """The controller's writes over time, from the server's counters.

    The token bucket promises at most ``burst + qps * T`` writes in any window of T seconds.
    Between two samples the counters were read somewhere inside each request, so the window
    between them is at most ``received_j - sent_i`` long: a sound bound to check against."""
    changes = [
        i
        for i in range(1, len(samples))
        if samples[i].controller_writes != samples[i - 1].controller_writes
    ]
    if not changes:
        return {"total": 0}
    window = samples[changes[0] - 1 : changes[-1] + 1]
    base = window[0].controller_writes
    total = window[-1].controller_writes - base
    span = window[-1].received - window[0].sent
    violations = 0
    worst_excess = -float("inf")
    best: dict[float, float] = {}
    mids = [(s.sent + s.received) / 2 for s in window]
    for i, start in enumerate(window):
        for j in range(i + 1, len(window)):
            end = window[j]
            delta = end.controller_writes - start.controller_writes
            bound = burst + qps * (end.received - start.sent)
            worst_excess = max(worst_excess, delta - bound)
            if delta > bound:
                violations += 1
        for length in WINDOWS:
            j = next((k for k in range(i + 1, len(window)) if mids[k] - mids[i] >= length), None)
            if j is None:
                continue
            rate = (window[j].controller_writes - start.controller_writes) / (mids[j] - mids[i])
            best[length] = max(best.get(length, 0.0), rate)
    calm = next(
        (
            length
            for length in WINDOWS
            if all(best.get(w, 0.0) <= qps for w in WINDOWS if w >= length)
        ),
        None,
    )
    per_second: list[int] = []
    t0 = mids[0]
    for k in range(1, len(window)):
        second = int(mids[k] - t0)
        while len(per_second) <= second:
            per_second.append(0)
        per_second[second] += window[k].controller_writes - window[k - 1].controller_writes
    return {
        "total": total,
        "active_seconds": span,
        "average_per_second": total / span if span > 0 else None,
        "max_in_one_second": max(per_second, default=0),
        "max_average_per_second_over": {f"{k:g}s": v for k, v in sorted(best.items())},
        "shortest_window_s_never_averaging_above_qps": calm,
        "token_bucket_bound_violations": violations,
        "closest_to_bound_writes": worst_excess,
        "per_second": per_second,
    }


# ---------------------------------------------------------------- controller and journal


def scrape_families(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return out


def metric(
    families: Mapping[str, list[tuple[dict[str, str], float]]], name: str, **labels: str
) -> float:
    return sum(
        v for lab, v in families.get(name, []) if all(lab.get(k) == x for k, x in labels.items())
    )


def journal_plans(path: Path) -> list[tuple[int, str, str, str, str]]:
    """(id, action, node, state, reason) of every plan, read-only beside the writer."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=2)) as db:
        return [
            (int(r[0]), str(r[1]), str(r[2]), str(r[3]), str(r[4]))
            for r in db.execute("SELECT id, action, node, state, reason FROM plans")
        ]


def journal_steps(path: Path) -> list[tuple[int, str, str, str, int]]:
    """(plan id, node, kind, state, attempts) of every step."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=2)) as db:
        return [
            (int(r[0]), str(r[1]), str(r[2]), str(r[3]), int(r[4]))
            for r in db.execute("SELECT plan_id, node, kind, state, attempts FROM steps")
        ]


# ---------------------------------------------------------------- Prometheus' part: alerts


def not_ready_alert(node: str, starts_at: float, ends_at: float | None = None) -> JSONObject:
    return {
        "labels": {
            "alertname": "NodesyncNewNodeNotReady",
            "node": node,
            "nodesync_action": "rollback_node",
            "severity": "critical",
        },
        "annotations": {
            "summary": f"New node {node} is not Ready: rolling it back.",
            "description": f"Node {node} joined recently and has not been Ready (or has not "
            "renewed its Lease) for 2m 5s.",
            "runbook_url": "docs/runbooks.md#nodesyncnewnodenotready",
        },
        "startsAt": starts_at,
        "endsAt": ends_at,
        "generatorURL": "http://prometheus-0:9090/graph?g0.expr=node%3Anodesync_node_not_ready"
        "_seconds%3Amax+%3E+scalar%28nodesync%3Anode_not_ready_threshold_seconds%29&g0.tab=1",
    }


def lease_stale_alert(node: str, starts_at: float) -> JSONObject:
    return {
        "labels": {
            "alertname": "NodesyncNewNodeLeaseStaleWhileReady",
            "node": node,
            "nodesync_action": "none",
            "severity": "warning",
        },
        "annotations": {
            "summary": f"New node {node} has a stale Lease but is still Ready.",
            "description": f"The Lease of node {node} was last renewed 1m 10s ago, yet its "
            "Ready condition is still true: the node-lifecycle controller lags. nodesync takes "
            "no action.",
            "runbook_url": "docs/runbooks.md#nodesyncnewnodeleasestalewhileready",
        },
        "startsAt": starts_at,
        "endsAt": None,
        "generatorURL": "http://prometheus-0:9090/graph?g0.expr=node%3Anodesync_node_lease_age"
        "_seconds%3Amax&g0.tab=1",
    }


class AlertFeed:
    """Alerts to the Alertmanager process, one JSON line each on its stdin."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc
        self.sent = 0

    def send(self, message: JSONObject) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(message).encode() + b"\n")
        self._proc.stdin.flush()
        self.sent += 1


# ---------------------------------------------------------------- the benchmark


@dataclass(frozen=True)
class Config:
    nodes: int
    old_nodes: int
    join_seconds: float
    fail_every: int
    fail_after: float
    fail_together_at: float
    alert_for: float
    lease_period: float
    scaleout_window: float
    grace: float
    api_qps: float
    api_burst: int
    max_concurrent: int
    cleanup_timeout: float
    agent_delay: float
    noise_none: int
    noise_resolved: int
    group_wait: float
    group_interval: float
    peer_delay: float
    in_flight: int
    max_alerts: int
    scrape_interval: float
    plans_deadline: float
    p99_target_ms: float = 50.0
    wall_target_s: float = 600.0

    def is_failing(self, index: int) -> bool:
        return index % self.fail_every == self.fail_every - 1

    @property
    def failing(self) -> int:
        return sum(1 for i in range(self.nodes) if self.is_failing(i))

    def fail_time(self, created: float, join_start: float) -> float:
        """When a failing node fails: ``fail_after`` after it joined, and not before
        ``fail_together_at`` into the join (the nodes that joined by then fail together)."""
        at = created + self.fail_after
        if self.fail_together_at > 0:
            at = max(at, join_start + self.fail_together_at)
        return at

    def first_alert_after(self) -> float:
        """Seconds from the join's start to the first rollback alert's first notification."""
        first = self.fail_every - 1
        created = first * self.join_seconds / self.nodes
        return self.fail_time(created, 0.0) + self.alert_for + self.group_wait


def controller_args(cfg: Config, api: API, port: int, journal: Path) -> list[str]:
    failing = cfg.failing
    return [
        "-m",
        "exporter",
        "controller",
        "--kubeconfig",
        str(api.kubeconfig),
        "--web.listen-address",
        f"127.0.0.1:{port}",
        "--journal-path",
        str(journal),
        "--wave-label",
        WAVE_LABEL,
        "--scaleout-window",
        f"{cfg.scaleout_window:g}s",
        "--node-monitor-grace-period",
        f"{cfg.grace:g}s",
        # The blast radius admits exactly the failing nodes: one more plan would be refused.
        "--max-rollbacks",
        str(failing),
        "--max-rollback-fraction",
        f"{failing / cfg.nodes:g}",
        "--max-concurrent-rollbacks",
        str(cfg.max_concurrent),
        "--api-qps",
        f"{cfg.api_qps:g}",
        "--api-burst",
        str(cfg.api_burst),
        "--cleanup-timeout",
        f"{cfg.cleanup_timeout:g}s",
    ]


@dataclass
class Storm:
    """What one run did and saw; ``report`` makes the figures and the checks of it."""

    cfg: Config
    api: API
    names: list[str] = field(default_factory=list)
    old_names: list[str] = field(default_factory=list)
    failing: list[str] = field(default_factory=list)
    noise_none: set[str] = field(default_factory=set)
    flapping: set[str] = field(default_factory=set)
    watch: NodeWatch = field(init=False)
    renewer: LeaseRenewer = field(init=False)
    created_rv: dict[str, str] = field(default_factory=dict)
    created_at: dict[str, float] = field(default_factory=dict)
    failed_at: dict[str, float] = field(default_factory=dict)
    create_errors: list[str] = field(default_factory=list)
    join_lateness: float = 0.0
    join_start: float = 0.0  # wall time
    join_end: float = 0.0
    plans_finished: float = 0.0
    final_plans: dict[str, str] = field(default_factory=dict)
    counter_samples: list[CounterSample] = field(default_factory=list)
    rss_samples: list[tuple[float, int]] = field(default_factory=list)
    scrapes: list[tuple[float, float]] = field(default_factory=list)  # wall start, end
    am: JSONObject = field(default_factory=dict)
    families: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)
    counts: dict[tuple[str, str, int], int] = field(default_factory=dict)
    events: list[JSONObject] = field(default_factory=list)
    nodes_now: dict[str, JSONObject] = field(default_factory=dict)
    pods_now: list[JSONObject] = field(default_factory=list)
    plans: list[tuple[int, str, str, str, str]] = field(default_factory=list)
    steps: list[tuple[int, str, str, str, int]] = field(default_factory=list)
    exposition_bytes: int = 0
    rss_before: int = 0
    rss: int = 0
    peak_rss: int = 0
    wall_time: float = 0.0

    def __post_init__(self) -> None:
        self.watch = NodeWatch(self.api, self.cfg.agent_delay)
        self.renewer = LeaseRenewer(self.api, self.cfg.lease_period)
        cfg = self.cfg
        self.names = [f"node-{i:04d}" for i in range(cfg.nodes)]
        self.old_names = [f"old-{i:03d}" for i in range(cfg.old_nodes)]
        self.failing = [n for i, n in enumerate(self.names) if cfg.is_failing(i)]
        healthy = [n for i, n in enumerate(self.names) if not cfg.is_failing(i)]
        self.noise_none = set(healthy[3::8][: cfg.noise_none])
        rest = [n for n in healthy if n not in self.noise_none]
        step = max(1, len(rest) // max(1, cfg.noise_resolved))
        self.flapping = set(rest[step // 2 :: step][: cfg.noise_resolved])

    async def register(self, name: str, index: int, wave: str | None) -> None:
        """A node joins: its Node, then its Lease (renewed from now on)."""
        node = await self.api.call("POST", "/api/v1/nodes", node_body(name, index, wave))
        self.created_rv[name] = node["metadata"]["resourceVersion"]
        await self.api.call("POST", lease_path(), lease_body(node))
        self.renewer.add(name, time.time())

    async def fail_later(self, name: str, at: float, feed: AlertFeed) -> None:
        """The node turns NotReady and stops renewing its Lease; Prometheus' rule fires
        ``alert_for`` later."""
        await asyncio.sleep(max(0.0, at - time.time()))
        now = time.time()
        self.renewer.halt(name)
        await self.api.merge_patch(
            f"/api/v1/nodes/{name}/status", {"status": {"conditions": conditions(False, now)}}
        )
        self.failed_at[name] = now
        feed.send(not_ready_alert(name, now + self.cfg.alert_for))

    async def flap_later(self, name: str, created: float, feed: AlertFeed) -> None:
        """NotReady for a moment, recovered before Alertmanager's next flush: its alert reaches
        the hook already resolved."""
        starts = created + 2.0
        ends = starts + 0.5 * self.cfg.group_interval
        await asyncio.sleep(max(0.0, ends + 0.05 - time.time()))
        feed.send(not_ready_alert(name, starts, ends))

    async def join(self, index: int, name: str, gate: asyncio.Semaphore, feed: AlertFeed) -> None:
        async with gate:
            try:
                await self.register(name, index, "storm")
                created = time.time()
                self.created_at[name] = created
                await asyncio.gather(
                    *(
                        self.api.call("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", body)
                        for body in pod_bodies(name, index)
                    )
                )
            except (aiohttp.ClientError, APIError, TimeoutError) as exc:
                self.create_errors.append(f"{name}: {exc}")
                return
        if self.cfg.is_failing(index):
            await self.fail_later(name, self.cfg.fail_time(created, self.join_start), feed)
        elif name in self.noise_none:
            feed.send(lease_stale_alert(name, created + 5.0))
        elif name in self.flapping:
            await self.flap_later(name, created, feed)

    async def scrape_loop(self, url: str, stop: asyncio.Event) -> None:
        """Prometheus scrapes the controller, as it would in a cluster (0: never)."""
        if self.cfg.scrape_interval <= 0:
            return
        async with aiohttp.ClientSession() as http:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.cfg.scrape_interval)
                if stop.is_set():
                    return
                started = time.time()
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with http.get(url) as response:
                        await response.read()
                    self.scrapes.append((started, time.time()))

    async def wait_plans(
        self, journal: Path, controller: subprocess.Popen[bytes], log: Path
    ) -> None:
        """Until every failing node's rollback plan is in a final state (or the deadline)."""
        deadline = time.monotonic() + self.cfg.plans_deadline
        while time.monotonic() < deadline:
            try:
                rows = await asyncio.to_thread(journal_plans, journal)
            except sqlite3.Error:
                rows = []
            self.final_plans = {
                node: state
                for _, action, node, state, _ in rows
                if action == "rollback_node"
                and node in self.failed_at
                and state in FINAL_PLAN_STATES
            }
            if len(self.final_plans) >= len(self.failing):
                break
            if controller.poll() is not None:
                raise RuntimeError(f"the controller exited:\n{log_tail(log)}")
            await asyncio.sleep(0.5)
        self.plans_finished = time.time()


async def run(cfg: Config) -> Storm:
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="nodesync-storm-"))
    api = API(workdir)
    storm = Storm(cfg, api)
    controller: subprocess.Popen[bytes] | None = None
    floor: subprocess.Popen[bytes] | None = None
    alertmanager: subprocess.Popen[bytes] | None = None
    stop = asyncio.Event()
    background: list[asyncio.Task[None]] = []
    webhook_token = secrets.token_urlsafe(24)
    try:
        await api.start()

        # ---- the established cluster
        await asyncio.gather(
            *(storm.register(n, 5000 + i, None) for i, n in enumerate(storm.old_names))
        )
        old_created = time.time()
        background.append(asyncio.create_task(storm.renewer.run(stop)))
        background.append(asyncio.create_task(storm.watch.run()))

        # ---- the controller, the floor, Alertmanager
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        journal = workdir / "journal.db"
        controller_log = workdir / "controller.log"
        controller = start_child(
            controller_args(cfg, api, port, journal),
            controller_log,
            env={"NODESYNC_WEBHOOK_TOKEN": webhook_token},
        )
        await wait_http(f"{base}/readyz", controller, controller_log, time.monotonic() + 60)
        floor_port = free_port()
        floor_log = workdir / "floor.log"
        floor = start_child(["-m", "bench.storm_floor", "--port", str(floor_port)], floor_log)
        await wait_port(floor_port, floor, floor_log, time.monotonic() + 30)
        result_path = workdir / "alertmanager.json"
        am_log = workdir / "alertmanager.log"
        alertmanager = start_child(
            [
                "-m",
                "bench.storm_alertmanager",
                "--controller",
                f"{base}/alerts",
                "--floor",
                f"http://127.0.0.1:{floor_port}/alerts",
                "--result",
                str(result_path),
                "--group-wait",
                f"{cfg.group_wait:g}",
                "--group-interval",
                f"{cfg.group_interval:g}",
                "--peer-delay",
                f"{cfg.peer_delay:g}",
                "--max-alerts",
                str(cfg.max_alerts),
                "--in-flight",
                str(cfg.in_flight),
                "--max-seconds",
                f"{cfg.wall_target_s:g}",
            ],
            am_log,
            env={"NODESYNC_WEBHOOK_TOKEN": webhook_token},
            stdin=subprocess.PIPE,
        )
        feed = AlertFeed(alertmanager)
        background.append(
            asyncio.create_task(sample_counters(api, storm.counter_samples, stop, 0.25))
        )
        background.append(asyncio.create_task(sample_rss(controller.pid, storm.rss_samples, stop)))
        background.append(asyncio.create_task(storm.scrape_loop(f"{base}/metrics", stop)))
        storm.rss_before = psutil.Process(controller.pid).memory_info().rss

        # ---- the storm. It starts once the old nodes will be older than the scale-out window
        # when the first rollback alert arrives: they are the established nodes.
        join_start = max(
            time.time(), old_created + cfg.scaleout_window - cfg.first_alert_after() + 1
        )
        await asyncio.sleep(max(0.0, join_start - time.time()))
        storm.join_start = time.time()
        origin = time.monotonic()
        gate = asyncio.Semaphore(48)
        tasks: list[asyncio.Task[None]] = []
        for index, name in enumerate(storm.names):
            due = origin + index * cfg.join_seconds / cfg.nodes
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            storm.join_lateness = max(storm.join_lateness, time.monotonic() - due)
            tasks.append(asyncio.create_task(storm.join(index, name, gate, feed)))
        for outcome in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(outcome, BaseException):
                storm.create_errors.append(repr(outcome))
        storm.join_end = max(storm.created_at.values(), default=time.time())

        # ---- the rollbacks finish
        await storm.wait_plans(journal, controller, controller_log)

        # ---- the flood, then a quiet spell in which nothing new may happen
        feed.send({"cmd": "finish"})
        with contextlib.suppress(subprocess.TimeoutExpired):
            await asyncio.to_thread(alertmanager.wait, 300)
        if alertmanager.returncode != 0:
            raise RuntimeError(f"the Alertmanager process failed:\n{log_tail(am_log)}")
        storm.am = json.loads(result_path.read_text())
        await asyncio.sleep(7.0)  # longer than the executor's poll interval (5 s)

        # ---- what the controller did, and what the API server holds
        async with aiohttp.ClientSession() as http, http.get(f"{base}/metrics") as response:
            exposition = await response.text()
        storm.families = scrape_families(exposition)
        storm.exposition_bytes = len(exposition.encode())
        storm.rss = psutil.Process(controller.pid).memory_info().rss
        storm.peak_rss = peak_rss_bytes(controller.pid)
        stop.set()
        await asyncio.gather(*background[:1], return_exceptions=True)  # the renewals drain
        storm.counts = await api.counters()
        storm.events = (await api.call("GET", f"/api/v1/namespaces/{NAMESPACE}/events"))["items"]
        nodes = (await api.call("GET", "/api/v1/nodes"))["items"]
        storm.nodes_now = {n["metadata"]["name"]: n for n in nodes}
        storm.pods_now = (await api.call("GET", f"/api/v1/namespaces/{NAMESPACE}/pods"))["items"]
        stop_child(controller)
        storm.plans = journal_plans(journal)
        storm.steps = journal_steps(journal)
        storm.wall_time = time.monotonic() - started
        return storm
    finally:
        stop.set()
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await storm.watch.close()
        if alertmanager is not None and alertmanager.stdin is not None:
            with contextlib.suppress(OSError):
                alertmanager.stdin.close()
        stop_child(alertmanager)
        stop_child(floor)
        stop_child(controller)
        await api.close()
        shutil.rmtree(workdir, ignore_errors=True)


# ---------------------------------------------------------------- the report


def ok_latencies(
    rows: Sequence[JSONObject], start: float | None = None, end: float | None = None
) -> list[float]:
    return [
        r["latency"]
        for r in rows
        if r["status"] == 200
        and (start is None or r["at"] >= start)
        and (end is None or r["at"] <= end)
    ]


def webhook_summary(rows: Sequence[JSONObject], seconds: float | None = None) -> JSONObject:
    ok = [r for r in rows if r["status"] == 200]
    alerts = sum(r["alerts"] for r in ok)
    out: JSONObject = {
        "requests": len(rows),
        "codes": dict(Counter(str(r["status"]) for r in rows)),
        "alerts_accepted": alerts,
        "latency": summary_ms([r["latency"] for r in ok]),
        "waited_for_a_slot": summary_ms([r["queued"] for r in rows]),
    }
    if seconds:
        out["seconds"] = seconds
        out["alerts_per_second"] = alerts / seconds
        out["requests_per_second"] = len(ok) / seconds
    if any("new" in r for r in rows):
        out["answered_new"] = sum(r.get("new", 0) for r in rows)
        out["answered_duplicates"] = sum(r.get("duplicates", 0) for r in rows)
        out["answered_resolved"] = sum(r.get("resolved", 0) for r in rows)
    return out


def overlaps(row: JSONObject, spans: Sequence[tuple[float, float]]) -> bool:
    end = row["at"] + row["latency"]
    return any(row["at"] < s1 and end > s0 for s0, s1 in spans)


def webhook_report(storm: Storm) -> JSONObject:
    am = storm.am
    paced_c, paced_f = am["paced"]["controller"], am["paced"]["floor"]
    first = min((r["at"] for r in paced_c), default=am["paced_ended_at"])
    seconds = am["paced_ended_at"] - first
    families = storm.families
    served = metric(families, "nodesync_webhook_request_duration_seconds_count")
    clear = [r for r in paced_c if not overlaps(r, storm.scrapes)]
    slowest = sorted((r for r in paced_c if r["status"] == 200), key=lambda r: -r["latency"])
    probes = {name: [(float(a), float(b)) for a, b in rows] for name, rows in am["probes"].items()}

    def probe_during(row: JSONObject, name: str) -> float:
        """The slowest probe of a receiver sent while this request was open, in ms."""
        end = row["at"] + row["latency"]
        return 1000 * max(
            (lat for at, lat in probes[name] if row["at"] - 0.1 <= at <= end), default=0.0
        )

    return {
        "notifications": am["notifications"],
        "notifications_by_group": am["notifications_by_group"],
        "payload_bytes_max": am["payload_bytes_max"],
        "truncated_alerts_max": am["truncated_max"],
        "during_join": {
            "controller": summary_ms(ok_latencies(paced_c, storm.join_start, storm.join_end)),
            "floor": summary_ms(ok_latencies(paced_f, storm.join_start, storm.join_end)),
        },
        "paced": {
            "controller": webhook_summary(paced_c, seconds),
            "floor": webhook_summary(paced_f, seconds),
        },
        "paced_controller_not_overlapping_a_scrape": summary_ms(ok_latencies(clear)),
        "paced_controller_slowest": [
            {
                "after_join_start_s": r["at"] - storm.join_start,
                "latency_ms": r["latency"] * 1000,
                "alerts": r["alerts"],
                "overlapped_a_scrape": overlaps(r, storm.scrapes),
                "slowest_controller_healthz_meanwhile_ms": probe_during(r, "controller"),
                "slowest_floor_probe_meanwhile_ms": probe_during(r, "floor"),
            }
            for r in slowest[:8]
        ],
        "healthz_probes": {
            name: summary_ms([lat for _, lat in rows]) for name, rows in probes.items()
        },
        "flood": {
            name: webhook_summary(am["flood"][name]["samples"], am["flood"][name]["seconds"])
            for name in ("controller", "floor")
        },
        "server_side": {
            "requests": served,
            "mean_ms": 1000
            * metric(families, "nodesync_webhook_request_duration_seconds_sum")
            / max(1.0, served),
            "alerts_received_firing": metric(
                families, "nodesync_alerts_received_total", status="firing"
            ),
            "alerts_received_resolved": metric(
                families, "nodesync_alerts_received_total", status="resolved"
            ),
            "duplicates": metric(families, "nodesync_alert_duplicates_total"),
            "truncated": metric(families, "nodesync_alerts_truncated_total"),
        },
    }


def owner_kind(pod: JSONObject) -> str:
    refs = pod["metadata"].get("ownerReferences") or [{}]
    return str(refs[0].get("kind", ""))


def report(storm: Storm) -> JSONObject:
    cfg = storm.cfg
    failing = set(storm.failing)
    healthy = {n for n in storm.names if n not in failing} | set(storm.old_names)
    counts, families = storm.counts, storm.families

    def count(verb: str, resource: str, code: int | None = None) -> int:
        return sum(
            n
            for (v, r, c), n in counts.items()
            if v == verb and r == resource and (code is None or c == code)
        )

    def done(action: str) -> int:
        return int(metric(families, "nodesync_actions_total", action=action, result="done"))

    events_by_node: dict[str, Counter[str]] = defaultdict(Counter)
    for event in storm.events:
        involved = event.get("involvedObject") or {}
        if involved.get("kind") == "Node":
            events_by_node[involved.get("name", "")][event.get("reason", "")] += 1
    rollback_plans = [p for p in storm.plans if p[1] == "rollback_node"]
    plans_by_node = Counter(p[2] for p in rollback_plans)

    # Each failing node: one plan, done; one cordon, one taint, one cleanup request (as the
    # watch saw them); one Event per step; every step done at its first attempt; its
    # ReplicaSet pods evicted, its DaemonSet pod kept.
    not_once: list[str] = []
    for name in storm.failing:
        record = storm.watch.records.get(name, NodeRecord())
        reasons = events_by_node.get(name, Counter())
        steps = {(s[2], s[3], s[4]) for s in storm.steps if s[1] == name}
        pods = [p for p in storm.pods_now if p["spec"].get("nodeName") == name]
        ds = [p for p in pods if owner_kind(p) == "DaemonSet"]
        rs_left = [
            p
            for p in pods
            if owner_kind(p) == "ReplicaSet" and not p["metadata"].get("deletionTimestamp")
        ]
        facts = {
            "plans": plans_by_node.get(name, 0),
            "plan_state": storm.final_plans.get(name, "none"),
            "cordons": record.cordons,
            "uncordons": record.uncordons,
            "taints_added": record.taints_added,
            "taints_removed": record.taints_removed,
            "cleanup_requests": len(record.requests),
            "step_events": [reasons.get(r, 0) for r in STEP_EVENTS],
            "steps": sorted(steps),
            "replicaset_pods_left": len(rs_left),
            "daemonset_pods_kept": sum(1 for p in ds if not p["metadata"].get("deletionTimestamp")),
            "cordoned_now": (storm.nodes_now.get(name, {}).get("spec") or {}).get("unschedulable"),
        }
        exactly_once = (
            facts["plans"] == 1
            and facts["plan_state"] == "done"
            and (record.cordons, record.uncordons, record.taints_added) == (1, 0, 1)
            and (record.taints_removed, len(record.requests)) == (0, 1)
            and facts["step_events"] == [1] * len(STEP_EVENTS)
            and facts["steps"] == sorted((k, "done", 1) for k in ROLLBACK_STEPS)
            and facts["replicaset_pods_left"] == 0
            and facts["daemonset_pods_kept"] == 1
            and facts["cordoned_now"] is True
        )
        if not exactly_once:
            not_once.append(f"{name}: {facts}")

    healthy_modified = sorted(
        n
        for n in healthy
        if storm.watch.records.get(n, NodeRecord()).modifications > 0
        or storm.nodes_now.get(n, {}).get("metadata", {}).get("resourceVersion")
        != storm.created_rv.get(n)
    )
    healthy_step_events = sorted(
        n for n in healthy if any(r in STEP_EVENTS for r in events_by_node.get(n, {}))
    )
    healthy_plans = sorted({p[2] for p in rollback_plans if p[2] not in failing})
    healthy_pods_evicted = sum(
        1
        for p in storm.pods_now
        if p["spec"].get("nodeName") not in failing and p["metadata"].get("deletionTimestamp")
    )
    n = len(storm.failing)
    expected = {
        "cordon": n,
        "taint": n,
        "drain": n,
        "evictions": 2 * n,
        "cleanup_runtime": n,
        "verify": n,
        "node_patches": 3 * n,
        "step_events": len(STEP_EVENTS) * n,
    }
    taken = {
        "cordon": done("cordon"),
        "taint": done("taint"),
        "drain": done("drain"),
        "evictions": count("create", "pods/eviction", 201),
        "cleanup_runtime": done("cleanup_runtime"),
        "verify": done("verify"),
        "node_patches": count("patch", "nodes"),
        "step_events": sum(
            c
            for node, reasons in events_by_node.items()
            if node in failing
            for r, c in reasons.items()
            if r in STEP_EVENTS
        ),
    }
    duplicates = (
        sum(max(0, taken[k] - expected[k]) for k in expected)
        + count("create", "events", 409)
        + count("create", "pods/eviction", 429)
        + sum(k - 1 for k in plans_by_node.values() if k > 1)
    )
    missed = sum(max(0, expected[k] - taken[k]) for k in expected) + n - len(storm.final_plans)
    rates = write_rates(storm.counter_samples, cfg.api_qps, cfg.api_burst)
    webhook = webhook_report(storm)
    paced = ok_latencies(storm.am["paced"]["controller"])
    p99 = percentile(paced, 0.99) * 1000 if paced else float("inf")

    def reasons_on(nodes: set[str], skip: tuple[str, ...] = ()) -> dict[str, int]:
        out: Counter[str] = Counter()
        for node, reasons in events_by_node.items():
            if node in nodes:
                out.update({r: c for r, c in reasons.items() if r not in skip})
        return dict(out)

    targets = {
        "no_duplicate_actions": duplicates == 0 and not not_once,
        "no_missed_actions": missed == 0,
        "no_healthy_node_touched": not healthy_modified
        and not healthy_step_events
        and not healthy_plans
        and healthy_pods_evicted == 0,
        "api_writes_within_limit": rates.get("token_bucket_bound_violations", 0) == 0
        and (rates.get("average_per_second") or 0.0) <= cfg.api_qps,
        "webhook_p99_under_50ms": p99 < cfg.p99_target_ms,
        "under_10_minutes": storm.wall_time < cfg.wall_target_s,
    }
    failing_since = [
        storm.failed_at[n] - storm.join_start for n in storm.failing if n in storm.failed_at
    ]
    return {
        "machine": {
            "cpus": os.cpu_count(),
            "memory_bytes": psutil.virtual_memory().total,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_average_1m_at_end": os.getloadavg()[0],
        },
        "config": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__},
        "targets_met": targets,
        "wall_time_s": storm.wall_time,
        "join": {
            "nodes": cfg.nodes,
            "old_nodes": cfg.old_nodes,
            "seconds": storm.join_end - storm.join_start,
            "max_schedule_lateness_s": storm.join_lateness,
            "objects_created": count("create", "nodes")
            + count("create", "leases")
            + count("create", "pods"),
            "create_errors": storm.create_errors[:10],
            "failing_nodes": len(storm.failed_at),
            "failed_together_at_s": min(failing_since, default=None),
            "last_failed_at_s": max(failing_since, default=None),
        },
        "leases": {
            "renewals_ok": storm.renewer.ok,
            "renewals_failed": storm.renewer.failed,
            "max_schedule_lateness_s": storm.renewer.max_lateness,
            "max_gap_between_renewals_s": storm.renewer.max_gap,
        },
        "plans": {
            "by_action_and_state": dict(Counter(f"{p[1]} {p[3]}" for p in storm.plans)),
            "refusal_reasons": dict(Counter(p[4] for p in storm.plans if p[3] == "refused")),
            "first_controller_write_s": min(
                (
                    r.first_write_at - storm.join_start
                    for node, r in storm.watch.records.items()
                    if node in failing and r.first_write_at is not None
                ),
                default=None,
            ),
            "all_finished_s": storm.plans_finished - storm.join_start,
        },
        "actions": {
            "expected": expected,
            "taken": taken,
            "other_outcomes": {
                f"{lab.get('action')} {lab.get('result')}": v
                for lab, v in families.get("nodesync_actions_total", [])
                if v and lab.get("result") != "done"
            },
            "duplicates": duplicates,
            "missed": missed,
            "event_create_conflicts": count("create", "events", 409),
            "eviction_refusals": count("create", "pods/eviction", 429),
            "failing_nodes_not_exactly_once": not_once[:10],
            "healthy_nodes_modified": healthy_modified[:10],
            "healthy_nodes_with_step_events": healthy_step_events[:10],
            "healthy_nodes_with_rollback_plans": healthy_plans[:10],
            "healthy_pods_evicted": healthy_pods_evicted,
            "events_on_healthy_nodes": reasons_on(healthy),
            "events_on_failing_nodes_besides_steps": reasons_on(failing, STEP_EVENTS),
            "guard_refusals": {
                lab.get("reason", ""): v
                for lab, v in families.get("nodesync_guard_refusals_total", [])
                if v
            },
            "agent_answers": storm.watch.answers_written,
            "agent_answer_conflicts": storm.watch.answer_conflicts,
            "agent_answer_failures": storm.watch.answer_failures,
            "watch_relists": storm.watch.relists,
        },
        "api_writes": {
            "limit": {"qps": cfg.api_qps, "burst": cfg.api_burst},
            "by_controller": {
                f"{verb} {resource} {code}": k
                for (verb, resource, code), k in sorted(counts.items())
                if verb in WRITE_VERBS and (verb, resource) not in OWN_WRITES
            },
            **rates,
        },
        "webhook_p99_ms": p99,
        "webhook": webhook,
        "controller": {
            "rss_bytes_before_storm": storm.rss_before,
            "rss_bytes": storm.rss,
            "peak_rss_bytes": storm.peak_rss,
            "max_sampled_rss_bytes": max((r for _, r in storm.rss_samples), default=None),
            "scrapes": summary_ms([b - a for a, b in storm.scrapes]),
            "exposition_bytes": storm.exposition_bytes,
            "exposition_samples": sum(len(v) for v in families.values()),
            "exposition_largest": dict(
                Counter({name: len(rows) for name, rows in families.items()}).most_common(8)
            ),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    add = parser.add_argument
    add("--nodes", type=int, default=1000, help="new nodes joining")
    add("--old-nodes", type=int, default=50, help="established nodes before the storm")
    add("--join-seconds", type=float, default=60.0, help="the new nodes join within this")
    add("--fail-every", type=int, default=20, help="every Nth new node fails (20: 5%%)")
    add("--fail-after", type=float, default=10.0, help="a node fails this long after joining")
    add(
        "--fail-together-at",
        type=float,
        default=40.0,
        help="...but not before this long into the join: those that joined earlier fail "
        "together then (0: each on its own)",
    )
    add("--alert-for", type=float, default=5.0, help="seconds a node fails before its alert")
    add("--lease-period", type=float, default=10.0, help="kubelet's lease renewal period")
    add("--scaleout-window", type=float, default=60.0)
    add("--node-monitor-grace-period", type=float, default=50.0)
    add("--api-qps", type=float, default=20.0)
    add("--api-burst", type=int, default=20)
    add("--max-concurrent-rollbacks", type=int, default=10)
    add("--cleanup-timeout", type=float, default=60.0)
    add("--agent-delay", type=float, default=1.0, help="the agents answer cleanups this late")
    add("--noise-none", type=int, default=120, help="firing alerts with nodesync_action=none")
    add("--noise-resolved", type=int, default=30, help="alerts that arrive already resolved")
    add("--group-wait", type=float, default=0.5, help="Alertmanager's group_wait (30s / 60)")
    add("--group-interval", type=float, default=1.0, help="its group_interval (1m / 60)")
    add("--peer-delay", type=float, default=0.25, help="the second replica's lag (15s / 60)")
    add("--in-flight", type=int, default=8, help="webhook requests in flight per receiver")
    add("--max-alerts", type=int, default=100, help="the receiver's max_alerts")
    add(
        "--scrape-interval",
        type=float,
        default=15.0,
        help="Prometheus scrapes the controller every this many seconds (0: never)",
    )
    add("--plans-deadline", type=float, default=300.0, help="seconds to wait for the plans")
    args = parser.parse_args(argv)
    cfg = Config(
        nodes=args.nodes,
        old_nodes=args.old_nodes,
        join_seconds=args.join_seconds,
        fail_every=args.fail_every,
        fail_after=args.fail_after,
        fail_together_at=args.fail_together_at,
        alert_for=args.alert_for,
        lease_period=args.lease_period,
        scaleout_window=args.scaleout_window,
        grace=args.node_monitor_grace_period,
        api_qps=args.api_qps,
        api_burst=args.api_burst,
        max_concurrent=args.max_concurrent_rollbacks,
        cleanup_timeout=args.cleanup_timeout,
        agent_delay=args.agent_delay,
        noise_none=args.noise_none,
        noise_resolved=args.noise_resolved,
        group_wait=args.group_wait,
        group_interval=args.group_interval,
        peer_delay=args.peer_delay,
        in_flight=args.in_flight,
        max_alerts=args.max_alerts,
        scrape_interval=args.scrape_interval,
        plans_deadline=args.plans_deadline,
    )
    load = os.getloadavg()[0]
    result = report(asyncio.run(run(cfg)))
    result["machine"]["load_average_1m_at_start"] = load
    result["command"] = " ".join([".venv/bin/python -m bench.storm", *(argv or sys.argv[1:])])
    print(json.dumps(result, indent=2))
    return 0 if all(result["targets_met"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
