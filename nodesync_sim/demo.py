"""``nodesync demo``: the whole chain on this machine, with a simulated scale-out wave.

A test API server, a private containerd with a real agent (the "real node"), the controller with
its webhook and rollback executor, simulated nodes, and a real Prometheus and Alertmanager loaded
with the shipped rules and route. A wave joins; one node fails to join and another crash-loops a
pod; the alerts fire and the hook rolls back exactly those. A line of summary is printed whenever
something changes, and the NodeRollbacks as ``kubectl get noderollbacks`` lists them whenever
one of them moves; Prometheus and Alertmanager stay up for a look until Ctrl-C, then everything
is stopped and removed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from exporter.model.kube import TAINT_NODESYNC
from nodesync_sim.chain import Chain
from nodesync_sim.containerd import missing_binaries as missing_containerd
from nodesync_sim.prometheus import missing_binaries as missing_prometheus
from nodesync_sim.scaleout.scenario import ScenarioError, load

log = logging.getLogger(__name__)

DEMO_SCENARIO = Path(__file__).parent / "scenarios" / "demo.json"


#: The columns ``kubectl get noderollbacks`` shows (the CRD's printer columns), but the age.
ROLLBACK_COLUMNS = ("NAME", "NODE", "ACTION", "PHASE", "STEP", "REASON")


@dataclass(frozen=True)
class Summary:
    nodes: int
    ready: int
    cordoned: int
    firing: tuple[str, ...]
    actions: tuple[tuple[str, int], ...]
    rollbacks: tuple[tuple[str, ...], ...] = ()  # one row per NodeRollback, as ROLLBACK_COLUMNS

    def line(self) -> str:
        alerts = ", ".join(self.firing) or "none"
        actions = ", ".join(f"{name} {count}" for name, count in self.actions) or "none"
        return (
            f"nodes {self.nodes} (ready {self.ready}, cordoned by nodesync {self.cordoned})"
            f" | alerts firing: {alerts} | actions: {actions}"
        )

    def table(self) -> str:
        """The NodeRollbacks as ``kubectl get noderollbacks -o wide`` lists them."""
        rows = [ROLLBACK_COLUMNS, *self.rollbacks]
        widths = [max(len(row[i]) for row in rows) for i in range(len(ROLLBACK_COLUMNS))]
        return "\n".join(
            "  " + "   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in rows
        )


def rollback_rows(objects: list[dict[str, Any]]) -> tuple[tuple[str, ...], ...]:
    """The printer columns of each NodeRollback, oldest first."""
    rows = []
    for obj in sorted(
        objects, key=lambda o: (o["metadata"].get("creationTimestamp", ""), o["metadata"]["name"])
    ):
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        rows.append(
            (
                obj["metadata"]["name"],
                str(spec.get("nodeName", "")),
                str(spec.get("action", "")),
                str(status.get("phase", "")),
                str(status.get("step", "")),
                str(status.get("reason", "")),
            )
        )
    return tuple(rows)


def _node_summary(nodes: list[dict[str, Any]]) -> tuple[int, int]:
    ready = cordoned = 0
    for node in nodes:
        conditions = node.get("status", {}).get("conditions", [])
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            ready += 1
        taints = node.get("spec", {}).get("taints") or []
        if any(t.get("key") == TAINT_NODESYNC for t in taints):
            cordoned += 1
    return ready, cordoned


def _actions(exposition: str) -> tuple[tuple[str, int], ...]:
    counts: dict[str, int] = {}
    for family in text_string_to_metric_families(exposition):
        if family.name != "nodesync_actions":
            continue
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.labels.get("result") == "done":
                action = sample.labels["action"]
                counts[action] = counts.get(action, 0) + int(sample.value)
    return tuple((name, n) for name, n in sorted(counts.items()) if n)


async def summarize(chain: Chain, session: aiohttp.ClientSession) -> Summary:
    nodes = chain.api.store.list("nodes")
    ready, cordoned = _node_summary(nodes)
    alerts = await chain.prom.query_async('ALERTS{alertstate="firing"}')
    firing = sorted(
        f"{a['metric']['alertname']}({a['metric'].get('node') or a['metric'].get('pod', '')})"
        for a in alerts
    )
    async with session.get(f"http://127.0.0.1:{chain.controller_port}/metrics") as response:
        exposition = await response.text()
    rollbacks = rollback_rows(chain.api.store.list("noderollbacks"))
    return Summary(len(nodes), ready, cordoned, tuple(firing), _actions(exposition), rollbacks)


async def follow(chain: Chain, out: TextIO, stop: asyncio.Event, period: float = 1.0) -> None:
    """Print a summary line whenever it changes, until ``stop`` is set."""
    started = time.monotonic()
    last: Summary | None = None
    async with aiohttp.ClientSession() as session:
        while not stop.is_set():
            try:
                summary = await summarize(chain, session)
            except (aiohttp.ClientError, OSError) as exc:
                log.debug("summary not available: %s", exc)
            else:
                if summary != last:
                    print(f"[+{time.monotonic() - started:5.1f}s] {summary.line()}", file=out)
                    if summary.rollbacks and summary.rollbacks != (last and last.rollbacks):
                        print(summary.table(), file=out)
                    out.flush()
                    last = summary
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), period)


async def run_demo(args: argparse.Namespace, out: TextIO) -> int:
    missing = missing_containerd() + missing_prometheus()
    if missing:
        log.error("the demo needs these, missing: %s (run scripts/setup)", ", ".join(missing))
        return 1
    try:
        scenario = load(args.scenario or DEMO_SCENARIO)
    except (ScenarioError, OSError) as exc:
        log.error("cannot load the scenario: %s", exc)
        return 2
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    chain = Chain(scenario, log_level=args.log_level)
    try:
        print(f"nodesync demo: {scenario.description}", file=out)
        print(
            "starting the chain (test API server, containerd, agent, controller, ", end="", file=out
        )
        print("simulator, Prometheus, Alertmanager) ...", file=out, flush=True)
        await chain.start()
        for name, where in chain.endpoints().items():
            print(f"  {name:17s} {where}", file=out)
        print("the wave joins now; Ctrl-C stops everything.", file=out, flush=True)
        chain.start_waves()
        if args.duration > 0:
            loop.call_later(args.duration, stop.set)
        await follow(chain, out, stop)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        print("stopping ...", file=out, flush=True)
        leftovers = await chain.stop()
    if leftovers:
        print(f"left behind: {', '.join(leftovers)}", file=out)
        return 1
    print("stopped; nothing left running or mounted.", file=out)
    return 0
