"""Benchmark: a container's exit or OOM kill -> visible in the agent's /metrics, beside a bare
subscriber to containerd's events, at 110 pods on a real containerd.

One run, both measured on the same events:
- **bare subscriber** (the floor): this process subscribes to containerd's events service
  through the generated stubs, nothing else; the time from the cause to the event's arrival;
- **agent**: a real ``nodesync agent`` process with ``--sync.period=300s`` (so only its task
  events can explain a change within the run) and no stats; the time from the cause to the
  first scrape of its /metrics that counts the termination. Scrapes run back to back (each a
  few ms), so this includes up to one scrape of delay;
- **CRI status** (where the floor of any CRI reader is): in rounds of their own, this process
  asks ContainerStatus back to back after the kill until it says exited. containerd's CRI
  plugin deletes the exited task before it updates the container, so this comes tens of ms
  after the event.

Each exit round starts a container in a pod of its own beside the 110 pods' containers, then
sends its PID 1 a SIGTERM it traps (exit 3, reason Error): the cause's time is the kill. Each
OOM round starts a container with a 32 MiB limit that allocates 200 MB after 0.3 s; the cause's
time is containerd's timestamp of its first /tasks/oom. Rounds run one after the other.

Run as root on a machine with containerd, runc and busybox-static (scripts/setup installs them):

    .venv/bin/python -m bench.agent_events [--pods 110] [--exits 100] [--ooms 20]
        [--containerd-bin DIR]   (e.g. the usr/bin of a release scripts/setup-containerd unpacked)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
import time
import uuid
from pathlib import Path

import grpc.aio

from bench.agent_sync import create_pods, reports_pods, scrape, start_agent
from bench.harness.processes import Children, python_child
from bench.harness.readiness import wait_port, wait_until
from bench.harness.report import command, machine, run_main
from bench.harness.samplers import peak_rss_bytes
from bench.harness.stats import summary_ms
from exporter.cri.events import filters
from exporter.cri.pb import api_pb2, api_pb2_grpc, events_pb2, events_pb2_grpc, task_events_pb2
from nodesync_sim.real.containerd import LocalContainerd
from nodesync_sim.real.process import ChildProcess, free_port
from nodesync_sim.real.runtime_pods import ContainerSpec, Pod, restart_container, run_pod


def _sample(reason: bytes) -> bytes:
    return b'nodesync_container_terminations_total{reason="' + reason + b'"} '


#: How long ContainerStatus may take to say exited after the kill before the run fails.
CRI_WITHIN_SECONDS = 30.0
OOM_COMMAND = ["/bin/sh", "-c", "sleep 0.3; head -c 200m /dev/zero | tail"]


class BareSubscriber:
    """containerd's exit and OOM events as they arrive here: (arrival, event time) by id."""

    def __init__(self, endpoint: str) -> None:
        self._channel = grpc.aio.insecure_channel(endpoint)
        self.exits: dict[str, float] = {}
        self.ooms: dict[str, float] = {}  # the first /tasks/oom's containerd timestamp
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        stub = events_pb2_grpc.EventsStub(self._channel)
        call = stub.Subscribe(events_pb2.SubscribeRequest(filters=filters()))
        self._task = asyncio.create_task(self._read(call))

    async def _read(self, call: object) -> None:
        async for envelope in call:  # type: ignore[attr-defined]
            arrived = time.time()
            if envelope.topic == "/tasks/exit":
                exit_ = task_events_pb2.TaskExit.FromString(envelope.event.value)
                self.exits.setdefault(exit_.container_id, arrived)
            elif envelope.topic == "/tasks/oom":
                oom = task_events_pb2.TaskOOM.FromString(envelope.event.value)
                at = envelope.timestamp.seconds + envelope.timestamp.nanos / 1e9
                self.ooms.setdefault(oom.container_id, at)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._channel.close(None)


async def _pid_of(args: list[str], within: float = 10.0) -> int:
    """The process running ``args``: once StartContainer returned, runc's init may still be
    about to exec it."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        pid = _scan("\0".join(args).encode() + b"\0")
        if pid is not None:
            return pid
        await asyncio.sleep(0.005)
    raise RuntimeError(f"no process runs {args}")


async def _trapping(args: list[str], seconds: int) -> int:
    """The container's shell once it traps SIGTERM: its ``sleep`` runs, which it starts only
    after the trap. The shell is the container's PID 1, which ignores a signal it has no
    handler for: killed before its trap, the container would never exit."""
    await _pid_of(["sleep", str(seconds)])
    return await _pid_of(args)


def _scan(cmdline: bytes) -> int | None:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError), open(f"/proc/{entry}/cmdline", "rb") as f:
                if f.read() == cmdline:
                    return int(entry)
    return None


async def _counted(port: int, reason: bytes, above: float, within: float = 30.0) -> float:
    """Scrape back to back until the termination count of ``reason`` exceeds ``above``; the
    time of that scrape's answer."""
    deadline = time.monotonic() + within
    sample = _sample(reason)
    while time.monotonic() < deadline:
        body = await asyncio.to_thread(scrape, port)
        for line in body.splitlines():
            if line.startswith(sample) and float(line.split()[-1]) > above:
                return time.time()
    raise TimeoutError(f"the agent did not count a {reason.decode()} within {within} s")


async def _arrival(seen: dict[str, float], cid: str, within: float = 10.0) -> float:
    """When the bare subscriber got ``cid``'s event: the agent, publishing from the same event,
    can show it before this process's own subscriber task has run."""
    deadline = time.monotonic() + within
    while cid not in seen:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the bare subscriber got no event of {cid} within {within} s")
        await asyncio.sleep(0.001)
    return seen[cid]


async def _start(pod: Pod, endpoint: str, spec: ContainerSpec) -> str:
    pod.specs[spec.name] = spec
    pod.attempts.setdefault(spec.name, -1)
    return await restart_container(endpoint, pod, spec.name)


async def _rounds(
    containerd: LocalContainerd, port: int, bare: BareSubscriber, exits: int, ooms: int
) -> dict[str, list[float]]:
    endpoint = containerd.endpoint
    pod = await run_pod(endpoint, "bench-events", "bench", str(uuid.uuid4()), [])
    out: dict[str, list[float]] = {k: [] for k in ("exit_bare", "exit_agent", "oom_agent")}
    out["exit_cri"] = []
    out["oom_exit_bare"] = []
    for n in range(exits):
        args = ["/bin/sh", "-c", f"trap 'exit 3' TERM; sleep {900000 + n} & wait"]
        await _start(pod, endpoint, ContainerSpec("exits", args))
        pid = await _trapping(args, 900000 + n)
        before = await _count(port, b"Error")
        killed = time.time()
        os.kill(pid, signal.SIGTERM)
        visible = await _counted(port, b"Error", before)
        cid = pod.container_ids["exits"]
        out["exit_agent"].append(visible - killed)
        out["exit_bare"].append(await _arrival(bare.exits, cid) - killed)
    async with grpc.aio.insecure_channel(endpoint) as channel:
        runtime = api_pb2_grpc.RuntimeServiceStub(channel)
        for n in range(exits // 2):
            args = ["/bin/sh", "-c", f"trap 'exit 3' TERM; sleep {950000 + n} & wait"]
            cid = await _start(pod, endpoint, ContainerSpec("cri", args))
            pid = await _trapping(args, 950000 + n)
            killed = time.time()
            os.kill(pid, signal.SIGTERM)
            while time.time() - killed < CRI_WITHIN_SECONDS:
                status = await runtime.ContainerStatus(
                    api_pb2.ContainerStatusRequest(container_id=cid), timeout=5.0
                )
                if status.status.state == api_pb2.CONTAINER_EXITED:
                    break
            else:
                raise TimeoutError(
                    f"container {cid} not exited {CRI_WITHIN_SECONDS} s after the kill"
                )
            out["exit_cri"].append(time.time() - killed)
    for _ in range(ooms):
        before = await _count(port, b"OOMKilled")
        await _start(pod, endpoint, ContainerSpec("ooms", OOM_COMMAND, 32 * 1024 * 1024))
        cid = pod.container_ids["ooms"]
        try:
            visible = await _counted(port, b"OOMKilled", before)
        except TimeoutError as exc:
            body = await asyncio.to_thread(scrape, port)
            counts = [ln for ln in body.splitlines() if ln.startswith(b"nodesync_container_")]
            raise TimeoutError(
                f"{exc}: container {cid}, its OOM seen by the bare subscriber "
                f"{cid in bare.ooms}, its exit {cid in bare.exits}; the agent's {counts}"
            ) from exc
        oomed = await _arrival(bare.ooms, cid)
        out["oom_agent"].append(visible - oomed)
        # The container's exit comes after its OOM event by what the kernel takes to kill and
        # the runtime to reap: no termination can be shown before it.
        out["oom_exit_bare"].append(await _arrival(bare.exits, cid) - oomed)
    return out


async def _count(port: int, reason: bytes) -> float:
    body = await asyncio.to_thread(scrape, port)
    sample = _sample(reason)
    for line in body.splitlines():
        if line.startswith(sample):
            return float(line.split()[-1])
    return 0.0


async def run(
    pods: int, exits: int, ooms: int, bin_dir: str | None, argv: list[str] | None = None
) -> dict[str, object]:
    where = machine()
    workdir = Path(tempfile.mkdtemp(prefix="nodesync-bench-"))
    kubelet_root = workdir / "kubelet"
    kubelet_root.mkdir()
    containerd = LocalContainerd(bin_dir=bin_dir)
    await asyncio.to_thread(containerd.start)
    agent: ChildProcess | None = None
    bare = BareSubscriber(containerd.endpoint)
    children = Children()
    try:
        kubelet_port = free_port()
        stand_in = children.start(
            python_child(
                "bench.kubelet_healthz", "--port", str(kubelet_port), log=workdir / "kubelet.log"
            )
        )
        await wait_port(stand_in, kubelet_port, within=30)
        await create_pods(containerd.endpoint, pods)
        port = free_port()
        agent = start_agent(
            containerd,
            port,
            kubelet_root,
            f"http://127.0.0.1:{kubelet_port}/healthz",
            workdir / "agent.log",
            sync_period="300s",
            extra=("--stats.period", "0s"),
        )
        await wait_until(agent, lambda: reports_pods(port, pods), within=60, what="synced")
        await bare.start()
        measured = await _rounds(containerd, port, bare, exits, ooms)
        rss = peak_rss_bytes(agent.pid) if agent.pid is not None else None
        return {
            "benchmark": "agent_events",
            "command": command("bench.agent_events", argv),
            "machine": where,
            "containerd": containerd.version(),
            "pods": pods,
            "exit_to_bare_subscriber": summary_ms(measured["exit_bare"]),
            "exit_to_agent_metrics": summary_ms(measured["exit_agent"]),
            "exit_to_cri_status_exited": summary_ms(measured["exit_cri"]),
            "agent_minus_bare_per_exit": summary_ms(
                [a - b for a, b in zip(measured["exit_agent"], measured["exit_bare"], strict=True)]
            ),
            "oom_event_to_agent_metrics": summary_ms(measured["oom_agent"]),
            "oom_event_to_exit_at_bare_subscriber": summary_ms(measured["oom_exit_bare"]),
            "oom_exit_at_bare_subscriber_to_agent_metrics": summary_ms(
                [
                    a - b
                    for a, b in zip(measured["oom_agent"], measured["oom_exit_bare"], strict=True)
                ]
            ),
            "agent_peak_rss_bytes": rss,
            "load_average_1m_at_end": os.getloadavg()[0],
        }
    finally:
        await bare.close()
        if agent is not None:
            agent.stop()
        children.stop_all()
        await asyncio.to_thread(containerd.cleanup)
        shutil.rmtree(workdir, ignore_errors=True)


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pods", type=int, default=110)
    parser.add_argument("--exits", type=int, default=100)
    parser.add_argument("--ooms", type=int, default=20)
    parser.add_argument("--containerd-bin", default=None)


def main(argv: list[str] | None = None) -> int:
    return run_main(
        __doc__,
        argv,
        _options,
        lambda args: run(args.pods, args.exits, args.ooms, args.containerd_bin, argv),
    )


if __name__ == "__main__":
    raise SystemExit(main())
