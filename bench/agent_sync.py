"""Benchmark: one agent sync cycle, its floors, and one scrape at 110 pods on a real containerd.

Measured in the same run, interleaved round by round (in a random order within each round) so
machine noise hits all alike; the state calls' rounds first, then the stats calls' (whose
aftermath in containerd's shims would otherwise land on the state calls):
- **bare state calls**: the calls one sync cycle makes (Status, ListPodSandbox, ListContainers,
  ImageFsInfo), issued concurrently through the generated stubs, no conversion, no metrics:
  the floor a cycle cannot go below;
- **sync cycle**: the agent's ``AgentSync.sync_runtime`` (the same calls through the CRI
  boundary, phases, terminations, publishing the state), and its ratio to the bare state calls;
  of it, **runtime read** (``RuntimeReader.read`` alone);
- **node probe**: ``AgentSync.probe_node`` (host read in a thread, kubelet healthz and pod
  directories), which runs on a schedule of its own of the same period; and **whole cycle**
  (``AgentSync.sync_once``: the probe, then the cycle, as the agent's first cycle does), with its
  ratio to the bare state calls too;
- **bare stats call**: ListContainerStats alone, through the stubs, and **stats refresh**: the
  agent's ``AgentSync.refresh_stats`` (once per ``--stats.period``, not per cycle);
- containerd's and its shims' CPU per call of each kind (user + system, over the rounds);
- a scrape of /metrics from a real ``nodesync agent`` process watching the same containerd
  (no API view: see bench.agent_node_objects for that), and that process' peak RSS.

Run as root on a machine with containerd, runc and busybox-static (scripts/setup installs them):

    .venv/bin/python -m bench.agent_sync [--pods 110] [--rounds 100]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import grpc.aio
import psutil
from prometheus_client import CollectorRegistry

from bench.harness.processes import Children, python_child, start_nodesync
from bench.harness.readiness import wait_port, wait_until
from bench.harness.report import command, machine, run_main
from bench.harness.samplers import peak_rss_bytes, rss_bytes
from bench.harness.stats import percentile
from exporter.agent.sync import AgentSync
from exporter.cri.client import CRIClient
from exporter.cri.pb import api_pb2, api_pb2_grpc
from exporter.cri.snapshot import RuntimeReader
from exporter.host.kubelet import KubeletProbe
from exporter.host.probes import read_host
from exporter.metrics.cri_requests import CRIRequestMetrics, SyncMetrics
from nodesync_sim.real.containerd import LocalContainerd
from nodesync_sim.real.process import ChildProcess, free_port
from nodesync_sim.real.runtime_pods import ContainerSpec, run_pod


async def create_pods(endpoint: str, count: int, parallel: int = 4) -> None:
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


class RuntimeCPU:
    """CPU seconds (user + system) of containerd and every process under it (the shims and
    what they run), read from /proc before and after each measured call."""

    def __init__(self, pid: int) -> None:
        self._root = psutil.Process(pid)
        self.spent: dict[str, float] = {}

    def _now(self) -> float:
        total = 0.0
        for process in [self._root, *self._root.children(recursive=True)]:
            try:
                times = process.cpu_times()
            except psutil.Error:
                continue
            total += times.user + times.system
        return total

    async def timed(self, kind: str, fn: Callable[[], Awaitable[object]]) -> float:
        before = self._now()
        took = await _timed(fn)
        self.spent[kind] = self.spent.get(kind, 0.0) + self._now() - before
        return took


def _summary(samples: list[float]) -> dict[str, float]:
    return {
        "median_ms": statistics.median(samples) * 1000,
        "p90_ms": percentile(samples, 0.9) * 1000,
        "min_ms": min(samples) * 1000,
    }


def scrape(port: int) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return bytes(response.read())


async def reports_pods(port: int, pods: int) -> bool:
    """Whether the agent's /metrics shows ``pods`` pods Running (from the runtime)."""
    try:
        body = await asyncio.to_thread(scrape, port)
    except OSError:
        return False
    return b'nodesync_pods{phase="Running",source="runtime"} %d' % pods in body


def start_agent(
    containerd: LocalContainerd,
    port: int,
    kubelet_root: Path,
    healthz: str,
    log: Path,
    *,
    sync_period: str = "1s",
    extra: tuple[str, ...] = (),
) -> ChildProcess:
    """A real ``nodesync agent`` on the same containerd, without an API view."""
    return start_nodesync(
        "agent",
        *extra,
        "--cri.endpoint",
        containerd.endpoint,
        "--web.listen-address",
        f"127.0.0.1:{port}",
        "--sync.period",
        sync_period,
        "--containerd.root",
        str(containerd.root),
        "--kubelet.root-dir",
        str(kubelet_root),
        "--kubelet.healthz-url",
        healthz,
        "--log.level",
        "warning",
        log=log,
    )


async def run(pods: int, rounds: int, argv: list[str] | None = None) -> dict[str, object]:
    where = machine()
    workdir = Path(tempfile.mkdtemp(prefix="nodesync-bench-"))
    kubelet_root = workdir / "kubelet"
    kubelet_root.mkdir()
    containerd = LocalContainerd()
    await asyncio.to_thread(containerd.start)
    agent: ChildProcess | None = None
    children = Children()
    try:
        kubelet_port = free_port()
        stand_in = children.start(
            python_child(
                "bench.kubelet_healthz", "--port", str(kubelet_port), log=workdir / "kubelet.log"
            )
        )
        await wait_port(stand_in, kubelet_port, within=30)
        healthz = f"http://127.0.0.1:{kubelet_port}/healthz"
        await create_pods(containerd.endpoint, pods)
        channel = grpc.aio.insecure_channel(containerd.endpoint)
        runtime = api_pb2_grpc.RuntimeServiceStub(channel)
        images = api_pb2_grpc.ImageServiceStub(channel)

        async def bare_state() -> None:
            await asyncio.gather(
                runtime.Status(api_pb2.StatusRequest(), timeout=5),
                runtime.ListPodSandbox(api_pb2.ListPodSandboxRequest(), timeout=5),
                runtime.ListContainers(api_pb2.ListContainersRequest(), timeout=5),
                images.ImageFsInfo(api_pb2.ImageFsInfoRequest(), timeout=5),
            )

        async def bare_stats() -> None:
            await runtime.ListContainerStats(api_pb2.ListContainerStatsRequest(), timeout=5)

        registry = CollectorRegistry()
        client = CRIClient(containerd.endpoint, timeout=5, observer=CRIRequestMetrics(registry))
        kubelet = KubeletProbe(healthz, str(kubelet_root), 1.0)
        reader = RuntimeReader(client)
        sync = AgentSync(
            reader,
            kubelet,
            partial(read_host, str(containerd.root), str(kubelet_root)),
            SyncMetrics(registry),
            stats=reader,
        )
        first = await sync.sync_once()
        assert first.runtime is not None, "runtime not reachable"
        assert first.kubelet is not None, "no kubelet snapshot"
        assert first.kubelet.healthy, "the kubelet stand-in is not healthy"
        assert len(first.runtime.sandboxes) == pods, len(first.runtime.sandboxes)
        stats = await sync.refresh_stats()
        assert stats is not None, "no stats"
        assert len(stats.containers) == pods, len(stats.containers)
        await bare_state()  # warm every path
        await bare_stats()

        assert containerd.pid is not None, "containerd is not running"
        cpu = RuntimeCPU(containerd.pid)
        order = random.Random(14)
        kinds = ("bare_state", "cycle", "runtime_read", "node_probe", "whole_cycle")
        times: dict[str, list[float]] = {k: [] for k in (*kinds, "bare_stats", "stats_refresh")}
        state_pair: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            ("bare_state", bare_state),
            ("cycle", sync.sync_runtime),
            ("runtime_read", reader.read),
            ("node_probe", sync.probe_node),
            ("whole_cycle", sync.sync_once),
        ]
        stats_pair: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            ("bare_stats", bare_stats),
            ("stats_refresh", sync.refresh_stats),
        ]
        # The state kinds first, then the stats kinds: a stats call leaves containerd and its
        # 110 shims busy for a while after it returned, which would land on whichever state
        # kind came next in its round.
        for group in (state_pair, stats_pair):
            for _ in range(rounds):
                for kind, fn in order.sample(group, len(group)):
                    times[kind].append(await cpu.timed(kind, fn))

        port = free_port()
        agent = start_agent(containerd, port, kubelet_root, healthz, workdir / "agent.log")
        await wait_until(
            agent,
            partial(reports_pods, port, pods),
            within=30,
            what=f"reporting {pods} pods",
            interval=0.1,
        )
        scrape_times: list[float] = []
        body = b""
        for _ in range(rounds * 3):
            started = time.perf_counter()
            body = await asyncio.to_thread(scrape, port)
            scrape_times.append(time.perf_counter() - started)
        # Let the agent run a few more cycles so the peak covers steady state, not just start.
        await asyncio.sleep(3)
        assert agent.pid is not None, "the agent exited"
        peak_rss = peak_rss_bytes(agent.pid)
        rss = rss_bytes(agent.pid)

        await kubelet.close()
        await client.close()
        await channel.close(None)
        summary = {kind: _summary(samples) for kind, samples in times.items()}
        paired = [c / b for c, b in zip(times["cycle"], times["bare_state"], strict=True)]
        return {
            "machine": where,
            "command": command("bench.agent_sync", argv),
            "pods": pods,
            "rounds": rounds,
            "bare_state_calls": summary["bare_state"],
            "sync_cycle": summary["cycle"],
            "runtime_read": summary["runtime_read"],
            "node_probe": summary["node_probe"],
            "whole_cycle": summary["whole_cycle"],
            "whole_cycle_over_bare_state_median": summary["whole_cycle"]["median_ms"]
            / summary["bare_state"]["median_ms"],
            "cycle_over_bare_state_median": summary["cycle"]["median_ms"]
            / summary["bare_state"]["median_ms"],
            "cycle_over_bare_state_paired_median": statistics.median(paired),
            "bare_stats_call": summary["bare_stats"],
            "stats_refresh": summary["stats_refresh"],
            "stats_refresh_over_bare_stats_median": summary["stats_refresh"]["median_ms"]
            / summary["bare_stats"]["median_ms"],
            "runtime_cpu_ms_per_call": {
                kind: cpu.spent.get(kind, 0.0) / rounds * 1000 for kind in times
            },
            "load_average_1m_at_end": os.getloadavg()[0],
            "scrape": _summary(scrape_times),
            "exposition_bytes": len(body),
            "agent_rss_bytes": rss,
            "agent_peak_rss_bytes": peak_rss,
        }
    finally:
        if agent is not None:
            agent.stop()
        children.stop_all()
        await asyncio.to_thread(containerd.cleanup)
        shutil.rmtree(workdir, ignore_errors=True)


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pods", type=int, default=110)
    parser.add_argument("--rounds", type=int, default=100)


def main(argv: list[str] | None = None) -> int:
    return run_main(__doc__, argv, _options, lambda args: run(args.pods, args.rounds, argv))


if __name__ == "__main__":
    raise SystemExit(main())
