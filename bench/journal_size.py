"""Benchmark: the webhook's acknowledgement with 250,000 alerts in the journal, against the same
controller with an empty journal (the floor it must stay within 1.5 times of), in one run.

Parts, each its own process talking HTTP on loopback:
- ``nodesync sim apiserver`` (no nodes: every alert is refused ``unknown_node``, as a decision
  and an Event, so the executor's intake runs on every new alert, as deployed);
- ``nodesync controller`` processes with the webhook and the executor, alike but for their
  journal: ``--pairs`` (2) start with an empty journal, as many with a copy of a journal
  holding ``--alerts`` alerts (80% of them
  resolved, every one decided, one delivery row per 1000 alerts recorded plus as many again),
  written before it starts: the alerts through ``Journal.record`` in deliveries of 1000, their
  resolutions the same way, the decisions and the extra delivery rows in one SQL transaction
  (as many rows as hundreds of thousands of ``save_decision`` calls would leave, in seconds);
- ``bench.storm_floor``: a bare aiohttp handler (read, parse JSON, 200), what any receiver costs.

Then the same deliveries go to the three receivers, one request in flight, interleaved round by
round in a rotating order: Alertmanager's life of a group of 10 alerts — the first notification
(10 new alerts), four re-sends (duplicates), one resolving them all — for ``--groups`` groups.
Each acknowledgement is timed from sending to the whole answer; the figures pool the processes
of one kind (on a busy machine one process' share of the CPU moves its figures: the spread
between two of a kind shows how much). Before, in this process, the journal alone:
``Journal.record`` of the same deliveries on an empty journal and a copy of the full one,
interleaved, then a prune pass with nothing to prune and ``alerts_to_decide``; and each
controller's time from its start until /readyz is 200 (its journal opened and checked).

No root needed:

    .venv/bin/python -m bench.journal_size [--alerts 250000] [--groups 150] [--pairs 2]
"""

from __future__ import annotations

import argparse
import json
import random
import secrets
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

from bench.harness.apiserver import SimAPIServer
from bench.harness.processes import Children, nodesync_child, python_child, run_main
from bench.harness.readiness import time_until_ready, wait_port
from bench.harness.report import command, machine
from bench.harness.stats import summary_ms
from exporter.controller.journal import Journal
from exporter.model.alerts import Alert, WebhookPayload
from exporter.model.rfc3339 import format_micro_time
from nodesync_sim.real.process import ChildProcess, free_port

JSONObject = dict[str, Any]
#: The acknowledgement p50 with the full journal may be at most this many times the empty one's.
TARGET_RATIO = 1.5
GROUP = 10
RESENDS = 4
LABELS = {
    "alertname": "NodesyncNewNodeNotReady",
    "nodesync_action": "rollback_node",
    "severity": "critical",
    "job": "nodesync-controller",
    "instance": "10.0.0.1:9618",
    "namespace": "nodesync",
}


def _alert(fingerprint: str, node: str, starts_at: float, status: str = "firing") -> Alert:
    return Alert(
        fingerprint=fingerprint,
        status=status,
        labels={**LABELS, "node": node},
        starts_at=starts_at,
        ends_at=starts_at + 600 if status == "resolved" else None,
        annotations={
            "summary": f"node {node} joined and is not Ready",
            "runbook_url": "https://example.com/runbooks/nodesync#NodesyncNewNodeNotReady",
        },
        generator_url="http://prometheus:9090/graph?g0.expr=nodesync%3Anode_not_ready",
    )


def _payload(alerts: Sequence[Alert], group: str) -> WebhookPayload:
    firing = any(a.status == "firing" for a in alerts)
    return WebhookPayload(
        version="4",
        group_key=f'{{}}:{{alertname="NodesyncNewNodeNotReady", group="{group}"}}',
        status="firing" if firing else "resolved",
        receiver="nodesync-hook",
        alerts=tuple(alerts),
        group_labels={"alertname": "NodesyncNewNodeNotReady"},
        common_labels={"alertname": "NodesyncNewNodeNotReady"},
        external_url="http://alertmanager:9093",
    )


def _json(payload: WebhookPayload) -> bytes:
    """What Alertmanager posts (RFC 3339 with microseconds; zero time for no endsAt)."""
    return json.dumps(
        {
            "version": payload.version,
            "groupKey": payload.group_key,
            "truncatedAlerts": 0,
            "status": payload.status,
            "receiver": payload.receiver,
            "groupLabels": dict(payload.group_labels),
            "commonLabels": dict(payload.common_labels),
            "commonAnnotations": {},
            "externalURL": payload.external_url,
            "alerts": [
                {
                    "status": a.status,
                    "labels": dict(a.labels),
                    "annotations": dict(a.annotations),
                    "startsAt": format_micro_time(a.starts_at),
                    "endsAt": (
                        "0001-01-01T00:00:00Z"
                        if a.ends_at is None
                        else format_micro_time(a.ends_at)
                    ),
                    "generatorURL": a.generator_url,
                    "fingerprint": a.fingerprint,
                }
                for a in payload.alerts
            ],
        }
    ).encode()


def deliveries(groups: int, start: float) -> list[WebhookPayload]:
    """The benchmark's deliveries, in order: per group, the first notification, the re-sends,
    the resolution (fingerprints none of the preloaded alerts has)."""
    out: list[WebhookPayload] = []
    for g in range(groups):
        alerts = [_alert(f"b{g:07x}{i:08x}", f"bench-{g}-{i}", start + g) for i in range(GROUP)]
        for _ in range(1 + RESENDS):
            out.append(_payload(alerts, f"bench-{g}"))
        out.append(
            _payload(
                [_alert(a.fingerprint, a.labels["node"], a.starts_at, "resolved") for a in alerts],
                f"bench-{g}",
            )
        )
    return out


# ---------------------------------------------------------------- the full journal


async def fill_journal(path: Path, alerts: int, now: float) -> dict[str, float]:
    """Write ``alerts`` alerts into a new journal at ``path`` (see the module docstring)."""
    started = time.perf_counter()
    journal = await Journal.open(str(path))
    keys: list[tuple[str, float]] = []
    batch = 1000
    for b in range(0, alerts, batch):
        chunk = [
            _alert(f"{i:016x}", f"node-{i % 5000}", now - 86_400 + i * 0.25)
            for i in range(b, min(alerts, b + batch))
        ]
        keys += [a.key for a in chunk]
        await journal.record(_payload(chunk, f"fill-{b}"), received_at=now - 3600 + b / 1000)
    recorded_s = time.perf_counter() - started
    resolved = keys[: alerts * 4 // 5]
    for b in range(0, len(resolved), batch):
        chunk = [
            _alert(fp, f"node-{int(fp, 16) % 5000}", starts_at, "resolved")
            for fp, starts_at in resolved[b : b + batch]
        ]
        await journal.record(_payload(chunk, f"fill-{b}"), received_at=now - 1800 + b / 1000)
    await journal.close()
    with sqlite3.connect(path, isolation_level=None) as conn:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO decisions (fingerprint, starts_at, verdict, reason, detail, rollback,"
            " node, action, decided_at, wave) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                (
                    fp,
                    s,
                    "refused",
                    "unknown_node",
                    "no such node",
                    "",
                    "n",
                    "rollback_node",
                    now - 1000,
                    "",
                )
                for fp, s in keys
            ),
        )
        conn.execute("UPDATE alerts SET to_decide = 0")
        conn.executemany(
            "INSERT INTO deliveries (received_at, group_key, receiver, status, alerts,"
            " truncated, new, duplicates, resolved) VALUES (?, ?, 'nodesync-hook', 'firing',"
            " 10, 0, 0, 10, 0)",
            ((now - 3600 + i * 0.01, f"g{i % 500}") for i in range(alerts)),
        )
        conn.execute("COMMIT")
    conn.close()
    return {
        "alerts_recorded_s": round(recorded_s, 1),
        "total_s": round(time.perf_counter() - started, 1),
        "file_bytes": _size(path),
    }


def _size(path: Path) -> int:
    return path.stat().st_size


# ---------------------------------------------------------------- the journal alone


async def journal_alone(paths: dict[str, Path], sends: Sequence[WebhookPayload]) -> JSONObject:
    """Journal.record of ``sends`` on each journal, interleaved delivery by delivery (the order
    alternating), then a prune pass with nothing to prune and alerts_to_decide on each, timed
    in this process."""
    journals = {name: await Journal.open(str(path)) for name, path in paths.items()}
    try:
        record: dict[str, list[float]] = {name: [] for name in journals}
        order = list(journals)
        for i, payload in enumerate(sends):
            for name in order if i % 2 == 0 else reversed(order):
                started = time.perf_counter()
                await journals[name].record(payload, received_at=time.time())
                record[name].append(time.perf_counter() - started)
        out: JSONObject = {}
        for name, journal in journals.items():
            started = time.perf_counter()
            await journal.prune(0.0)
            prune_s = time.perf_counter() - started
            started = time.perf_counter()
            todo = await journal.alerts_to_decide()
            decide_s = time.perf_counter() - started
            out[name] = {
                "record": summary_ms(record[name]),
                "prune_nothing_ms": prune_s * 1000,
                "alerts_to_decide_ms": decide_s * 1000,
                "alerts_to_decide": len(todo),
                "counts": journal.last_counts.alerts,
            }
        return out
    finally:
        for journal in journals.values():
            await journal.close()


# ---------------------------------------------------------------- the receivers


class Receiver:
    def __init__(self, name: str, url: str, child: ChildProcess, token: str = "") -> None:
        self.name = name
        self.url = url
        self.child = child
        self.headers = {"Content-Type": "application/json"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self.latencies: list[float] = []
        self.codes: dict[int, int] = {}


def _controller(
    api: SimAPIServer, workdir: Path, name: str, journal: Path, token: str
) -> tuple[ChildProcess, int]:
    port = free_port()
    child = nodesync_child(
        "controller",
        "--kubeconfig",
        str(api.kubeconfig),
        "--web.listen-address",
        f"127.0.0.1:{port}",
        "--journal.path",
        str(journal),
        "--log.level",
        "info",
        log=workdir / f"controller-{name}.log",
        env={"NODESYNC_WEBHOOK_TOKEN": token},
        name=f"controller ({name} journal)",
    )
    return child, port


async def post_all(
    http: aiohttp.ClientSession, receivers: Sequence[Receiver], bodies: Sequence[bytes]
) -> None:
    """Each body to every receiver, one request in flight, the order rotating per round."""
    for i, data in enumerate(bodies):
        turn = i % len(receivers)
        for receiver in [*receivers[turn:], *receivers[:turn]]:
            started = time.perf_counter()
            async with http.post(receiver.url, data=data, headers=receiver.headers) as response:
                await response.read()
                code = response.status
            receiver.latencies.append(time.perf_counter() - started)
            receiver.codes[code] = receiver.codes.get(code, 0) + 1


async def _measure(workdir: Path, alerts: int, groups: int, pairs: int) -> JSONObject:
    now = time.time()
    filled_path = workdir / "filled.db"
    filled = await fill_journal(filled_path, alerts, now)
    sends = deliveries(groups, now - 600)
    alone = await journal_alone(
        {"empty": workdir / "alone-empty.db", "full": _copy(filled_path, workdir / "alone.db")},
        sends,
    )
    # Each kind of journal in ``pairs`` controller processes: what one process' share of the
    # CPU does to its figures shows as the spread between two of the same kind.
    journals: dict[str, Path] = {}
    for k in range(1, pairs + 1):
        journals[f"empty-{k}"] = workdir / f"empty-{k}" / "journal.db"
        journals[f"full-{k}"] = _copy(filled_path, workdir / f"full-{k}" / "journal.db")
    token = secrets.token_urlsafe(24)
    api = SimAPIServer(workdir)
    receivers: list[Receiver] = []
    starts: dict[str, float] = {}
    with Children() as children:
        await api.start()
        try:
            async with aiohttp.ClientSession() as probe:
                for name, path in journals.items():
                    child, port = _controller(api, workdir, name, path, token)
                    started = time.monotonic()
                    children.start(child)
                    url = f"http://127.0.0.1:{port}"
                    ready = await time_until_ready(
                        child,
                        probe,
                        f"{url}/readyz",
                        started=started,
                        answered=lambda status: status != 0,
                        ready=lambda status, _body: status == 200,
                        interval=0.02,
                        request_timeout=2.0,
                        within=300.0,
                    )
                    starts[name] = ready.ready_s
                    receivers.append(Receiver(name, f"{url}/alerts", child, token))
            floor_port = free_port()
            floor = children.start(
                python_child(
                    "bench.storm_floor",
                    "--port",
                    str(floor_port),
                    log=workdir / "floor.log",
                    name="floor",
                )
            )
            receivers.append(Receiver("floor", f"http://127.0.0.1:{floor_port}/alerts", floor))
            await wait_port(floor, floor_port, within=30)
            bodies = [_json(p) for p in sends]
            connector = aiohttp.TCPConnector(limit=len(receivers))
            async with aiohttp.ClientSession(connector=connector) as http:
                warm = bodies[: len(bodies) // 10]
                await post_all(http, receivers, warm)  # connections, caches
                for r in receivers:
                    r.latencies.clear()
                await post_all(http, receivers, bodies)
        finally:
            await api.close()
    pooled: dict[str, list[float]] = {"floor": [], "empty": [], "full": []}
    for r in receivers:
        pooled[r.name.split("-")[0]] += r.latencies
    summaries = {kind: summary_ms(samples) for kind, samples in pooled.items()}
    ratio = summaries["full"]["p50_ms"] / summaries["empty"]["p50_ms"]
    return {
        "machine": machine(),
        "alerts_in_full_journal": alerts,
        "full_journal": filled,
        "deliveries": len(sends),
        "journal_alone": alone,
        "acknowledgement": summaries,
        "acknowledgement_p50_ms_by_process": {
            r.name: summary_ms(r.latencies)["p50_ms"] for r in receivers
        },
        "codes": {r.name: r.codes for r in receivers},
        "p50_full_over_empty": ratio,
        "target": f"<= {TARGET_RATIO}",
        "met": ratio <= TARGET_RATIO,
        "controller_start_s": starts,
    }


def _copy(source: Path, to: Path) -> Path:
    to.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(source, to)
    return to


def table(result: JSONObject) -> str:
    """The figures side by side with their floor."""
    ack = result["acknowledgement"]
    alone = result["journal_alone"]
    rows = [
        (
            "",
            "floor: bare aiohttp",
            "empty journal",
            f"{result['alerts_in_full_journal']:,} alerts",
        ),
    ]
    for q in ("p50_ms", "p90_ms", "p99_ms", "max_ms"):
        rows.append(
            (
                f"acknowledgement {q[:-3]}",
                f"{ack['floor'][q]:.2f} ms",
                f"{ack['empty'][q]:.2f} ms",
                f"{ack['full'][q]:.2f} ms",
            )
        )
    for q in ("p50_ms", "p99_ms"):
        rows.append(
            (
                f"Journal.record alone {q[:-3]}",
                "—",
                f"{alone['empty']['record'][q]:.2f} ms",
                f"{alone['full']['record'][q]:.2f} ms",
            )
        )
    rows.append(
        (
            "prune pass, nothing to prune",
            "—",
            f"{alone['empty']['prune_nothing_ms']:.2f} ms",
            f"{alone['full']['prune_nothing_ms']:.2f} ms",
        )
    )
    rows.append(
        (
            "alerts_to_decide",
            "—",
            f"{alone['empty']['alerts_to_decide_ms']:.2f} ms",
            f"{alone['full']['alerts_to_decide_ms']:.2f} ms",
        )
    )
    starts = result["controller_start_s"]
    by_process = result["acknowledgement_p50_ms_by_process"]

    def each(kind: str, values: dict[str, float], unit: str) -> str:
        return " / ".join(f"{v:.2f} {unit}" for n, v in values.items() if n.startswith(kind))

    rows.append(
        (
            "acknowledgement p50, each controller",
            each("floor", by_process, "ms"),
            each("empty", by_process, "ms"),
            each("full", by_process, "ms"),
        )
    )
    rows.append(
        (
            "controller start until /readyz is 200",
            "—",
            each("empty", starts, "s"),
            each("full", starts, "s"),
        )
    )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    verdict = "met" if result["met"] else "NOT met"
    lines.append(
        f"p50 with the full journal / p50 with the empty one: {result['p50_full_over_empty']:.2f}"
        f" (target <= {TARGET_RATIO}: {verdict})"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--alerts", type=int, default=250_000, help="alerts in the full journal")
    parser.add_argument("--groups", type=int, default=150, help="groups of 10 alerts sent")
    parser.add_argument(
        "--pairs", type=int, default=2, help="controllers with each kind of journal"
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    random.seed(args.seed)
    workdir = Path(tempfile.mkdtemp(prefix="nodesync-bench-journal-"))
    try:
        result = run_main(_measure(workdir, args.alerts, args.groups, args.pairs))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result["command"] = command("bench.journal_size", argv)
    print(json.dumps(result, indent=2))
    print(table(result))
    return 0 if result["met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
