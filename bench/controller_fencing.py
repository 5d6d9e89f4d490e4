"""Benchmark: how soon a delivered alert reaches the API server as a rollback, and how soon its
node is fenced when the delivery also brings 100 alerts the guards refuse.

Every part is real and its own process, as in a cluster:

- a kube-apiserver 1.20 with etcd (nodesync_sim.real.kube_apiserver; built by
  scripts/setup-kube-apiserver), the NodeRollback CRD installed, its audit log recording every
  request with microsecond timestamps;
- ``nodesync controller`` with the webhook and the executor, as admin, with the default write
  budget (``--apiserver.qps 5``, ``--apiserver.burst 10``), the blast-radius caps opened so that
  every failing node may be rolled back.

Nodes: ``--rounds`` failing ones (NotReady, joined a moment ago), one per delivery, and
``--refused`` protected ones (``nodesync.io/protected=true``: every alert about them is refused,
with its journal commit, a read of the Node and a ``NodesyncRefused`` Event). Each round sends,
one after the other and each on an idle controller (its write budget full again, no rollback
active):

- ``alone``: a delivery of one alert about a failing node;
- ``mixed``: a delivery of one alert for each protected node (a new episode: new startsAt) and,
  last, one about a failing node.

Measured for each delivery, from just before it is sent (the benchmark's clock) to the end of a
request as the API server's audit log records it (``stageTimestamp``, ResponseComplete; the same
machine's clock): the webhook's acknowledgement (the floor of the first write), the NodeRollback's
creation (the rollback's first write; also when the server received it, which splits the time
between the controller and the server), and the failing node's cordon. Targets: first write p99 ≤
50 ms on an idle controller (``alone``), cordon ≤ 1 s in ``mixed`` (its floor: ``alone``'s). After
each delivery the NodeRollback is deleted (the rollback stops before its next step) and the
benchmark waits until the controller is idle again (every refusal's Event written, the budget
full).

    .venv/bin/python -m bench.controller_fencing [--rounds 20] [--refused 100] [--modes alone,mixed]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from bench.harness.objects import registered_node
from bench.harness.processes import Children, nodesync_child, run_main
from bench.harness.readiness import wait_http
from bench.harness.report import command, machine
from bench.harness.stats import summary_ms
from bench.harness.webhook import alert, delivery
from exporter.model.rfc3339 import parse_time
from nodesync_sim.real.kube_apiserver import ADMIN, LocalKubeAPIServer
from nodesync_sim.real.process import free_port

ROOT = Path(__file__).resolve().parents[1]
CRD = ROOT / "deploy" / "base" / "noderollback-crd.yaml"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
NODEROLLBACKS = "/apis/nodesync.io/v1alpha1/noderollbacks"
MODES = ("alone", "mixed")
#: The controller's write budget when no write waits (``--apiserver.burst``'s default).
FULL_BUDGET = 10.0


def binaries() -> tuple[str, str]:
    found = subprocess.run(
        [str(ROOT / "scripts" / "setup-kube-apiserver"), "--print-path", "--no-build"],
        capture_output=True,
        text=True,
        check=False,
    )
    etcd = shutil.which("etcd") or shutil.which("etcd", path="/usr/bin:/usr/sbin")
    if found.returncode != 0 or not found.stdout.strip() or etcd is None:
        raise SystemExit("needs kube-apiserver (scripts/setup-kube-apiserver) and etcd")
    return found.stdout.strip(), etcd


def install_crd(server: LocalKubeAPIServer) -> None:
    server.ok("POST", CRDS, yaml.safe_load(CRD.read_text()))
    server.wait_for(
        lambda: server.request("GET", NODEROLLBACKS).status == 200,
        "the NodeRollback CRD to be served",
        timeout=30,
    )


def node(name: str, index: int, *, protected: bool) -> dict[str, Any]:
    """A Node kubelet registered a moment ago and that is NotReady since."""
    registered = registered_node(name, index, time.time() - 5)
    for condition in registered["status"]["conditions"]:
        if condition["type"] == "Ready":
            condition.update(status="False", reason="KubeletNotReady")
    if protected:
        registered["metadata"]["labels"]["nodesync.io/protected"] = "true"
    return registered


def completed(event: dict[str, Any]) -> float:
    done = parse_time(str(event["stageTimestamp"]))
    assert done is not None
    return done


def received(event: dict[str, Any]) -> float:
    """When the server received the request (its ``requestReceivedTimestamp``)."""
    at = parse_time(str(event["requestReceivedTimestamp"]))
    assert at is not None
    return at


def is_create_for(name: str) -> Callable[[dict[str, Any]], bool]:
    def match(event: dict[str, Any]) -> bool:
        ref = event.get("objectRef") or {}
        spec = (event.get("requestObject") or {}).get("spec") or {}
        return (
            event["verb"] == "create"
            and ref.get("resource") == "noderollbacks"
            and spec.get("nodeName") == name
        )

    return match


def is_cordon_of(name: str) -> Callable[[dict[str, Any]], bool]:
    def match(event: dict[str, Any]) -> bool:
        ref = event.get("objectRef") or {}
        spec = (event.get("requestObject") or {}).get("spec") or {}
        return (
            event["verb"] == "patch"
            and ref.get("resource") == "nodes"
            and ref.get("name") == name
            and not ref.get("subresource")
            and spec.get("unschedulable") is True
        )

    return match


class Audit:
    """The API server's audit log, read on from where the last read stopped."""

    def __init__(self, server: LocalKubeAPIServer) -> None:
        self._path = server.audit_log
        self._offset = 0
        self.events: list[dict[str, Any]] = []

    def read(self) -> None:
        with self._path.open("rb") as f:
            f.seek(self._offset)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1
        self._offset += end
        for line in chunk[:end].splitlines():
            event = json.loads(line)
            if event.get("stage") == "ResponseComplete":
                self.events.append(event)

    async def first(
        self, predicate: Callable[[dict[str, Any]], bool], within: float = 120.0
    ) -> dict[str, Any]:
        deadline = time.monotonic() + within
        while True:
            self.read()
            found = next((e for e in self.events if predicate(e)), None)
            if found is not None:
                return found
            if time.monotonic() > deadline:
                raise AssertionError("no matching request in the audit log")
            await asyncio.sleep(0.05)


async def write_tokens(http: aiohttp.ClientSession, base: str) -> float:
    """``nodesync_api_write_tokens``: the controller's write budget left now."""
    async with http.get(f"{base}/metrics") as response:
        body = await response.read()
    for line in body.splitlines():
        if line.startswith(b"nodesync_api_write_tokens "):
            return float(line.split()[1])
    raise AssertionError("no nodesync_api_write_tokens in /metrics")


async def wait_idle(http: aiohttp.ClientSession, base: str, within: float = 300.0) -> None:
    """Until the write budget is full again: no write has waited for a token for 2 s (every
    refusal's Event is written, the stopped rollback made its last write)."""
    deadline = time.monotonic() + within
    while True:
        tokens = await write_tokens(http, base)
        if tokens >= FULL_BUDGET - 0.01:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the controller is not idle: {tokens:g} write tokens")
        await asyncio.sleep(0.1)


def stop_rollbacks(server: LocalKubeAPIServer) -> None:
    """Delete every NodeRollback: each stops before its next step."""
    for item in server.ok("GET", NODEROLLBACKS)["items"]:
        server.request("DELETE", f"{NODEROLLBACKS}/{item['metadata']['name']}")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    where = machine()
    workdir = Path(tempfile.mkdtemp(prefix="nodesync-bench-"))
    server = LocalKubeAPIServer(*binaries())
    token = secrets.token_urlsafe(24)
    times: dict[str, dict[str, list[float]]] = {
        m: {"ack": [], "first_write_received": [], "first_write": [], "cordon": []}
        for m in args.modes
    }
    try:
        server.start()
        install_crd(server)
        failing = [f"failing-{i:03d}" for i in range(2 * args.rounds)]
        protected = [f"protected-{i:03d}" for i in range(args.refused)]
        for index, name in enumerate(failing):
            server.ok("POST", "/api/v1/nodes", node(name, index, protected=False))
        for index, name in enumerate(protected):
            server.ok("POST", "/api/v1/nodes", node(name, index, protected=True))
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        with Children() as children:
            controller = children.start(
                nodesync_child(
                    "controller",
                    "--kubeconfig",
                    str(server.kubeconfig(ADMIN)),
                    "--web.listen-address",
                    f"127.0.0.1:{port}",
                    "--journal.path",
                    str(workdir / "journal.db"),
                    "--guard.max-rollbacks",
                    "100000",
                    "--guard.max-rollback-fraction",
                    "1",
                    "--log.level",
                    "warning",
                    log=workdir / "controller.log",
                    env={"NODESYNC_WEBHOOK_TOKEN": token},
                )
            )
            await wait_http(controller, f"{base}/readyz", within=120)
            audit = Audit(server)
            headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
            async with aiohttp.ClientSession() as http:
                await wait_idle(http, base)
                names = iter(failing)
                for _ in range(args.rounds):
                    for mode in args.modes:
                        target = next(names)
                        refused = [] if mode == "alone" else protected
                        starts = time.time() - 30
                        body = delivery(
                            [*(alert(n, starts) for n in refused), alert(target, starts)]
                        )
                        sent = time.time()
                        async with http.post(
                            f"{base}/alerts", data=body, headers=headers
                        ) as answer:
                            await answer.read()
                            acked = time.time()
                            assert answer.status == 200, answer.status
                        created = await audit.first(is_create_for(target))
                        cordon = await audit.first(is_cordon_of(target))
                        times[mode]["ack"].append(acked - sent)
                        times[mode]["first_write_received"].append(received(created) - sent)
                        times[mode]["first_write"].append(completed(created) - sent)
                        times[mode]["cordon"].append(completed(cordon) - sent)
                        stop_rollbacks(server)
                        await wait_idle(http, base)
    finally:
        server.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    summary = {m: {k: summary_ms(v) for k, v in kinds.items()} for m, kinds in times.items()}
    return {
        "machine": where,
        "load_average_1m_at_end": os.getloadavg()[0],
        "command": command("bench.controller_fencing", args.argv),
        "rounds": args.rounds,
        "refused_per_mixed_delivery": args.refused,
        **summary,
        "samples_s": times if args.samples else None,
    } | (
        {
            "cordon_p99_mixed_over_alone": summary["mixed"]["cordon"]["p99_ms"]
            / summary["alone"]["cordon"]["p99_ms"]
        }
        if set(MODES) <= set(args.modes)
        else {}
    )


def modes(value: str) -> tuple[str, ...]:
    chosen = tuple(m for m in value.split(",") if m)
    if not chosen or not set(chosen) <= set(MODES):
        raise argparse.ArgumentTypeError(f"modes are {', '.join(MODES)}, comma-separated")
    return chosen


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--refused", type=int, default=100)
    parser.add_argument(
        "--modes",
        type=modes,
        default=MODES,
        help="which deliveries each round sends, comma-separated: alone, mixed (both)",
    )
    parser.add_argument(
        "--samples", help="write every round's times (seconds, by mode and figure) to this file"
    )
    args = parser.parse_args(argv)
    args.argv = argv
    result = run_main(run(args))
    samples = result.pop("samples_s")
    if args.samples:
        Path(args.samples).write_text(json.dumps(samples))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
