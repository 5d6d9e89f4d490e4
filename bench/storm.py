"""Benchmark: a scale-out storm against the controller and its rollback hook.

1000 nodes join within 60 s and 5% of them fail, with the controller (its cluster watch, the
webhook, the journal and the rollback executor) under measurement. Every part is its own process
talking HTTP on loopback, as in a cluster:

- ``nodesync sim apiserver``: the test API server. Its request counters (``/_sim/counters``)
  count the controller's writes: they are counted by the server, not by the controller.
- 50 old nodes join first and keep their Leases renewed: the established nodes the
  correlated-failure guard judges by. The API server stamps creation times itself, so "old" is
  made with a short ``--guard.scaleout-window`` (60 s): the storm starts once the old nodes will be
  older than the window when the first rollback alert arrives.
- the storm: 1000 new Nodes (labelled with their wave, ``--wave.label``), each with its Lease
  and three pods bound to it (two owned by a ReplicaSet, which a drain evicts, one owned by a
  DaemonSet, which it must leave alone), created at an even pace within 60 s. Every healthy
  node's Lease is renewed every 10 s, as kubelet does. Every 20th new node fails: Ready turns
  False (a status patch, as kubelet writes it) and its Lease stops. A bad batch: the failing
  nodes that joined in the first 30 s fail together 40 s into the join, the later ones 10 s
  after they joined, so the rollbacks start with a burst while nodes still join.
- ``nodesync controller`` with the webhook (token in ``NODESYNC_WEBHOOK_TOKEN``), a fresh
  journal, ``--apiserver.qps 20 --apiserver.burst 20``, a blast radius that admits exactly the
  50 failing nodes (``--guard.max-rollback-fraction 0.05`` of the 1000-node wave,
  ``--guard.max-rollbacks 50``) and
  ``--guard.max-concurrent-rollbacks 10``; scraped every 15 s as Prometheus would.
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
second from the server's counters (sampled 4 times a second) against ``--apiserver.qps`` and the
token bucket's promise (at most burst + qps * T writes in any T seconds), actions taken against
expected (each failing node cordoned, tainted, drained and asked for its cleanup exactly once,
its DaemonSet pod left alone, no healthy node written to; every step once, in its NodeRollback,
in the server's counters, in Events and in the controller's metrics), the controller's RSS and
peak RSS (VmHWM), and the total wall time. To tell causes apart: how long a ``GET /healthz``
waits on each receiver (a probe every 100 ms: a request that does no work), which slow
acknowledgements overlapped a scrape, and the size of the controller's exposition.

No root needed; under 2 minutes on 2 vCPUs:

    .venv/bin/python -m bench.storm [--nodes 1000] [--join-seconds 60]

Prints one JSON document; exits 1 if a target is missed.

This module is the run: the storm's state (:class:`Storm`), its processes and its phases. Its
parts are beside it: bench.storm_config (the parameters), bench.storm_objects (Nodes and
pods), bench.storm_cluster (the kubelets' renewals, the agents' watch, whose writes are
whose), bench.storm_alerts (Prometheus' alerts), bench.storm_checks (exactly once, no healthy
node touched, the write budget) and bench.storm_report (the figures). The rollbacks are read
from their NodeRollbacks in the API server, the refusals from the journal through the product's
own API, read-only beside the controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from bench.harness.apiserver import APIError, Counts, JSONObject, SimAPIServer
from bench.harness.exposition import Families, parse
from bench.harness.objects import lease_body, lease_path
from bench.harness.pacing import sleep_until
from bench.harness.processes import Children, nodesync_child, python_child, run_main
from bench.harness.readiness import wait_http, wait_port
from bench.harness.report import command, machine
from bench.harness.samplers import (
    CounterSample,
    peak_rss_bytes,
    rss_bytes,
    sample_counters,
    sample_rss,
)
from bench.storm_alerts import AlertFeed, lease_stale_alert, not_ready_alert
from bench.storm_cluster import LeaseRenewer, NodeWatch, controller_writes
from bench.storm_config import Config, parse_config
from bench.storm_objects import NAMESPACE, WAVE_LABEL, conditions, node_body, pod_bodies
from bench.storm_report import report
from exporter.controller.journal import DecisionRecord, Journal
from exporter.kube.noderollbacks import NODEROLLBACKS, node_rollback
from exporter.model.rfc3339 import format_micro_time
from exporter.model.rollback import Action, NodeRollback
from exporter.tasks import wait_set
from nodesync_sim.real.process import ChildProcess, free_port

NODEROLLBACKS_PATH = f"/apis/{NODEROLLBACKS.group}/{NODEROLLBACKS.version}/noderollbacks"


@dataclass
class Storm:
    """What one run did and saw; bench.storm_report makes the figures and the checks of it."""

    cfg: Config
    api: SimAPIServer
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
    final_plans: dict[str, str] = field(default_factory=dict)  # node -> its rollback's phase
    counter_samples: list[CounterSample] = field(default_factory=list)
    rss_samples: list[tuple[float, int]] = field(default_factory=list)
    scrapes: list[tuple[float, float]] = field(default_factory=list)  # wall start, end
    am: JSONObject = field(default_factory=dict)
    families: Families = field(default_factory=dict)
    counts: Counts = field(default_factory=dict)
    events: list[JSONObject] = field(default_factory=list)
    nodes_now: dict[str, JSONObject] = field(default_factory=dict)
    pods_now: list[JSONObject] = field(default_factory=list)
    rollbacks: list[NodeRollback] = field(default_factory=list)
    decisions: list[DecisionRecord] = field(default_factory=list)
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
        await self.api.call("POST", lease_path(), lease_body(node, format_micro_time(time.time())))
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

    async def join_all(self, feed: AlertFeed) -> None:
        """The storm: the new nodes join at an even pace on a monotonic schedule (48 joins in
        flight at most), each failing, flapping or raising noise as the config says."""
        self.join_start = time.time()
        origin = time.monotonic()
        gate = asyncio.Semaphore(48)
        tasks: list[asyncio.Task[None]] = []
        for index, name in enumerate(self.names):
            lateness = await sleep_until(origin + index * self.cfg.join_seconds / self.cfg.nodes)
            self.join_lateness = max(self.join_lateness, lateness)
            tasks.append(asyncio.create_task(self.join(index, name, gate, feed)))
        for outcome in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(outcome, BaseException):
                self.create_errors.append(repr(outcome))
        self.join_end = max(self.created_at.values(), default=time.time())

    async def scrape_loop(self, url: str, stop: asyncio.Event) -> None:
        """Prometheus scrapes the controller, as it would in a cluster (0: never)."""
        if self.cfg.scrape_interval <= 0:
            return
        async with aiohttp.ClientSession() as http:
            while not stop.is_set():
                if await wait_set(stop, self.cfg.scrape_interval):
                    return
                started = time.time()
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with http.get(url) as response:
                        await response.read()
                    self.scrapes.append((started, time.time()))

    async def read_rollbacks(self) -> list[NodeRollback]:
        """The NodeRollbacks in the API server: the record of every rollback."""
        listed = await self.api.call("GET", NODEROLLBACKS_PATH)
        return [node_rollback(o) for o in listed["items"]]

    async def wait_plans(self, controller: ChildProcess) -> None:
        """Until every failing node's NodeRollback is finished (or the deadline), as the API
        server holds them."""
        deadline = time.monotonic() + self.cfg.plans_deadline
        while time.monotonic() < deadline:
            self.final_plans = {
                r.spec.node: r.status.phase.value
                for r in await self.read_rollbacks()
                if r.spec.action is Action.ROLLBACK_NODE
                and not r.active
                and r.spec.node in self.failed_at
            }
            if len(self.final_plans) >= len(self.failing):
                break
            if not controller.running:
                raise RuntimeError(f"the controller exited:\n{controller.log_tail()}")
            await asyncio.sleep(0.5)
        self.plans_finished = time.time()

    async def collect(self, base: str, controller: ChildProcess) -> None:
        """What the controller shows and the API server holds once the storm is over."""
        async with aiohttp.ClientSession() as http, http.get(f"{base}/metrics") as response:
            exposition = await response.text()
        self.families = parse(exposition)
        self.exposition_bytes = len(exposition.encode())
        assert controller.pid is not None, "the controller exited"
        self.rss = rss_bytes(controller.pid)
        self.peak_rss = peak_rss_bytes(controller.pid)

    async def collect_cluster(self) -> None:
        api = self.api
        self.counts = await api.counters()
        self.events = (await api.call("GET", f"/api/v1/namespaces/{NAMESPACE}/events"))["items"]
        nodes = (await api.call("GET", "/api/v1/nodes"))["items"]
        self.nodes_now = {n["metadata"]["name"]: n for n in nodes}
        self.pods_now = (await api.call("GET", f"/api/v1/namespaces/{NAMESPACE}/pods"))["items"]


async def read_decisions(journal_path: Path) -> list[DecisionRecord]:
    """Every decision in the journal (the refusals are recorded there only)."""
    journal = await Journal.open_read_only(str(journal_path))
    try:
        return await journal.decisions()
    finally:
        await journal.close()


# ---------------------------------------------------------------- the processes


def controller_args(cfg: Config, api: SimAPIServer, port: int, journal: Path) -> list[str]:
    failing = cfg.failing
    return [
        "controller",
        "--kubeconfig",
        str(api.kubeconfig),
        "--web.listen-address",
        f"127.0.0.1:{port}",
        "--journal.path",
        str(journal),
        "--wave.label",
        WAVE_LABEL,
        "--guard.scaleout-window",
        f"{cfg.scaleout_window:g}s",
        "--guard.node-monitor-grace-period",
        f"{cfg.grace:g}s",
        # The blast radius admits exactly the failing nodes: one more plan would be refused.
        "--guard.max-rollbacks",
        str(failing),
        "--guard.max-rollback-fraction",
        f"{failing / cfg.nodes:g}",
        "--guard.max-concurrent-rollbacks",
        str(cfg.max_concurrent),
        "--apiserver.qps",
        f"{cfg.api_qps:g}",
        "--apiserver.burst",
        str(cfg.api_burst),
        "--cleanup.timeout",
        f"{cfg.cleanup_timeout:g}s",
    ]


@dataclass(frozen=True)
class Receivers:
    """The webhook's receivers and their Alertmanager, started: the controller (at ``base``,
    journal at ``journal``), the floor, and Alertmanager writing its results to ``result``."""

    controller: ChildProcess
    alertmanager: ChildProcess
    base: str
    journal: Path
    result: Path


async def start_receivers(
    cfg: Config, api: SimAPIServer, workdir: Path, children: Children
) -> Receivers:
    """The controller (until /readyz answers), the floor (until its port opens), then the
    Alertmanager process in front of both, sharing one webhook token."""
    token = {"NODESYNC_WEBHOOK_TOKEN": secrets.token_urlsafe(24)}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    journal = workdir / "journal.db"
    controller = children.start(
        nodesync_child(
            *controller_args(cfg, api, port, journal), log=workdir / "controller.log", env=token
        )
    )
    await wait_http(controller, f"{base}/readyz", within=60)
    floor_port = free_port()
    floor = children.start(
        python_child("bench.storm_floor", "--port", str(floor_port), log=workdir / "floor.log")
    )
    await wait_port(floor, floor_port, within=30)
    result = workdir / "alertmanager.json"
    alertmanager = children.start(
        python_child(
            "bench.storm_alertmanager",
            *("--controller", f"{base}/alerts"),
            *("--floor", f"http://127.0.0.1:{floor_port}/alerts"),
            *("--result", str(result)),
            *("--group-wait", f"{cfg.group_wait:g}"),
            *("--group-interval", f"{cfg.group_interval:g}"),
            *("--peer-delay", f"{cfg.peer_delay:g}"),
            *("--max-alerts", str(cfg.max_alerts)),
            *("--in-flight", str(cfg.in_flight)),
            *("--max-seconds", f"{cfg.wall_target_s:g}"),
            log=workdir / "alertmanager.log",
            env=token,
            stdin_pipe=True,
        )
    )
    return Receivers(controller, alertmanager, base, journal, result)


async def flood(storm: Storm, feed: AlertFeed, receivers: Receivers) -> None:
    """Alertmanager replays every notification back to back and exits with its results;
    then a quiet spell, longer than the executor's poll interval (5 s), in which nothing new
    may happen."""
    feed.finish()
    code = await asyncio.to_thread(receivers.alertmanager.wait, 300)
    if code != 0:
        raise RuntimeError(f"the Alertmanager process failed:\n{receivers.alertmanager.log_tail()}")
    storm.am = json.loads(receivers.result.read_text())
    await asyncio.sleep(7.0)


# ---------------------------------------------------------------- the benchmark


async def run(cfg: Config) -> Storm:
    """One storm, from an empty API server to the journal read after the controller stopped."""
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="nodesync-storm-"))
    # No watch falls off the history, by count or by age.
    api = SimAPIServer(workdir, history_limit=500_000, history_age="1h")
    storm = Storm(cfg, api)
    stop = asyncio.Event()
    background: list[asyncio.Task[None]] = []
    children = Children()
    try:
        await api.start()

        # ---- the established cluster
        await asyncio.gather(
            *(storm.register(n, 5000 + i, None) for i, n in enumerate(storm.old_names))
        )
        old_created = time.time()
        background.append(asyncio.create_task(storm.renewer.run(stop)))
        background.append(asyncio.create_task(storm.watch.run()))

        # ---- the controller, the floor, Alertmanager; the samplers and Prometheus' scrapes
        receivers = await start_receivers(cfg, api, workdir, children)
        controller = receivers.controller
        assert controller.pid is not None
        feed = AlertFeed(receivers.alertmanager)
        background += [
            asyncio.create_task(
                sample_counters(api, controller_writes, storm.counter_samples, stop, 0.25)
            ),
            asyncio.create_task(sample_rss(controller.pid, storm.rss_samples, stop)),
            asyncio.create_task(storm.scrape_loop(f"{receivers.base}/metrics", stop)),
        ]
        storm.rss_before = rss_bytes(controller.pid)

        # ---- the storm. It starts once the old nodes will be older than the scale-out window
        # when the first rollback alert arrives: they are the established nodes.
        join_start = max(
            time.time(), old_created + cfg.scaleout_window - cfg.first_alert_after() + 1
        )
        await asyncio.sleep(max(0.0, join_start - time.time()))
        await storm.join_all(feed)

        # ---- the rollbacks finish; the flood, then a quiet spell
        await storm.wait_plans(controller)
        await flood(storm, feed, receivers)

        # ---- what the controller did, and what the API server holds
        await storm.collect(receivers.base, controller)
        stop.set()
        await asyncio.gather(*background[:1], return_exceptions=True)  # the renewals drain
        await storm.collect_cluster()
        storm.rollbacks = await storm.read_rollbacks()
        controller.stop()
        storm.decisions = await read_decisions(receivers.journal)
        storm.wall_time = time.monotonic() - started
        return storm
    finally:
        stop.set()
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await storm.watch.close()
        children.stop_all()
        await api.close()
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(argv, __doc__.split("\n\n")[0] if __doc__ else None)
    where = machine()
    result = report(run_main(run(cfg)))
    result["machine"] = {**where, **result["machine"]}
    result["command"] = command("bench.storm", argv)
    print(json.dumps(result, indent=2))
    return 0 if all(result["targets_met"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
