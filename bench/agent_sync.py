"""Benchmark: one agent sync cycle and one scrape at 110 pods on a real containerd.

Measured in the same run, interleaved round by round so machine noise hits both alike:
- the bare CRI calls one cycle needs (Status, ListPodSandbox, ListContainers,
  ListContainerStats, ImageFsInfo, issued concurrently through the generated stubs, no
  conversion, no metrics);
- one full sync cycle of the agent (AgentSync.sync_once: the same calls through the CRI
  boundary, plus host and kubelet probes, phases, terminations);
- a scrape of /metrics from a real ``nodesync agent`` process watching the same containerd,
  and that process' peak RSS.

Run as root on a machine with containerd, runc and busybox-static (scripts/setup installs them):

    .venv/bin/python -m bench.agent_sync [--pods 110] [--rounds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Awaitable, Callable
from functools import partial

import grpc.aio
import psutil
from prometheus_client import CollectorRegistry

from exporter.agent.sync import AgentSync
from exporter.cri.client import CRIClient
from exporter.cri.pb import api_pb2, api_pb2_grpc
from exporter.cri.snapshot import RuntimeReader
from exporter.host.kubelet import KubeletProbe
from exporter.host.probes import read_host
from exporter.metrics.cri_requests import CRIRequestMetrics, SyncMetrics
from nodesync_sim.containerd import LocalContainerd
from nodesync_sim.runtime_pods import ContainerSpec, run_pod


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _create_pods(endpoint: str, count: int, parallel: int = 4) -> None:
    gate = asyncio.Semaphore(parallel)

    async def one(i: int) -> None:
        async with gate:
            await run_pod(
                endpoint,
                f"bench-{i}",
                "bench",
                str(uuid.uuid4()),
                [ContainerSpec("app", ["/bin/sleep", "inf"])],
            )

    await asyncio.gather(*(one(i) for i in range(count)))


async def _timed(fn: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await fn()
    return time.perf_counter() - started


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": statistics.median(ordered) * 1000,
        "p90_ms": ordered[int(0.9 * (len(ordered) - 1))] * 1000,
        "min_ms": ordered[0] * 1000,
    }


def _scrape(port: int) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return bytes(response.read())


def _peak_rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return psutil.Process(pid).memory_info().rss


async def run(pods: int, rounds: int) -> dict[str, object]:
    containerd = LocalContainerd()
    await asyncio.to_thread(containerd.start)
    agent: subprocess.Popen[bytes] | None = None
    try:
        await _create_pods(containerd.endpoint, pods)
        channel = grpc.aio.insecure_channel(containerd.endpoint)
        runtime = api_pb2_grpc.RuntimeServiceStub(channel)
        images = api_pb2_grpc.ImageServiceStub(channel)

        async def bare() -> None:
            await asyncio.gather(
                runtime.Status(api_pb2.StatusRequest(), timeout=5),
                runtime.ListPodSandbox(api_pb2.ListPodSandboxRequest(), timeout=5),
                runtime.ListContainers(api_pb2.ListContainersRequest(), timeout=5),
                runtime.ListContainerStats(api_pb2.ListContainerStatsRequest(), timeout=5),
                images.ImageFsInfo(api_pb2.ImageFsInfoRequest(), timeout=5),
            )

        registry = CollectorRegistry()
        client = CRIClient(containerd.endpoint, timeout=5, observer=CRIRequestMetrics(registry))
        kubelet_root = tempfile.mkdtemp(prefix="nodesync-bench-kubelet-")
        kubelet = KubeletProbe(f"http://127.0.0.1:{_free_port()}/healthz", kubelet_root, 1.0)
        sync = AgentSync(
            RuntimeReader(client),
            kubelet,
            partial(read_host, str(containerd.root), kubelet_root),
            SyncMetrics(registry),
        )
        first = await sync.sync_once()
        assert first.runtime is not None, "runtime not reachable"
        assert len(first.runtime.sandboxes) == pods, len(first.runtime.sandboxes)
        await bare()  # warm both paths

        bare_times: list[float] = []
        cycle_times: list[float] = []
        for _ in range(rounds):
            bare_times.append(await _timed(bare))
            cycle_times.append(await _timed(sync.sync_once))

        port = _free_port()
        agent = subprocess.Popen(  # noqa: ASYNC220 - returns at once; a plain handle is wanted
            [
                sys.executable,
                "-m",
                "exporter",
                "agent",
                "--cri-endpoint",
                containerd.endpoint,
                "--web.listen-address",
                f"127.0.0.1:{port}",
                "--sync-period",
                "1s",
                "--containerd-root",
                str(containerd.root),
                "--kubelet-root-dir",
                kubelet_root,
                "--log-level",
                "warning",
            ]
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                if b'nodesync_pods{phase="Running",source="runtime"} %d' % pods in _scrape(port):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("agent did not report the pods in time")
            await asyncio.sleep(0.1)
        scrape_times: list[float] = []
        body = b""
        for _ in range(rounds * 3):
            started = time.perf_counter()
            body = await asyncio.to_thread(_scrape, port)
            scrape_times.append(time.perf_counter() - started)
        # Let the agent run a few more cycles so the peak covers steady state, not just start.
        await asyncio.sleep(3)
        peak_rss = _peak_rss_bytes(agent.pid)
        rss = psutil.Process(agent.pid).memory_info().rss

        await kubelet.close()
        await client.close()
        await channel.close()
        os.rmdir(kubelet_root)
        bare_s = _summary(bare_times)
        cycle_s = _summary(cycle_times)
        return {
            "machine": {
                "cpus": os.cpu_count(),
                "memory_bytes": psutil.virtual_memory().total,
                "python": platform.python_version(),
                "platform": platform.platform(),
            },
            "pods": pods,
            "rounds": rounds,
            "bare_cri_calls": bare_s,
            "sync_cycle": cycle_s,
            "cycle_over_bare_median": cycle_s["median_ms"] / bare_s["median_ms"],
            "scrape": _summary(scrape_times),
            "exposition_bytes": len(body),
            "agent_rss_bytes": rss,
            "agent_peak_rss_bytes": peak_rss,
        }
    finally:
        if agent is not None:
            agent.terminate()
            agent.wait(timeout=10)
        await asyncio.to_thread(containerd.cleanup)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--pods", type=int, default=110)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args(argv)
    result = asyncio.run(run(args.pods, args.rounds))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
