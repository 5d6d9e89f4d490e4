"""Benchmark: the controller syncing 1000 Nodes and Leases, then following lease renewals.

Everything runs as separate processes talking HTTP on loopback, as in a cluster:
- ``nodesync sim apiserver`` (the test API server), populated over HTTP with Nodes (conditions,
  capacity, addresses, node info) and one Lease per node in kube-node-lease (renewTime: now);
- ``nodesync controller`` against it: process start until /readyz answers 200 (Nodes and Leases
  listed), and /metrics then shows every node;
- lease renewals as kubelet sends them (a merge patch of spec.renewTime, RFC 3339 with
  microseconds), round-robin over the leases at a fixed rate on a monotonic schedule, while
  /metrics is scraped about once a second. Measured: the achieved rate; freshness (when a scrape
  is sent, the age of the newest renewTime it shows); propagation lag (when a scrape is sent, how
  long ago the API server acknowledged the oldest renewal the scrape does not show yet; 0 when
  it shows them all); the catch-up after the last renewal until every lease's last written
  renewTime is in /metrics (all of them, exactly: no event is lost); the controller's CPU use
  during the renewals (also without the scrapes' share, measured at rest), its RSS and peak RSS
  (VmHWM) at the end; scrape latency during the renewals and at rest.

No root needed:

    .venv/bin/python -m bench.controller_sync [--nodes 1000] [--seconds 30] [--rate 100]

The helpers here (starting the test API server, pacing, summaries) are shared with
bench.agent_node_objects.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from bench.common import free_port, percentile
from exporter.kube.convert import timestamp
from exporter.model.rfc3339 import format_micro_time, format_time

LEASE_NAMESPACE = "kube-node-lease"
RENEW_FAMILY = b"nodesync_node_lease_renew_timestamp_seconds{"
JSONObject = dict[str, Any]


# ---------------------------------------------------------------- shared helpers


def summary_ms(samples: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99/max of durations in seconds, in milliseconds."""
    if not samples:
        return {}
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


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def machine() -> dict[str, object]:
    return {
        "cpus": os.cpu_count(),
        "memory_bytes": psutil.virtual_memory().total,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_1m_at_start": os.getloadavg()[0],
    }


def stop_process(proc: subprocess.Popen[bytes] | None, timeout: float = 10.0) -> None:
    """Terminate one process we started, by its handle; kill it if it does not stop in time."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def nodesync(
    *args: str, log: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``nodesync ARGS`` as a child process, its output going to ``log``."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "exporter", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )


@dataclass
class SimAPIServer:
    """``nodesync sim apiserver`` in a child process, and an HTTP session authenticated to it."""

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

    async def start(self, wait: float = 30.0) -> None:
        self.proc = nodesync(
            "sim",
            "apiserver",
            "--web.listen-address",
            f"127.0.0.1:{self.port}",
            "--kubeconfig",
            str(self.kubeconfig),
            "--log-level",
            "warning",
            log=self.log,
            env={"NODESYNC_SIM_TOKEN": self.token},
        )
        self.session = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {self.token}"},
            connector=aiohttp.TCPConnector(limit=64),
            timeout=aiohttp.ClientTimeout(total=30),
        )
        deadline = time.monotonic() + wait
        # The kubeconfig is written once the server listens.
        while not self.kubeconfig.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"test API server did not start:\n{log_tail(self.log)}")
            await asyncio.sleep(0.05)
        async with self.session.get(f"{self.url}/api") as response:
            response.raise_for_status()

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
        stop_process(self.proc)

    async def request(
        self, method: str, path: str, body: object, content_type: str = "application/json"
    ) -> JSONObject:
        assert self.session is not None
        async with self.session.request(
            method,
            f"{self.url}{path}",
            data=json.dumps(body),
            headers={"Content-Type": content_type},
        ) as response:
            payload = await response.json(content_type=None)
            if response.status >= 300:
                raise RuntimeError(f"{method} {path}: {response.status} {payload}")
            return dict(payload)

    async def create(self, path: str, body: JSONObject) -> JSONObject:
        return await self.request("POST", path, body)

    async def merge_patch(self, path: str, body: JSONObject) -> JSONObject:
        return await self.request("PATCH", path, body, "application/merge-patch+json")


async def bounded(coros: Sequence[Any], parallel: int) -> list[Any]:
    """Await the coroutines with at most ``parallel`` running at a time, results in order."""
    gate = asyncio.Semaphore(parallel)

    async def one(coro: Any) -> Any:
        async with gate:
            return await coro

    return list(await asyncio.gather(*(one(c) for c in coros)))


async def http_get(
    session: aiohttp.ClientSession, url: str, deadline: float = 5.0
) -> tuple[int, bytes]:
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=deadline)) as response:
        return response.status, await response.read()


# ---------------------------------------------------------------- Nodes and Leases


def node_body(name: str, index: int, now: float) -> JSONObject:
    """A Node as kubelet registers it (conditions, capacity, addresses, node info; no images)."""
    stamp = format_time(now)

    def condition(type_: str, status: str, reason: str, message: str) -> JSONObject:
        return {
            "type": type_,
            "status": status,
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
            "reason": reason,
            "message": message,
        }

    resources = {
        "cpu": "8",
        "ephemeral-storage": "101430960Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": "32827480Ki",
        "pods": "110",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "m5.2xlarge",
                "topology.kubernetes.io/region": "eu-west-1",
                "topology.kubernetes.io/zone": f"eu-west-1{'abc'[index % 3]}",
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {
            "podCIDR": f"10.{64 + index // 256}.{index % 256}.0/24",
            "podCIDRs": [f"10.{64 + index // 256}.{index % 256}.0/24"],
            "providerID": f"aws:///eu-west-1a/i-{index:017x}",
        },
        "status": {
            "conditions": [
                condition(
                    "MemoryPressure",
                    "False",
                    "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available",
                ),
                condition(
                    "DiskPressure",
                    "False",
                    "KubeletHasNoDiskPressure",
                    "kubelet has no disk pressure",
                ),
                condition(
                    "PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID"
                ),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "capacity": resources,
            "allocatable": {**resources, "cpu": "7910m", "memory": "31676504Ki"},
            "addresses": [
                {"type": "InternalIP", "address": f"10.0.{index // 256}.{index % 256}"},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": f"{index:032x}",
                "systemUUID": f"ec2{index:05x}-0000-0000-0000-000000000000",
                "bootID": f"{index:08x}-0000-0000-0000-000000000000",
                "kernelVersion": "6.1.0-18-cloud-amd64",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "containerRuntimeVersion": "containerd://1.6.20",
                "kubeletVersion": "v1.30.4",
                "kubeProxyVersion": "v1.30.4",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def lease_body(node: JSONObject, renew_time: str) -> JSONObject:
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
            "renewTime": renew_time,
        },
    }


def lease_path(name: str = "") -> str:
    base = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases"
    return f"{base}/{name}" if name else base


async def populate_nodes(api: SimAPIServer, names: Sequence[str]) -> dict[str, float]:
    """Create the Nodes, then their Leases; the renew timestamps written, by lease name."""
    now = time.time()
    nodes = await bounded(
        [api.create("/api/v1/nodes", node_body(n, i, now)) for i, n in enumerate(names)], 32
    )
    renew = {n: format_micro_time(time.time()) for n in names}
    await bounded(
        [api.create(lease_path(), lease_body(nd, renew[nd["metadata"]["name"]])) for nd in nodes],
        32,
    )
    return {n: _seconds(v) for n, v in renew.items()}


def _seconds(rfc3339_text: str) -> float:
    value = timestamp(rfc3339_text)  # the same conversion the controller applies
    assert value is not None, rfc3339_text
    return value


def renew_timestamps(body: bytes) -> dict[str, float]:
    """nodesync_node_lease_renew_timestamp_seconds by node, from a text exposition."""
    found: dict[str, float] = {}
    for line in body.splitlines():
        if line.startswith(RENEW_FAMILY):
            labels, _, value = line.rpartition(b"} ")
            node = labels.split(b'node="', 1)[1].split(b'"', 1)[0]
            found[node.decode()] = float(value)
    return found


def gauge(body: bytes, sample: bytes) -> float | None:
    """The value of one sample line (name with its labels, exactly as rendered)."""
    prefix = sample + b" "
    for line in body.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix) :])
    return None


# ---------------------------------------------------------------- the benchmark


@dataclass
class Renewals:
    issued: int = 0
    ok: int = 0
    failed: int = 0
    latencies: list[float] = field(default_factory=list)
    max_lateness: float = 0.0  # how far behind its schedule a renewal was sent
    last_done: float = 0.0  # monotonic time the last renewal was answered


async def renew_leases(
    api: SimAPIServer,
    names: Sequence[str],
    written: dict[str, float],
    acked: dict[str, float],
    seconds: float,
    rate: float,
) -> Renewals:
    """PATCH spec.renewTime round-robin at ``rate`` per second for ``seconds``, on a monotonic
    schedule (a late renewal does not shift the ones after it). Renewals of one lease are
    serialised, so the last one written is the last one the server applied. ``written`` and
    ``acked`` get each lease's last renewTime and when the server acknowledged it."""
    result = Renewals()
    locks = {n: asyncio.Lock() for n in names}
    inflight: set[asyncio.Task[None]] = set()

    async def renew(name: str) -> None:
        async with locks[name]:
            text = format_micro_time(time.time())
            started = time.perf_counter()
            try:
                await api.merge_patch(lease_path(name), {"spec": {"renewTime": text}})
            except (aiohttp.ClientError, RuntimeError, TimeoutError):
                result.failed += 1
                return
            result.latencies.append(time.perf_counter() - started)
            result.ok += 1
            result.last_done = acked[name] = time.monotonic()
            written[name] = _seconds(text)

    total = int(seconds * rate)
    start = time.monotonic()
    for k in range(total):
        due = start + k / rate
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        result.max_lateness = max(result.max_lateness, time.monotonic() - due)
        task = asyncio.create_task(renew(names[k % len(names)]))
        inflight.add(task)
        task.add_done_callback(inflight.discard)
        result.issued += 1
    await asyncio.gather(*inflight)
    return result


async def run(nodes: int, seconds: float, rate: float, rest_scrapes: int) -> dict[str, object]:
    workdir = Path(tempfile.mkdtemp(prefix="nodesync-bench-"))
    api = SimAPIServer(workdir)
    controller: subprocess.Popen[bytes] | None = None
    controller_log = workdir / "controller.log"
    try:
        await api.start()
        assert api.proc is not None
        names = [f"node-{i:04d}" for i in range(nodes)]
        started = time.perf_counter()
        written = await populate_nodes(api, names)
        populate_s = time.perf_counter() - started

        port = free_port()
        base = f"http://127.0.0.1:{port}"
        started = time.monotonic()
        controller = nodesync(
            "controller",
            "--kubeconfig",
            str(api.kubeconfig),
            "--web.listen-address",
            f"127.0.0.1:{port}",
            "--log-level",
            "warning",
            log=controller_log,
        )
        listening_s: float | None = None
        ready_s: float | None = None
        async with aiohttp.ClientSession() as http:
            while ready_s is None:
                try:
                    status, _ = await http_get(http, f"{base}/readyz", deadline=1)
                except (aiohttp.ClientError, TimeoutError):
                    status = 0
                now = time.monotonic()
                if status and listening_s is None:
                    listening_s = now - started
                if status == 200:
                    ready_s = now - started
                elif controller.poll() is not None or now - started > 60:
                    raise RuntimeError(f"controller not ready:\n{log_tail(controller_log)}")
                else:
                    await asyncio.sleep(0.01)

            _, body = await http_get(http, f"{base}/metrics")
            assert gauge(body, b"nodesync_nodes") == nodes, "nodesync_nodes is not the node count"
            assert renew_timestamps(body) == written, "the listed renew times are not the written"
            rss_synced = psutil.Process(controller.pid).memory_info().rss

            # Renewals, with a scrape about once a second (at a random point of each second,
            # so the scrapes do not keep the same phase as the renewals).
            freshness: list[float] = []
            lag: list[float] = []
            unseen: list[int] = []
            busy_scrapes: list[float] = []
            acked: dict[str, float] = {}  # monotonic time each lease's last renewal was answered
            renewing = asyncio.Event()

            async def scrape_while_renewing() -> None:
                second = time.monotonic()
                while True:
                    second += 1.0
                    due = second + random.random()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(renewing.wait(), max(0.0, due - time.monotonic()))
                    if renewing.is_set():
                        return
                    sent, sent_mono = time.time(), time.monotonic()
                    expected = dict(written)  # what the API server had acknowledged by now
                    t0 = time.perf_counter()
                    _, text = await http_get(http, f"{base}/metrics")
                    busy_scrapes.append(time.perf_counter() - t0)
                    served = renew_timestamps(text)
                    freshness.append(sent - max(served.values()))
                    behind = [n for n, v in expected.items() if served.get(n, 0.0) < v]
                    unseen.append(len(behind))
                    lag.append(
                        max((sent_mono - acked.get(n, sent_mono) for n in behind), default=0.0)
                    )

            cpu_before = cpu_seconds(controller.pid)
            api_cpu_before = cpu_seconds(api.proc.pid)
            wall_before = time.monotonic()
            scraper = asyncio.create_task(scrape_while_renewing())
            renewals = await renew_leases(api, names, written, acked, seconds, rate)
            renewing.set()
            scraper.cancel()  # a scrape still running would delay the catch-up's first one
            await asyncio.gather(scraper, return_exceptions=True)
            wall = time.monotonic() - wall_before
            cpu = cpu_seconds(controller.pid) - cpu_before
            api_cpu = cpu_seconds(api.proc.pid) - api_cpu_before
            renew_window = renewals.last_done - wall_before

            # Catch-up: until every lease's last written renewTime is served, exactly.
            missing = len(written)
            catch_up_s: float | None = None
            while time.monotonic() - renewals.last_done < 60:
                sent_mono = time.monotonic()
                _, body = await http_get(http, f"{base}/metrics")
                served = renew_timestamps(body)
                missing = sum(1 for n, v in written.items() if served.get(n) != v)
                if missing == 0:
                    catch_up_s = max(0.0, sent_mono - renewals.last_done)
                    break
                await asyncio.sleep(0.02)
            if catch_up_s is None:
                raise AssertionError(f"{missing} leases never showed their last renewTime")

            rest: list[float] = []
            rest_cpu_before = cpu_seconds(controller.pid)
            for _ in range(rest_scrapes):
                t0 = time.perf_counter()
                _, body = await http_get(http, f"{base}/metrics")
                rest.append(time.perf_counter() - t0)
            cpu_per_scrape = (cpu_seconds(controller.pid) - rest_cpu_before) / max(1, rest_scrapes)

        process = psutil.Process(controller.pid)
        return {
            "machine": machine(),
            "nodes": nodes,
            "populate": {
                "seconds": populate_s,
                "objects": 2 * nodes,
                "objects_per_second": 2 * nodes / populate_s,
            },
            "controller_start": {
                "listening_s": listening_s,
                "synced_s": ready_s,
                "rss_bytes_at_sync": rss_synced,
            },
            "renewals": {
                "seconds": seconds,
                "target_rate": rate,
                "issued": renewals.issued,
                "ok": renewals.ok,
                "failed": renewals.failed,
                "achieved_rate": renewals.ok / renew_window,
                "max_send_lateness_ms": renewals.max_lateness * 1000,
                "patch_latency": summary_ms(renewals.latencies),
            },
            "freshness": summary_ms(freshness),
            "propagation_lag": summary_ms(lag),
            "unseen_acknowledged_renewals_at_scrape": {
                "p50": statistics.median(unseen) if unseen else None,
                "max": max(unseen, default=None),
            },
            "catch_up_s": catch_up_s,
            "leases_checked": len(written),
            "leases_missed": missing,
            "controller_cpu_cores_during_renewals": cpu / wall,
            "controller_cpu_seconds_per_scrape": cpu_per_scrape,
            "controller_cpu_cores_during_renewals_without_scrapes": max(
                0.0, (cpu - cpu_per_scrape * len(busy_scrapes)) / wall
            ),
            "apiserver_cpu_cores_during_renewals": api_cpu / wall,
            "scrape_during_renewals": summary_ms(busy_scrapes),
            "scrape_at_rest": summary_ms(rest),
            "exposition_bytes": len(body),
            "exposition_samples": sum(1 for ln in body.splitlines() if not ln.startswith(b"#")),
            "controller_rss_bytes": process.memory_info().rss,
            "controller_peak_rss_bytes": peak_rss_bytes(controller.pid),
        }
    finally:
        stop_process(controller)
        await api.close()
        remove_tree(workdir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=30.0, help="how long leases are renewed")
    parser.add_argument("--rate", type=float, default=100.0, help="lease renewals per second")
    parser.add_argument("--rest-scrapes", type=int, default=100, help="scrapes timed at rest")
    args = parser.parse_args(argv)
    result = asyncio.run(run(args.nodes, args.seconds, args.rate, args.rest_scrapes))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
