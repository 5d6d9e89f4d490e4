"""Benchmark: what deciding about one new alert costs the webhook's acknowledgements, at 5000 nodes.

Alertmanager re-sends a whole group with every notification: most deliveries carry only alerts
the journal knows (repeats, answered as duplicates), some carry one new alert, which the
executor decides at once (plan, guards, a dry-run decision in the journal). Deciding must not
cost the cluster: it reads one node, its wave and the guards' counts, not every node.

Every part is its own process on loopback, as in a cluster:

- ``nodesync sim apiserver`` with ``--nodes`` Nodes as kubelet registers them and their Leases
  (renewed ``--renew-rate`` times a second during the run, round-robin, as kubelets would);
- ``nodesync controller`` with the webhook and the executor, a fresh journal, in
  ``--rollback.dry-run`` (nothing is written to the API server) and with
  ``--guard.max-rollbacks 0``: every
  new alert goes through the planner and every guard (never-touch, scale-out window,
  correlated failure, the wave's budget) and is refused by the last one, the absolute budget,
  with its decision saved in the journal. (Plans would pile up as dry-run decisions that every
  later pass reads back from the journal: a cost of the dry run, not of the decision.)
- the floor: a bare aiohttp handler (``bench.storm_floor``: read, parse, 200) gets every
  delivery too, at the same moment as the controller.

Deliveries of ``--group`` alerts (``NodesyncNewNodeNotReady``, ``rollback_node``, one group, as
Alertmanager 0.25 sends them) go one after the other, each sent when the previous one was
answered, so work a delivery leaves behind on the controller's event loop delays the next one:

- ``repeat``: the same alerts every time, all known (the floor of this benchmark);
- ``new``: the same alerts and one new one (a new node each time);

each with no scrape and with ``/metrics`` scraped every second, in blocks of
``--block-seconds`` interleaved round by round (repeat, new, repeat scraped, new scraped, ...,
``--rounds`` times), so that a change of the machine's load hits every mode alike. After each
block the benchmark waits until the controller decided every new alert (its journal gauges),
so a block never pays for the one before. Measured: acknowledgement latency per mode (p50,
p90, p99, max) and the ratio of the p99s (target: ``new`` at most 2x ``repeat``, scraped or
not), the floor's latency in the same run, the controller's CPU per delivery and its peak RSS.

No root needed:

    .venv/bin/python -m bench.controller_decisions [--nodes 5000] [--rounds 4] [--block-seconds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import secrets
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.controller_sync import http_get, populate_nodes
from bench.harness.apiserver import SimAPIServer
from bench.harness.exposition import samples
from bench.harness.objects import lease_path
from bench.harness.processes import Children, nodesync_child, python_child, run_main
from bench.harness.readiness import wait_http, wait_port
from bench.harness.report import command, machine
from bench.harness.samplers import cpu_seconds, peak_rss_bytes
from bench.harness.stats import summary_ms
from bench.harness.webhook import Hook, alert, delivery
from exporter.model.rfc3339 import format_micro_time
from exporter.tasks import wait_set
from nodesync_sim.real.process import ChildProcess, free_port

MODES = ("repeat", "new", "repeat_scraped", "new_scraped")


@dataclass
class Run:
    acks: dict[str, list[float]] = field(default_factory=lambda: {m: [] for m in MODES})
    floor: dict[str, list[float]] = field(default_factory=lambda: {m: [] for m in MODES})
    scrapes: list[float] = field(default_factory=list)
    failed: int = 0
    cpu: float = 0.0
    deliveries: int = 0


async def renew(api: SimAPIServer, names: Sequence[str], rate: float, stop: asyncio.Event) -> int:
    """Renew the Leases round-robin at ``rate`` per second until ``stop``; how many."""
    if rate <= 0:
        return 0
    done = 0
    start = time.monotonic()
    inflight: set[asyncio.Task[Any]] = set()
    while not stop.is_set():
        due = start + done / rate
        delay = due - time.monotonic()
        if delay > 0:
            await wait_set(stop, delay)
            continue
        name = names[done % len(names)]
        body = {"spec": {"renewTime": format_micro_time(time.time())}}
        task = asyncio.create_task(api.merge_patch(lease_path(name), body))
        inflight.add(task)
        task.add_done_callback(inflight.discard)
        done += 1
    await asyncio.gather(*inflight, return_exceptions=True)
    return done


async def scrape_every_second(http: aiohttp.ClientSession, url: str, out: list[float]) -> None:
    """GET /metrics about once a second, at a random point of each second, until cancelled."""
    second = time.monotonic() - 1.0
    while True:
        second += 1.0
        await asyncio.sleep(max(0.0, second + random.random() - time.monotonic()))
        started = time.perf_counter()
        await http_get(http, url, deadline=30)
        out.append(time.perf_counter() - started)


async def decided(http: aiohttp.ClientSession, base: str) -> float:
    """Decisions in the controller's journal (every verdict)."""
    _, body = await http_get(http, f"{base}/metrics", deadline=30)
    return sum(samples(body, "nodesync_journal_decisions").values())


async def wait_decided(
    http: aiohttp.ClientSession, base: str, expected: float, within: float = 60.0
) -> None:
    deadline = time.monotonic() + within
    while (seen := await decided(http, base)) < expected:
        if time.monotonic() > deadline:
            raise AssertionError(f"{seen:g} decisions, expected {expected:g}")
        await asyncio.sleep(0.05)


def start_controller(api: SimAPIServer, port: int, workdir: Path, token: str) -> ChildProcess:
    return nodesync_child(
        "controller",
        "--kubeconfig",
        str(api.kubeconfig),
        "--web.listen-address",
        f"127.0.0.1:{port}",
        "--journal.path",
        str(workdir / "journal.db"),
        "--rollback.dry-run",
        "--guard.max-rollbacks",
        "0",
        "--guard.max-rollback-fraction",
        "1",
        "--log.level",
        "warning",
        log=workdir / "controller.log",
        env={"NODESYNC_WEBHOOK_TOKEN": token},
    )


async def run(args: argparse.Namespace) -> dict[str, Any]:
    where = machine()
    workdir = Path(tempfile.mkdtemp(prefix="nodesync-bench-"))
    api = SimAPIServer(workdir)
    token = secrets.token_urlsafe(24)
    result = Run()
    try:
        await api.start()
        names = [f"node-{i:05d}" for i in range(args.nodes)]
        await populate_nodes(api, names)
        port, floor_port = free_port(), free_port()
        base = f"http://127.0.0.1:{port}"
        with Children() as children:
            controller = children.start(start_controller(api, port, workdir, token))
            floor = children.start(
                python_child(
                    "bench.storm_floor",
                    "--port",
                    str(floor_port),
                    log=workdir / "floor.log",
                )
            )
            await wait_http(controller, f"{base}/readyz", within=120)
            await wait_port(floor, floor_port, within=30)
            hook = Hook(f"{base}/alerts", token)
            bare = Hook(f"http://127.0.0.1:{floor_port}/alerts", token)
            stop = asyncio.Event()
            renewer = asyncio.create_task(renew(api, names, args.renew_rate, stop))
            async with aiohttp.ClientSession() as http:
                try:
                    await measure(args, names, hook, bare, http, base, controller, result)
                finally:
                    stop.set()
                    renewed = await renewer
                    await hook.close()
                    await bare.close()
            assert controller.pid is not None
            peak = peak_rss_bytes(controller.pid)
        return report(args, where, result, renewed, peak)
    finally:
        await api.close()
        shutil.rmtree(workdir, ignore_errors=True)


async def measure(
    args: argparse.Namespace,
    names: Sequence[str],
    hook: Hook,
    bare: Hook,
    http: aiohttp.ClientSession,
    base: str,
    controller: ChildProcess,
    result: Run,
) -> None:
    now = time.time()
    known = [alert(names[i], now - 60) for i in range(args.group - 1)]
    repeat_body = delivery([*known, alert(names[args.group - 1], now - 60)])
    status, _ = await hook.post(repeat_body)
    assert status == 200, status
    await wait_decided(http, base, args.group)
    expected = float(args.group)
    fresh = iter(names[args.group :])
    assert controller.pid is not None
    cpu_before = cpu_seconds(controller.pid)
    for _round in range(args.rounds):
        for mode in MODES:
            scraper = (
                asyncio.create_task(scrape_every_second(http, f"{base}/metrics", result.scrapes))
                if mode.endswith("_scraped")
                else None
            )
            ends = time.monotonic() + args.block_seconds
            try:
                while time.monotonic() < ends:
                    if mode.startswith("new"):
                        node = next(fresh, None)
                        if node is None:
                            break  # every node had its alert
                        body = delivery([*known, alert(node, time.time() - 30)])
                        expected += 1
                    else:
                        body = repeat_body
                    (status, latency), (_, floor_latency) = await asyncio.gather(
                        hook.post(body), bare.post(body)
                    )
                    if status != 200:
                        result.failed += 1
                    result.acks[mode].append(latency)
                    result.floor[mode].append(floor_latency)
                    result.deliveries += 1
            finally:
                if scraper is not None:
                    scraper.cancel()
                    await asyncio.gather(scraper, return_exceptions=True)
            await wait_decided(http, base, expected)
    result.cpu = cpu_seconds(controller.pid) - cpu_before


def report(
    args: argparse.Namespace, where: dict[str, object], result: Run, renewed: int, peak: int
) -> dict[str, Any]:
    acks = {mode: summary_ms(v) for mode, v in result.acks.items()}

    def ratio(mode: str, floor: str) -> float:
        return float(acks[mode]["p99_ms"]) / float(acks[floor]["p99_ms"])

    return {
        "machine": where,
        "command": command("bench.controller_decisions", args.argv),
        "nodes": args.nodes,
        "alerts_per_delivery": args.group,
        "deliveries": result.deliveries,
        "failed": result.failed,
        "lease_renewals": renewed,
        "acknowledgement": acks,
        "floor_acknowledgement": {m: summary_ms(v) for m, v in result.floor.items()},
        "p99_new_over_repeat": ratio("new", "repeat"),
        "p99_new_over_repeat_scraped": ratio("new_scraped", "repeat_scraped"),
        "scrapes": summary_ms(result.scrapes),
        "controller_cpu_ms_per_delivery": 1000 * result.cpu / max(1, result.deliveries),
        "controller_peak_rss_bytes": peak,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=4, help="blocks per mode")
    parser.add_argument("--block-seconds", type=float, default=4.0, help="length of a block")
    parser.add_argument("--group", type=int, default=10, help="alerts per delivery")
    parser.add_argument("--renew-rate", type=float, default=100.0, help="Lease renewals/s")
    args = parser.parse_args(argv)
    args.argv = argv
    print(json.dumps(run_main(run(args)), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
