"""``nodesync demo``: the whole chain on this machine, with a simulated scale-out wave.

A test API server, a private containerd with a real agent (the "real node"), the controller with
its webhook and rollback executor, simulated nodes, and a real Prometheus and Alertmanager loaded
with the shipped rules and route. A wave joins; one node fails to join and another crash-loops a
pod; the alerts fire and the hook rolls back exactly those. A line of summary is printed whenever
something changes, and the NodeRollbacks as ``kubectl get noderollbacks`` lists them whenever
one of them moves; the API server is HTTPS with a kubeconfig kubectl accepts, and
Prometheus and Alertmanager stay up for a look.

Everything it started (processes and containerd's shims, mounts, cgroups, directories) is
stopped and removed on SIGINT (Ctrl-C), SIGTERM or SIGHUP (the exit code is then 128 + the
signal's number), after ``--duration``, and when its standard output is a closed pipe
(``| head``, or ``| tee`` that the same Ctrl-C killed first; exit code 1). It refuses to start
as another user than root, in one line.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from exporter.model.kube import TAINT_NODESYNC
from exporter.tasks import wait_set
from nodesync_sim.demo.chain import Chain
from nodesync_sim.fake.scaleout.scenario import ScenarioError
from nodesync_sim.fake.scaleout.scenario_file import load
from nodesync_sim.real.containerd import missing_binaries as missing_containerd
from nodesync_sim.real.prometheus import missing_binaries as missing_prometheus

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


class Output:
    """The demo's standard output, line by line. When it is a closed pipe (``| head -1``, or
    ``| tee`` killed by the same Ctrl-C), the lines are dropped from then on, the descriptor
    points to /dev/null (the interpreter's last flush must not fail either) and ``on_broken``
    is called once: the demo stops and cleans up as it does on a signal."""

    def __init__(self, stream: TextIO, on_broken: Callable[[], None] = lambda: None) -> None:
        self._stream = stream
        self.on_broken = on_broken
        self.broken = False

    def line(self, text: str = "") -> None:
        if self.broken:
            return
        try:
            self._stream.write(text + "\n")
            self._stream.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.broken = True
            self._to_devnull()
            self.on_broken()

    def _to_devnull(self) -> None:
        try:
            descriptor = self._stream.fileno()
        except (OSError, ValueError, io.UnsupportedOperation):
            return
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, descriptor)
        finally:
            os.close(devnull)


async def follow(chain: Chain, out: Output, stop: asyncio.Event, period: float = 1.0) -> None:
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
                    out.line(f"[+{time.monotonic() - started:5.1f}s] {summary.line()}")
                    if summary.rollbacks and summary.rollbacks != (last and last.rollbacks):
                        out.line(summary.table())
                    last = summary
            await wait_set(stop, period)


#: The signals that stop the demo (and remove everything it started): Ctrl-C, kill, and the
#: terminal going away. Its children run in sessions of their own, so only the demo gets them.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _Stopper:
    """Why the demo stops: the first stop signal, or a broken output."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.signal: int | None = None
        self.broken_output = False
        #: The chain's start while it runs: a stop cancels it (Chain.start then stops
        #: what it started, once a process coming up in a worker thread is up).
        self.starting: asyncio.Task[None] | None = None

    def on_signal(self, sig: int) -> None:
        if self.signal is None:
            # Even when the output broke first: with `| tee` and Ctrl-C, tee may die a moment
            # before the demo gets its SIGINT, and the exit code is still Ctrl-C's.
            self.signal = sig
        else:
            log.warning("%s: still stopping, everything is removed first", signal.strsignal(sig))
        self._stop()

    def on_broken_output(self) -> None:
        self.broken_output = True
        self._stop()

    def _stop(self) -> None:
        self.event.set()
        # Once: another cancel would interrupt the stopping of what was started.
        if self.starting is not None and not self.starting.cancelling():
            self.starting.cancel()

    def exit_code(self) -> int:
        """128 + the signal (the shell's convention), else 1 for a broken output, else 0."""
        if self.signal is not None:
            return 128 + self.signal
        return 1 if self.broken_output else 0


NEEDS_ROOT = (
    "the demo needs root: its private containerd mounts the pods' filesystems and creates "
    "their cgroups (run it as root, e.g. with sudo)"
)


async def run_demo(args: argparse.Namespace, stream: TextIO) -> int:
    if os.geteuid() != 0:
        log.error(NEEDS_ROOT)
        return 1
    missing = missing_containerd() + missing_prometheus()
    if missing:
        log.error("the demo needs these, missing: %s (run scripts/setup)", ", ".join(missing))
        return 1
    try:
        scenario = load(args.scenario or DEMO_SCENARIO)
    except (ScenarioError, OSError) as exc:
        log.error("cannot load the scenario: %s", exc)
        return 2
    stopper = _Stopper()
    out = Output(stream, stopper.on_broken_output)
    loop = asyncio.get_running_loop()
    # Installed before anything starts and kept until everything is removed: a signal during
    # the start cancels it (and what was started is stopped), during the cleanup it is noted.
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stopper.on_signal, sig)
    chain = Chain(scenario, log_level=args.log_level)
    failed = False
    try:
        try:
            out.line(f"nodesync demo: {scenario.description}")
            out.line(
                "starting the chain (test API server, containerd, agent, controller, "
                "simulator, Prometheus, Alertmanager) ..."
            )
            if not stopper.event.is_set():
                stopper.starting = asyncio.ensure_future(chain.start())
                try:
                    await stopper.starting
                except asyncio.CancelledError:
                    if not stopper.event.is_set():
                        raise  # not ours: the demo itself is being cancelled
                except Exception as exc:  # a part did not start: say which, in a line or two
                    log.debug("the chain did not start", exc_info=True)
                    log.error("the chain did not start: %s", exc)
                    failed = True
                    stopper.event.set()
                finally:
                    stopper.starting = None
            if not stopper.event.is_set():
                for name, where in chain.endpoints().items():
                    out.line(f"  {name:17s} {where}")
                out.line(
                    f"look at the nodes: kubectl --kubeconfig {chain.admin_kubeconfig} get nodes"
                )
                out.line("the wave joins now; Ctrl-C stops everything.")
                chain.start_waves()
                if args.duration > 0:
                    loop.call_later(args.duration, stopper.event.set)
                await follow(chain, out, stopper.event)
        finally:
            out.line("stopping ...")
            leftovers = await chain.stop()
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
        # Everything is removed: a late Ctrl-C must not end in a KeyboardInterrupt traceback.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if leftovers:
        if out.broken:
            log.error("left behind: %s", ", ".join(leftovers))
        out.line(f"left behind: {', '.join(leftovers)}")
        return 1
    out.line("stopped; nothing left running or mounted.")
    return 1 if failed else stopper.exit_code()
