"""Benchmark: the controller syncing 1000 Nodes and Leases (or 5000, 15000, 65000), then following
lease renewals, each figure beside its floor.

Everything runs as separate processes talking HTTP on loopback, as in a cluster:
- ``nodesync sim apiserver`` (the test API server), populated over HTTP with Nodes (conditions,
  capacity, addresses, node info) and one Lease per node in kube-node-lease (renewTime: now),
  each created as its own POST would be, 200 to a request (``/_sim/batch``);
- ``nodesync controller`` against it: process start until /readyz answers 200 (Nodes and Leases
  listed), and /metrics then shows every node;
- lease renewals as kubelet sends them (a merge patch of spec.renewTime, RFC 3339 with
  microseconds), round-robin over the leases at a fixed rate on a monotonic schedule (by default
  the real one: every Lease every 10 s, 6,500 a second at 65,000 nodes), those due sent together
  every 20 ms in one request (at most 2,000 to a request) to ``/_sim/batch``, which applies each
  as its own PATCH with its own watch event (the controller gets what a real API server would
  send it; the requests themselves are kubelets' cost, which one process cannot send), while
  /metrics is scraped about once a second. Measured: the achieved rate; freshness (when a scrape
  is sent, the age of the newest renewTime it shows); propagation lag (when a scrape is sent,
  how long ago the API server acknowledged the oldest renewal the scrape does not show yet; 0
  when it shows them all); the catch-up after the last renewal until every lease's last written
  renewTime is in /metrics (all of them, exactly: no event is lost); the controller's CPU use
  during the renewals (also without the scrapes' share, measured at rest), its RSS and peak RSS
  (VmHWM) at the end; scrape latency during the renewals and at rest.

The floors, in the same run (bench.controller_floor): a bare Python process that lists the same
Nodes and Leases and decodes them, timed from its start until it has both (the floor of
start-until-synced), which then holds them by name and watches both kinds for the rest of the
run, each event decoded and put in place: a bare list+watch, whose CPU during the renewals is
the floor of the controller's, and whose peak RSS, at its list and at the end, the floor of the
controller's; and a bare aiohttp handler serving the controller's last exposition as it is,
scraped at rest alternately with the controller (the floor of a scrape of those bytes).

With ``--failing N``, the last N nodes fail as a cohort and the controller runs with the
webhook and the executor, so that its executor series are measured too
(bench.controller_cohort); an alert about each failing node is held, or about the first H of
them with ``--held H``. With ``--joining N``, N more nodes join once the controller is synced,
so that the waves' join histograms are measured too (bench.controller_joins). The result counts
the exposition's samples by metric name and the node series per node.

No root needed:

    .venv/bin/python -m bench.controller_sync [--nodes 1000] [--seconds 30] [--rate RENEWALS/S]
    .venv/bin/python -m bench.controller_sync --nodes 5000 --failing 50
    .venv/bin/python -m bench.controller_sync --nodes 65000 --seconds 30
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.controller_cohort import controller_args, fail, hold, token
from bench.controller_joins import join
from bench.harness.apiserver import JSONObject, SimAPIServer
from bench.harness.exposition import sample_value
from bench.harness.objects import lease_body, lease_path, registered_node
from bench.harness.pacing import bounded, sleep_until
from bench.harness.processes import python_child, run_main, start_nodesync
from bench.harness.readiness import time_until_ready, wait_port
from bench.harness.report import command, machine
from bench.harness.samplers import cpu_seconds, peak_rss_bytes, rss_bytes
from bench.harness.stats import summary_ms
from exporter.kube.convert import timestamp
from exporter.model.rfc3339 import format_micro_time
from exporter.tasks import wait_set
from nodesync_sim.real.process import ChildProcess, free_port

RENEW_FAMILY = b"nodesync_node_lease_renew_timestamp_seconds{"
#: Objects created per request while populating.
CREATE_BATCH = 200
#: Renewals due within this many seconds of each other are sent in one request.
RENEW_TICK = 0.02
#: At most this many renewals to a request (the test API server takes bodies of up to 1 MiB);
#: more due at once (the benchmark's own process was busy) go in several, one after another.
RENEW_BATCH_MAX = 2000
#: How often kubelet renews its node's Lease (a quarter of its 40 s duration): the real rate
#: of renewals is the node count over it.
KUBELET_RENEW_INTERVAL = 10.0
#: How long kube-apiserver's watch cache keeps events at least (its eventFreshDuration).
WATCH_CACHE_SECONDS = 75.0


# ---------------------------------------------------------------- Nodes and Leases


async def populate_nodes(
    api: SimAPIServer, names: Sequence[str], failing: int = 0
) -> dict[str, float]:
    """Create the Nodes (the last ``failing`` of them NotReady, bench.controller_cohort), then
    their Leases; the renew timestamps written, by lease name."""
    now = time.time()
    first_failing = len(names) - failing

    def body(index: int, name: str) -> JSONObject:
        node = registered_node(name, index, now)
        return fail(node) if index >= first_failing else node

    nodes = await create_all(api, "/api/v1/nodes", [body(i, n) for i, n in enumerate(names)])
    renew = {n: format_micro_time(time.time()) for n in names}
    await create_all(
        api, lease_path(), [lease_body(nd, renew[nd["metadata"]["name"]]) for nd in nodes]
    )
    return {n: _seconds(v) for n, v in renew.items()}


async def create_all(
    api: SimAPIServer, path: str, bodies: Sequence[JSONObject]
) -> list[JSONObject]:
    """Create ``bodies`` at ``path``, ``CREATE_BATCH`` to a request (``/_sim/batch``, each
    created as its own POST would), a few requests in flight; the objects created, in order."""
    chunks = [bodies[i : i + CREATE_BATCH] for i in range(0, len(bodies), CREATE_BATCH)]
    answers = await bounded(
        [
            api.batch([{"method": "POST", "path": path, "body": b} for b in chunk])
            for chunk in chunks
        ],
        4,
    )
    created = []
    for results in answers:
        for result in results:
            if result["code"] != 201:
                raise AssertionError(f"a create at {path} failed: {result}")
            created.append(result["object"])
    return created


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


async def http_get(
    session: aiohttp.ClientSession, url: str, deadline: float = 30.0
) -> tuple[int, bytes]:
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=deadline)) as response:
        return response.status, await response.read()


# ---------------------------------------------------------------- the benchmark


@dataclass
class Renewals:
    issued: int = 0
    ok: int = 0
    failed: int = 0
    latencies: list[float] = field(default_factory=list)  # of each batch
    sizes: list[int] = field(default_factory=list)  # renewals in each batch
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
    """Merge-patch spec.renewTime round-robin at ``rate`` per second for ``seconds``, on a
    monotonic schedule (a late renewal does not shift the ones after it). The renewals due are
    sent together at most every ``RENEW_TICK`` seconds, in one request (``/_sim/batch``: each
    applied as its own PATCH, with its own resourceVersion and watch event), one request in
    flight at a time: a lease's renewals are applied in the order written, and a slow answer
    makes the next batch larger, not the rate lower. ``written`` and ``acked`` get each lease's
    last renewTime and when the server acknowledged it."""
    result = Renewals()
    total = int(seconds * rate)
    start = time.monotonic()
    sent = start - RENEW_TICK
    k = 0
    while k < total:
        await sleep_until(max(start + k / rate, sent + RENEW_TICK))
        sent = time.monotonic()
        due = min(total, int((sent - start) * rate) + 1)
        result.max_lateness = max(result.max_lateness, sent - (start + k / rate))
        batch = [names[j % len(names)] for j in range(k, due)]
        k = due
        result.issued += len(batch)
        for first in range(0, len(batch), RENEW_BATCH_MAX):
            await _renew(api, batch[first : first + RENEW_BATCH_MAX], written, acked, result)
    return result


async def _renew(
    api: SimAPIServer,
    batch: Sequence[str],
    written: dict[str, float],
    acked: dict[str, float],
    result: Renewals,
) -> None:
    """Renew the leases of ``batch`` now, in one request."""
    texts = [format_micro_time(time.time()) for _ in batch]
    result.sizes.append(len(batch))
    started = time.perf_counter()
    try:
        answers = await api.batch(
            [
                {
                    "method": "PATCH",
                    "path": lease_path(name),
                    "contentType": "application/merge-patch+json",
                    "body": {"spec": {"renewTime": text}},
                }
                for name, text in zip(batch, texts, strict=True)
            ],
            objects=False,
        )
    except (aiohttp.ClientError, RuntimeError, TimeoutError):
        result.failed += len(batch)
        return
    result.latencies.append(time.perf_counter() - started)
    done = time.monotonic()
    for name, text, answer in zip(batch, texts, answers, strict=True):
        if answer["code"] != 200:
            result.failed += 1
            continue
        result.ok += 1
        result.last_done = acked[name] = done
        written[name] = _seconds(text)


@dataclass
class Following:
    """What the scrapes saw while the leases were renewed, and what it cost the controller."""

    renewals: Renewals
    freshness: list[float] = field(default_factory=list)
    lag: list[float] = field(default_factory=list)
    unseen: list[int] = field(default_factory=list)
    scrapes: list[float] = field(default_factory=list)
    wall: float = 0.0
    cpu: float = 0.0
    api_cpu: float = 0.0
    floor_cpu: float = 0.0  # the list+watch floor's
    window: float = 0.0  # from the first renewal sent to the last one answered


async def follow_renewals(
    http: aiohttp.ClientSession,
    base: str,
    api: SimAPIServer,
    controller: ChildProcess,
    names: Sequence[str],
    written: dict[str, float],
    seconds: float,
    rate: float,
    floor_pid: int,
) -> Following:
    """Renew the leases for ``seconds`` while scraping /metrics about once a second (at a
    random point of each second, so the scrapes do not keep the same phase as the
    renewals): freshness, propagation lag and unseen renewals per scrape, and CPU used."""
    acked: dict[str, float] = {}  # monotonic time each lease's last renewal was answered
    renewing = asyncio.Event()
    seen = Following(Renewals())

    async def scrape_while_renewing() -> None:
        second = time.monotonic()
        while True:
            second += 1.0
            due = second + random.random()
            if await wait_set(renewing, max(0.0, due - time.monotonic())):
                return
            sent, sent_mono = time.time(), time.monotonic()
            expected = dict(written)  # what the API server had acknowledged by now
            t0 = time.perf_counter()
            _, text = await http_get(http, f"{base}/metrics")
            seen.scrapes.append(time.perf_counter() - t0)
            served = await asyncio.to_thread(renew_timestamps, text)
            seen.freshness.append(sent - max(served.values()))
            behind = [n for n, v in expected.items() if served.get(n, 0.0) < v]
            seen.unseen.append(len(behind))
            seen.lag.append(max((sent_mono - acked.get(n, sent_mono) for n in behind), default=0.0))

    assert controller.pid is not None
    cpu_before = cpu_seconds(controller.pid)
    api_cpu_before = cpu_seconds(api.pid)
    floor_cpu_before = cpu_seconds(floor_pid)
    wall_before = time.monotonic()
    scraper = asyncio.create_task(scrape_while_renewing())
    seen.renewals = await renew_leases(api, names, written, acked, seconds, rate)
    renewing.set()
    scraper.cancel()  # a scrape still running would delay the catch-up's first one
    await asyncio.gather(scraper, return_exceptions=True)
    seen.wall = time.monotonic() - wall_before
    seen.cpu = cpu_seconds(controller.pid) - cpu_before
    seen.api_cpu = cpu_seconds(api.pid) - api_cpu_before
    seen.floor_cpu = cpu_seconds(floor_pid) - floor_cpu_before
    seen.window = seen.renewals.last_done - wall_before
    return seen


async def catch_up(
    http: aiohttp.ClientSession, base: str, written: dict[str, float], last_done: float
) -> tuple[float, int]:
    """Scrape until every lease's last written renewTime is served, exactly: how long after
    the last renewal was answered, and how many leases were still missing (0). Raises
    AssertionError when some never show it within 60 s (a lost watch event)."""
    missing = len(written)
    while time.monotonic() - last_done < 60:
        sent_mono = time.monotonic()
        _, body = await http_get(http, f"{base}/metrics")
        served = await asyncio.to_thread(renew_timestamps, body)
        missing = sum(1 for n, v in written.items() if served.get(n) != v)
        if missing == 0:
            return max(0.0, sent_mono - last_done), missing
        await asyncio.sleep(0.02)
    raise AssertionError(f"{missing} leases never showed their last renewTime")


async def scrape_at_rest(
    http: aiohttp.ClientSession, base: str, pid: int, scrapes: int
) -> tuple[list[float], float, bytes]:
    """``scrapes`` scrapes back to back: their latencies, the controller's CPU seconds per
    scrape, and the last exposition."""
    rest: list[float] = []
    body = b""
    cpu = 0.0
    for _ in range(scrapes):
        cpu_before = cpu_seconds(pid)
        t0 = time.perf_counter()
        _, body = await http_get(http, f"{base}/metrics")
        rest.append(time.perf_counter() - t0)
        cpu += cpu_seconds(pid) - cpu_before
    return rest, cpu / max(1, scrapes), body


@dataclass
class Floors:
    """The bare processes' figures (see the module's doc)."""

    list_wall_s: float = 0.0
    list_s: float = 0.0
    list_peak_rss_bytes: int = 0
    scrape: list[float] = field(default_factory=list)
    scrape_cpu_s: float = 0.0
    watch_events: int = 0
    watch_peak_rss_bytes: int = 0


async def list_floor(api: SimAPIServer, workdir: Path, nodes: int) -> tuple[Floors, ChildProcess]:
    """Start a bare process that lists the Nodes and Leases, time it until it has them decoded,
    and leave it watching both (the caller stops it: :func:`end_watch_floor`)."""
    log = workdir / "floor-list.log"
    child = python_child(
        "bench.controller_floor",
        "list",
        "--kubeconfig",
        str(api.kubeconfig),
        "--watch",
        log=log,
    )
    started = time.monotonic()
    child.start()
    while not (lines := json_lines(log)):
        if not child.running or time.monotonic() - started > 300:
            child.stop()
            raise AssertionError(f"the list floor failed:\n{child.log_tail()}")
        await asyncio.sleep(0.01)
    wall = time.monotonic() - started
    answer = lines[0]
    assert answer["nodes"] == answer["leases"] == nodes, answer
    return Floors(wall, answer["seconds"], answer["peak_rss_bytes"]), child


def json_lines(log: Path) -> list[dict[str, Any]]:
    text = log.read_text() if log.exists() else ""
    return [json.loads(ln) for ln in text.splitlines() if ln.startswith("{") and ln.endswith("}")]


def end_watch_floor(child: ChildProcess, floors: Floors) -> None:
    """Stop the list+watch floor; its events (the last count it wrote) and peak RSS go to
    ``floors``."""
    assert child.pid is not None
    floors.watch_peak_rss_bytes = peak_rss_bytes(child.pid)
    child.stop()
    assert child.log_path is not None
    counts = [line["events"] for line in json_lines(child.log_path) if "events" in line]
    floors.watch_events = int(counts[-1]) if counts else 0


async def scrape_floor(
    http: aiohttp.ClientSession,
    base: str,
    pid: int,
    body: bytes,
    workdir: Path,
    scrapes: int,
    floors: Floors,
) -> tuple[list[float], float]:
    """The controller and a bare server of its last exposition, scraped alternately: the
    controller's latencies and CPU seconds per scrape; the floor's go to ``floors``."""
    (workdir / "exposition.txt").write_bytes(body)
    port = free_port()
    floor = python_child(
        "bench.controller_floor",
        "serve",
        "--port",
        str(port),
        "--body",
        str(workdir / "exposition.txt"),
        log=workdir / "floor-serve.log",
    )
    floor.start()
    try:
        await wait_port(floor, port, within=30)
        assert floor.pid is not None
        controller: list[float] = []
        cpu = floor_cpu = 0.0
        for _ in range(scrapes):
            for url, pid_, out in (
                (f"{base}/metrics", pid, controller),
                (f"http://127.0.0.1:{port}/metrics", floor.pid, floors.scrape),
            ):
                before = cpu_seconds(pid_)
                t0 = time.perf_counter()
                _, served = await http_get(http, url)
                out.append(time.perf_counter() - t0)
                used = cpu_seconds(pid_) - before
                if pid_ == pid:
                    cpu += used
                else:
                    floor_cpu += used
                    assert len(served) == len(body)
        floors.scrape_cpu_s = floor_cpu / max(1, scrapes)
        return controller, cpu / max(1, scrapes)
    finally:
        floor.stop()


def start_controller(
    api: SimAPIServer,
    port: int,
    log: Path,
    extra: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> ChildProcess:
    return start_nodesync(
        "controller",
        "--kubeconfig",
        str(api.kubeconfig),
        "--web.listen-address",
        f"127.0.0.1:{port}",
        "--log.level",
        "warning",
        *extra,
        log=log,
        env=env,
    )


def series(body: bytes, nodes: int) -> dict[str, object]:
    """The exposition's samples by metric name, and those with a ``node`` label per node."""
    lines = [ln for ln in body.splitlines() if not ln.startswith(b"#")]
    by_name = collections.Counter(ln.split(b"{", 1)[0].split(b" ", 1)[0].decode() for ln in lines)
    per_node = sum(1 for ln in lines if b'node="' in ln.split(b"} ", 1)[0])
    return {"node_series_per_node": per_node / max(1, nodes), "samples_by_name": dict(by_name)}


async def run(
    nodes: int,
    seconds: float,
    rate: float,
    rest_scrapes: int,
    failing: int = 0,
    held: int | None = None,
    joining: int = 0,
) -> dict[str, object]:
    """Populate, start the controller and time its sync, follow the renewals, catch up,
    scrape at rest; the figures of the run. ``failing``, ``held`` (default: ``failing``): see
    bench.controller_cohort; ``joining``: bench.controller_joins."""
    held = failing if held is None else held
    where = machine()
    workdir = Path(tempfile.mkdtemp(prefix="nodesync-bench-"))
    # kube-apiserver's watch cache keeps at least 75 s of events; the test API server's
    # default (20,000 changes) is 3 s at 6,500 renewals a second.
    api = SimAPIServer(workdir, history_limit=max(20_000, int(rate * WATCH_CACHE_SECONDS)))
    controller: ChildProcess | None = None
    watcher: ChildProcess | None = None
    try:
        await api.start()
        names = [f"node-{i:04d}" for i in range(nodes)]
        started = time.perf_counter()
        written = await populate_nodes(api, names, failing)
        populate_s = time.perf_counter() - started
        floors, watcher = await list_floor(api, workdir, nodes)

        port = free_port()
        base = f"http://127.0.0.1:{port}"
        started = time.monotonic()
        secret = token()
        controller = start_controller(
            api,
            port,
            workdir / "controller.log",
            controller_args(workdir) if failing else (),
            {"NODESYNC_WEBHOOK_TOKEN": secret} if failing else None,
        )
        pid = controller.pid
        assert pid is not None
        async with aiohttp.ClientSession() as http:
            readiness = await time_until_ready(
                controller,
                http,
                f"{base}/readyz",
                started=started,
                answered=lambda status: status != 0,
                ready=lambda status, _: status == 200,
                interval=0.01,
                request_timeout=1,
            )
            _, body = await http_get(http, f"{base}/metrics")
            nodes_shown = sample_value(body, b"nodesync_nodes")
            assert nodes_shown == nodes, "nodesync_nodes is not the node count"
            assert renew_timestamps(body) == written, "the listed renew times are not the written"
            rss_synced = rss_bytes(pid)
            joined = None
            if joining:
                fresh = [f"join-{i:04d}" for i in range(joining)]
                written_joining, joined = await join(api, http, base, fresh, nodes)
                written = {**written, **written_joining}
            first = nodes - failing
            cohort = (
                await hold(http, base, secret, names[first : first + held]) if failing else None
            )
            assert watcher.pid is not None
            seen = await follow_renewals(
                http, base, api, controller, names, written, seconds, rate, watcher.pid
            )
            catch_up_s, missing = await catch_up(http, base, written, seen.renewals.last_done)
            _, _, last = await scrape_at_rest(http, base, pid, 3)
            body = last or body
            rest, cpu_per_scrape = await scrape_floor(
                http, base, pid, body, workdir, rest_scrapes, floors
            )
            end_watch_floor(watcher, floors)
        return {
            "machine": where,
            "nodes": nodes,
            "populate": {
                "seconds": populate_s,
                "objects": 2 * nodes,
                "objects_per_second": 2 * nodes / populate_s,
            },
            "controller_start": {
                "listening_s": readiness.answered_s,
                "synced_s": readiness.ready_s,
                "rss_bytes_at_sync": rss_synced,
            },
            "floor_list": {
                "start_to_listed_s": floors.list_wall_s,
                "listing_s": floors.list_s,
                "peak_rss_bytes": floors.list_peak_rss_bytes,
            },
            "floor_watch": {
                "cpu_cores_during_renewals": seen.floor_cpu / seen.wall,
                "events": floors.watch_events,
                "peak_rss_bytes": floors.watch_peak_rss_bytes,
            },
            "renewals": {
                "seconds": seconds,
                "target_rate": rate,
                "issued": seen.renewals.issued,
                "ok": seen.renewals.ok,
                "failed": seen.renewals.failed,
                "achieved_rate": seen.renewals.ok / seen.window,
                "max_send_lateness_ms": seen.renewals.max_lateness * 1000,
                "batches": len(seen.renewals.sizes),
                "batch_size": {
                    "mean": statistics.fmean(seen.renewals.sizes) if seen.renewals.sizes else None,
                    "max": max(seen.renewals.sizes, default=None),
                },
                "batch_latency": summary_ms(seen.renewals.latencies),
            },
            "freshness": summary_ms(seen.freshness),
            "propagation_lag": summary_ms(seen.lag),
            "unseen_acknowledged_renewals_at_scrape": {
                "p50": statistics.median(seen.unseen) if seen.unseen else None,
                "max": max(seen.unseen, default=None),
            },
            "catch_up_s": catch_up_s,
            "leases_checked": len(written),
            "leases_missed": missing,
            "controller_cpu_cores_during_renewals": seen.cpu / seen.wall,
            "controller_cpu_seconds_per_scrape": cpu_per_scrape,
            "controller_cpu_cores_during_renewals_without_scrapes": max(
                0.0, (seen.cpu - cpu_per_scrape * len(seen.scrapes)) / seen.wall
            ),
            "apiserver_cpu_cores_during_renewals": seen.api_cpu / seen.wall,
            "scrape_during_renewals": summary_ms(seen.scrapes),
            "scrape_at_rest": summary_ms(rest),
            "floor_scrape_at_rest": summary_ms(floors.scrape),
            "floor_cpu_seconds_per_scrape": floors.scrape_cpu_s,
            "exposition_bytes": len(body),
            "exposition_samples": sum(1 for ln in body.splitlines() if not ln.startswith(b"#")),
            "failing_cohort": {"failing_nodes": failing, "alerts": held, **cohort}
            if cohort
            else None,
            "joining": joined,
            **series(body, nodes + joining),
            "controller_rss_bytes": rss_bytes(pid),
            "controller_peak_rss_bytes": peak_rss_bytes(pid),
        }
    finally:
        if controller is not None:
            controller.stop()
        if watcher is not None:
            watcher.stop()
        await api.close()
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=30.0, help="how long leases are renewed")
    parser.add_argument(
        "--rate",
        type=float,
        default=None,
        help="lease renewals per second (default: the real rate, each Lease renewed every "
        f"{KUBELET_RENEW_INTERVAL:g} s as kubelet does: nodes / {KUBELET_RENEW_INTERVAL:g})",
    )
    parser.add_argument("--rest-scrapes", type=int, default=100, help="scrapes timed at rest")
    parser.add_argument(
        "--failing",
        type=int,
        default=0,
        help="nodes registered NotReady, of an image of their own, with the webhook and the "
        "executor on and an alert held about each (bench.controller_cohort); 0: the controller "
        "alone",
    )
    parser.add_argument(
        "--held",
        type=int,
        default=None,
        help="of the failing nodes, how many get an alert that is held (default: all)",
    )
    parser.add_argument(
        "--joining",
        type=int,
        default=0,
        help="nodes registered once the controller is synced, whose join stages it observes "
        "in the waves' histograms (bench.controller_joins)",
    )
    args = parser.parse_args(argv)
    if args.joining < 0:
        parser.error("--joining: 0 or more")
    if not 0 <= args.failing <= args.nodes:
        parser.error("--failing: from 0 to --nodes")
    if args.held is not None and not 0 <= args.held <= args.failing:
        parser.error("--held: from 0 to --failing")
    rate = args.nodes / KUBELET_RENEW_INTERVAL if args.rate is None else args.rate
    result = run_main(
        run(
            args.nodes,
            args.seconds,
            rate,
            args.rest_scrapes,
            args.failing,
            args.held,
            args.joining,
        )
    )
    result["command"] = command("bench.controller_sync", argv)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
