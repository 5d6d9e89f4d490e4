"""Benchmark: an agent's watches of its own Node, Lease and pods (``NodeObjects``) at 110 pods.

The test API server (``nodesync sim apiserver``, a child process on loopback) holds one Node, its
Lease, the pods bound to that node and many more pods bound to other nodes, so the agent's field
selector (spec.nodeName) has real work to do. Measured:

- **API view, in process**: for each round, a fresh ``KubeAPI`` and ``NodeObjects`` (its three
  informers: own Node, own Lease, pods bound to the node; no initial jitter), timed from
  ``run()`` until ``.synced``;
- **full agent**: a real ``nodesync agent`` process with ``--node.name`` and ``--kubeconfig``,
  watching a private real containerd that runs the same pods (same uids as in the API server,
  and a kubelet pod directory for each), timed from process start until /metrics shows every
  pod Running from the API server, every drift count at 0 and the containers' stats (its
  kubelet probe asks a stand-in, bench.kubelet_healthz, over a kept connection, as on a node;
  until 2026-12-06 it went to a port nobody served, a refused connection every probe); then its
  RSS and peak RSS (VmHWM) after 20 scrapes, and a last check, once the drift grace period is
  over and two more cycles ran, that drift is still 0 everywhere (the uids really match), with
  RSS and peak again, the agent's own sync cycles (``nodesync_sync_duration_seconds``) and how
  often it read the state and the stats (``nodesync_cri_request_duration_seconds_count``);
- **floor**: in the same run, once the agent is stopped, ``bench.agent_floor`` (a bare
  interpreter with grpcio, aiohttp and prometheus_client: the same calls to the same
  containerd as bytes, the default registry on /metrics, containerd's events followed), timed
  and measured as the agent: 20 scrapes, RSS and peak, and again after the same wait;
- for each of the two, once its memory is read: where its resident set is (/proc/<pid>/smaps:
  anonymous and file-backed, threads, the mappings holding most), and its CPU seconds over
  ``--cpu-periods`` sync periods on an idle runtime, no scrape meanwhile: the agent's against
  the floor's, which makes the same relist calls bare at the same period;
- with ``--tracemalloc``, the agent runs under bench.agent_traced and the run also gives what
  of its memory Python allocated, and where; with ``--cprofile``, under bench.agent_profiled,
  and the run gives where its event loop's thread spent the CPU window (either way its RSS and
  CPU are then not the deployed agent's);
  ``--env NAME=VALUE`` sets a variable for both the agent and the floor (MALLOC_ARENA_MAX=2;
  GRPC_TRACE with GRPC_VERBOSITY to see what grpc's threads do), ``--logs DIR`` keeps both
  processes' output there, ``--floor-arg ARG`` passes ARG to bench.agent_floor (its ways of
  calling as the agent does).

Run as root (containerd needs it) on a machine with containerd, runc and busybox-static
(scripts/setup installs them):

    .venv/bin/python -m bench.agent_node_objects [--pods 110] [--other-pods 2000] [--rounds 10]
        [--sync-period 10] [--stats-period 60] [--cpu-periods 6] [--env NAME=VALUE]...
        [--tracemalloc] [--cprofile] [--logs DIR] [--floor-arg ARG]...
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.harness.apiserver import JSONObject, SimAPIServer
from bench.harness.exposition import sample_value, samples
from bench.harness.objects import lease_body, lease_path, registered_node
from bench.harness.pacing import bounded
from bench.harness.processes import nodesync_child, python_child, run_main
from bench.harness.readiness import time_until_ready, wait_port
from bench.harness.report import command, machine
from bench.harness.samplers import cpu_over, memory_map, peak_rss_bytes, rss_bytes
from bench.harness.stats import percentile
from exporter.agent.node_objects import NodeObjects
from exporter.kube.api import KubeAPI
from exporter.kube.config import load_configuration
from exporter.model.rfc3339 import format_micro_time, format_time
from nodesync_sim.real.containerd import IMAGE_REF, LocalContainerd
from nodesync_sim.real.process import ChildProcess, free_port
from nodesync_sim.real.runtime_pods import ContainerSpec, run_pod

NODE = "bench-node"
NAMESPACE = "default"
DRIFT_KINDS = frozenset(
    {"orphan_sandbox", "missing_sandbox", "orphan_container", "stale_sandbox", "kubelet_only"}
)
#: Short, so the first drift computation already judges pods and sandboxes created seconds ago.
DRIFT_GRACE_SECONDS = 1.0
#: The modules that run the agent to tell where its memory (TRACED) or its CPU (PROFILED) went.
TRACED = "bench.agent_traced"
PROFILED = "bench.agent_profiled"


def pod_body(name: str, node: str, index: int) -> JSONObject:
    """A Deployment's pod as the scheduler leaves it (about 2 KB of JSON)."""
    app = f"app-{index % 40}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {"app": app, "pod-template-hash": "7d4b9c8f6d", "tier": "backend"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-30T00:00:00Z"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{app}-7d4b9c8f6d",
                    "uid": f"00000000-0000-0000-0000-{index % 40:012d}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "schedulerName": "default-scheduler",
            "priority": 0,
            "containers": [
                {
                    "name": "app",
                    "image": IMAGE_REF,
                    "command": ["/bin/sleep", "inf"],
                    "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                    "env": [
                        {"name": "LOG_LEVEL", "value": "info"},
                        {
                            "name": "POD_NAME",
                            "valueFrom": {
                                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}
                            },
                        },
                    ],
                    "resources": {
                        "requests": {"cpu": "10m", "memory": "16Mi"},
                        "limits": {"memory": "64Mi"},
                    },
                    "readinessProbe": {
                        "httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"},
                        "periodSeconds": 10,
                        "timeoutSeconds": 1,
                        "successThreshold": 1,
                        "failureThreshold": 3,
                    },
                    "volumeMounts": [
                        {
                            "name": "kube-api-access",
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                            "readOnly": True,
                        }
                    ],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "volumes": [
                {
                    "name": "kube-api-access",
                    "projected": {
                        "defaultMode": 420,
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}
                        ],
                    },
                }
            ],
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
        },
    }


def running_status(index: int) -> JSONObject:
    """The status kubelet reports for a pod whose one container runs."""
    now = format_time(time.time())

    def condition(type_: str) -> JSONObject:
        return {"type": type_, "status": "True", "lastTransitionTime": now}

    return {
        "status": {
            "phase": "Running",
            "conditions": [
                condition("PodReadyToStartContainers"),
                condition("Initialized"),
                condition("Ready"),
                condition("ContainersReady"),
                condition("PodScheduled"),
            ],
            "hostIP": "10.0.0.1",
            "podIP": f"10.64.{index // 256}.{index % 256}",
            "startTime": now,
            "qosClass": "Burstable",
            "containerStatuses": [
                {
                    "name": "app",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "image": IMAGE_REF,
                    "imageID": IMAGE_REF,
                    "containerID": f"containerd://{index:064x}",
                    "state": {"running": {"startedAt": now}},
                }
            ],
        }
    }


async def populate(api: SimAPIServer, pods: int, other_pods: int) -> list[JSONObject]:
    """The Node, its Lease, ``pods`` pods bound to it and ``other_pods`` bound to 20 other
    nodes, all Running; returns the pods bound to this node as the API server stored them."""
    node = await api.create("/api/v1/nodes", registered_node(NODE, 0, time.time()))
    await api.create(lease_path(), lease_body(node, format_micro_time(time.time())))
    bodies = [pod_body(f"mine-{i:03d}", NODE, i) for i in range(pods)]
    bodies += [pod_body(f"other-{i:05d}", f"other-{i % 20:02d}", i) for i in range(other_pods)]
    base = f"/api/v1/namespaces/{NAMESPACE}/pods"
    created = await bounded([api.create(base, b) for b in bodies], 32)
    await bounded(
        [
            api.merge_patch(f"{base}/{p['metadata']['name']}/status", running_status(i))
            for i, p in enumerate(created)
        ],
        32,
    )
    return created[:pods]


def healthy(body: bytes, pods: int, *, stats: bool = True) -> bool:
    """Every bound pod Running in the API server's view, drift reported and 0 for each kind,
    and the containers' stats exported (when ``stats``: the agent reads them)."""
    phases = samples(body, "nodesync_pods")
    running = phases.get(frozenset({("phase", "Running"), ("source", "apiserver")}))
    drift = {dict(k)["kind"]: v for k, v in samples(body, "nodesync_drift_pods").items()}
    read = sample_value(body, b"nodesync_runtime_stats_timestamp_seconds") is not None
    drift_zero = set(drift) == DRIFT_KINDS and not any(drift.values())
    return running == pods and drift_zero and read == stats


def cri_calls(body: bytes, operation_type: str) -> float:
    """How many CRI calls of one kind the agent made so far."""
    name = b"nodesync_cri_request_duration_seconds_count"
    return sample_value(body, b'%s{operation_type="%s"}' % (name, operation_type.encode())) or 0


async def time_api_view(kubeconfig: str, pods: int, rounds: int) -> dict[str, object]:
    synced: list[float] = []
    for _ in range(rounds):
        configuration = await load_configuration(kubeconfig)
        api = KubeAPI(configuration)
        view = NodeObjects(api, NODE, initial_jitter_seconds=0)
        started = time.perf_counter()
        task = asyncio.create_task(view.run())
        try:
            while not view.synced:
                if task.done() or time.perf_counter() - started > 30:
                    raise RuntimeError(f"API view did not sync: {view.error}")
                await asyncio.sleep(0.001)
            synced.append(time.perf_counter() - started)
            listed = view.pods()
            assert listed is not None, "the pods were not listed"
            assert len(listed) == pods, "not every bound pod was listed"
            assert view.node() is not None, "no Node"
            assert view.lease() is not None, "no Lease"
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await api.close()
    ordered = sorted(synced)
    return {
        "rounds": rounds,
        "first_ms": synced[0] * 1000,
        "median_ms": statistics.median(ordered) * 1000,
        "p90_ms": percentile(ordered, 0.9) * 1000,
        "max_ms": ordered[-1] * 1000,
    }


async def run_runtime_pods(endpoint: str, pods: list[JSONObject], parallel: int = 4) -> None:
    """Run each API pod in containerd under its namespace, name and server-assigned uid."""
    sleeper = [ContainerSpec("app", ["/bin/sleep", "inf"])]
    await bounded(
        [
            run_pod(endpoint, p["metadata"]["name"], NAMESPACE, p["metadata"]["uid"], sleeper)
            for p in pods
        ],
        parallel,
    )


def make_kubelet_root(path: Path, pods: list[JSONObject]) -> None:
    """kubelet's root with a pod directory per running pod, as kubelet keeps them."""
    for p in pods:
        (path / "pods" / p["metadata"]["uid"]).mkdir(parents=True)


def start_agent(
    api: SimAPIServer,
    containerd: LocalContainerd,
    kubelet_root: Path,
    healthz: str,
    port: int,
    sync_period: float,
    stats_period: float,
    log: Path,
    env: dict[str, str],
    under: tuple[str, Path] | None = None,
) -> ChildProcess:
    """A real ``nodesync agent`` with the API view, as deployed, on the private containerd;
    when ``under`` is given, run by that module (bench.agent_traced, bench.agent_profiled),
    which writes its findings to that path."""
    args = (
        "agent",
        "--node.name",
        NODE,
        "--kubeconfig",
        str(api.kubeconfig),
        "--apiserver.initial-jitter",
        "0s",
        "--cri.endpoint",
        containerd.endpoint,
        "--containerd.root",
        str(containerd.root),
        "--kubelet.root-dir",
        str(kubelet_root),
        "--kubelet.healthz-url",
        healthz,
        "--sync.period",
        f"{sync_period}s",
        "--stats.period",
        f"{stats_period}s",
        "--drift.grace-period",
        f"{DRIFT_GRACE_SECONDS}s",
        "--web.listen-address",
        f"127.0.0.1:{port}",
        "--log.level",
        "warning",
    )
    child = (
        nodesync_child(*args, log=log, env=env)
        if under is None
        else python_child(under[0], str(under[1]), *args, log=log, env=env)
    )
    child.start()
    return child


async def findings(pid: int, out: Path) -> Any:
    """Ask the agent under bench.agent_traced or bench.agent_profiled for its findings (its
    allocations now, or the profile since SIGUSR2); what it wrote."""
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            return json.loads(await asyncio.to_thread(out.read_text))
        except (FileNotFoundError, json.JSONDecodeError):  # not written yet, or half
            await asyncio.sleep(0.1)
    raise RuntimeError(f"the agent wrote nothing to {out}")


async def time_full_agent(
    agent: ChildProcess,
    base: str,
    started: float,
    pods: int,
    sync_period: float,
    cpu_periods: int,
    stats: bool = True,
    under: tuple[str, Path] | None = None,
) -> dict[str, Any]:
    """From the agent's start until /metrics shows the API's pods and a drift of 0; 20
    scrapes, RSS and peak; then, after the grace period and two more cycles, drift again,
    where its memory is, and its CPU over ``cpu_periods`` sync periods."""
    pid = agent.pid
    assert pid is not None, "the agent exited"
    async with aiohttp.ClientSession() as http:
        readiness = await time_until_ready(
            agent,
            http,
            f"{base}/metrics",
            started=started,
            answered=lambda status: status == 200,
            ready=lambda status, body: status == 200 and healthy(body, pods, stats=stats),
            interval=0.02,
            request_timeout=2,
        )
        scrapes: list[float] = []
        for _ in range(20):
            t0 = time.perf_counter()
            _, body = await http_get(http, f"{base}/metrics")
            scrapes.append(time.perf_counter() - t0)
        rss = rss_bytes(pid)
        peak_rss = peak_rss_bytes(pid)

        # Past the grace period, anything unmatched would be counted by now.
        await asyncio.sleep(DRIFT_GRACE_SECONDS + 2 * sync_period)
        _, body = await http_get(http, f"{base}/metrics")
        still_healthy = healthy(body, pods, stats=stats)
        rss_end = rss_bytes(pid)
        peak_rss_end = peak_rss_bytes(pid)
        memory = memory_map(pid)
        traced = under is not None and under[0] == TRACED
        allocations = await findings(pid, under[1]) if under is not None and traced else None
        if under is not None and not traced:
            os.kill(pid, signal.SIGUSR2)  # bench.agent_profiled: profile the CPU window
        cpu = await cpu_over(pid, cpu_periods * sync_period)
        profile = await findings(pid, under[1]) if under is not None and not traced else None
    ordered = sorted(scrapes)
    cycles = sample_value(body, b"nodesync_sync_duration_seconds_count") or 0
    cycle_seconds = sample_value(body, b"nodesync_sync_duration_seconds_sum") or 0
    return {
        "listening_s": readiness.answered_s,
        "synced_s": readiness.ready_s,
        "scrape_median_ms": statistics.median(ordered) * 1000,
        "scrape_max_ms": ordered[-1] * 1000,
        "exposition_bytes": len(body),
        "rss_bytes": rss,
        "peak_rss_bytes": peak_rss,
        "rss_bytes_end": rss_end,  # after the grace period and two more cycles
        "peak_rss_bytes_end": peak_rss_end,
        "memory_map": memory,
        "tracemalloc": allocations,
        "cprofile": profile,
        "cpu": cpu,
        "drift_zero_after_grace": still_healthy,
        "sync_cycles": cycles,
        "sync_cycle_mean_ms": cycle_seconds / cycles * 1000 if cycles else None,
        "state_reads": cri_calls(body, "list_containers"),
        "stats_reads": cri_calls(body, "list_container_stats"),
        "runtime_running_pods": samples(body, "nodesync_pods").get(
            frozenset({("phase", "Running"), ("source", "runtime")})
        ),
    }


async def time_floor(
    floor: ChildProcess, base: str, started: float, sync_period: float, cpu_periods: int
) -> dict[str, Any]:
    """The floor as the agent is measured: ready (its first cycle made), 20 scrapes, RSS and
    peak; again after the same wait as the agent's, where its memory is, its CPU."""
    pid = floor.pid
    assert pid is not None, "the floor exited"
    async with aiohttp.ClientSession() as http:
        readiness = await time_until_ready(
            floor,
            http,
            f"{base}/metrics",
            started=started,
            answered=lambda status: status == 200,
            ready=lambda status, _: status == 200,
            interval=0.02,
            request_timeout=2,
        )
        for _ in range(20):
            await http_get(http, f"{base}/metrics")
        rss, peak_rss = rss_bytes(pid), peak_rss_bytes(pid)
        await asyncio.sleep(DRIFT_GRACE_SECONDS + 2 * sync_period)
        await http_get(http, f"{base}/metrics")
        rss_end, peak_rss_end, memory = rss_bytes(pid), peak_rss_bytes(pid), memory_map(pid)
        cpu = await cpu_over(pid, cpu_periods * sync_period)
        return {
            "listening_s": readiness.answered_s,
            "rss_bytes": rss,
            "peak_rss_bytes": peak_rss,
            "rss_bytes_end": rss_end,
            "peak_rss_bytes_end": peak_rss_end,
            "memory_map": memory,
            "cpu": cpu,
        }


async def http_get(session: aiohttp.ClientSession, url: str) -> tuple[int, bytes]:
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as response:
        return response.status, await response.read()


async def run(
    pods: int,
    other_pods: int,
    rounds: int,
    sync_period: float,
    stats_period: float,
    cpu_periods: int = 6,
    env: dict[str, str] | None = None,
    tracemalloc: bool = False,
    cprofile: bool = False,
    argv: list[str] | None = None,
    logs: Path | None = None,
    floor_args: tuple[str, ...] = (),
) -> dict[str, object]:
    if os.geteuid() != 0:
        raise SystemExit("run as root: the benchmark starts its own containerd")
    where = machine()
    workdir = Path(tempfile.mkdtemp(prefix="nodesync-bench-"))
    api = SimAPIServer(workdir)
    containerd: LocalContainerd | None = None
    agent: ChildProcess | None = None
    floor: ChildProcess | None = None
    kubelet: ChildProcess | None = None
    try:
        await api.start()
        started = time.perf_counter()
        mine = await populate(api, pods, other_pods)
        populate_s = time.perf_counter() - started

        view = await time_api_view(str(api.kubeconfig), pods, rounds)

        containerd = LocalContainerd()
        await asyncio.to_thread(containerd.start)
        started = time.perf_counter()
        await run_runtime_pods(containerd.endpoint, mine)
        runtime_pods_s = time.perf_counter() - started
        kubelet_root = workdir / "kubelet"
        await asyncio.to_thread(make_kubelet_root, kubelet_root, mine)
        kubelet_port = free_port()
        kubelet = python_child(
            "bench.kubelet_healthz", "--port", str(kubelet_port), log=workdir / "kubelet.log"
        )
        kubelet.start()
        await wait_port(kubelet, kubelet_port, within=30)

        port = free_port()
        started = time.monotonic()
        env = env or {}
        under = (
            (TRACED, workdir / "allocations.json")
            if tracemalloc
            else (PROFILED, workdir / "profile.json")
            if cprofile
            else None
        )
        agent = start_agent(
            api,
            containerd,
            kubelet_root,
            f"http://127.0.0.1:{kubelet_port}/healthz",
            port,
            sync_period,
            stats_period,
            workdir / "agent.log",
            env,
            under,
        )
        full = await time_full_agent(
            agent,
            f"http://127.0.0.1:{port}",
            started,
            pods,
            sync_period,
            cpu_periods,
            stats_period > 0,
            under,
        )
        agent.stop()

        port = free_port()
        started = time.monotonic()
        floor = python_child(
            "bench.agent_floor",
            "--port",
            str(port),
            "--cri-endpoint",
            containerd.endpoint,
            "--period",
            str(sync_period),
            *floor_args,
            log=workdir / "floor.log",
            env=env,
        )
        floor.start()
        floor_figures = await time_floor(
            floor, f"http://127.0.0.1:{port}", started, sync_period, cpu_periods
        )
        return {
            "machine": where,
            "command": command("bench.agent_node_objects", argv),
            "pods": pods,
            "other_pods": other_pods,
            "sync_period_s": sync_period,
            "stats_period_s": stats_period,
            "environment": env,
            "drift_grace_period_s": DRIFT_GRACE_SECONDS,
            "populate_s": populate_s,
            "api_view_synced": view,
            "runtime_pods_s": runtime_pods_s,
            "agent": full,
            "floor": floor_figures,
            "load_average_1m_at_end": os.getloadavg()[0],
        }
    finally:
        for child in (floor, agent, kubelet):
            if child is not None:
                child.stop()
        await api.close()
        if containerd is not None:
            await asyncio.to_thread(containerd.cleanup)
        if logs is not None:
            await asyncio.to_thread(keep_logs, workdir, logs)
        await asyncio.to_thread(shutil.rmtree, workdir, ignore_errors=True)


def keep_logs(workdir: Path, logs: Path) -> None:
    logs.mkdir(parents=True, exist_ok=True)
    for name in ("agent.log", "floor.log"):
        if (workdir / name).exists():
            shutil.copyfile(workdir / name, logs / name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--pods", type=int, default=110, help="pods bound to the agent's node")
    parser.add_argument("--other-pods", type=int, default=2000, help="pods bound to other nodes")
    parser.add_argument("--rounds", type=int, default=10, help="in-process API view rounds")
    parser.add_argument(
        "--sync-period", type=float, default=10.0, help="the agent's --sync.period, in seconds"
    )
    parser.add_argument(
        "--stats-period", type=float, default=60.0, help="the agent's --stats.period, in seconds"
    )
    parser.add_argument(
        "--cpu-periods",
        type=int,
        default=6,
        help="sync periods over which the agent's and the floor's CPU is measured",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a variable for the agent's and the floor's environment (repeatable)",
    )
    parser.add_argument(
        "--tracemalloc",
        action="store_true",
        help="run the agent under bench.agent_traced: where Python allocated its memory",
    )
    parser.add_argument(
        "--cprofile",
        action="store_true",
        help="run the agent under bench.agent_profiled: where its CPU window went",
    )
    parser.add_argument(
        "--logs",
        type=Path,
        metavar="DIR",
        help="keep the agent's and the floor's output (agent.log, floor.log) in DIR",
    )
    parser.add_argument(
        "--floor-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="an argument for bench.agent_floor (repeatable): --floor-arg=--call-timeout=2",
    )
    args = parser.parse_args(argv)
    env = dict(item.split("=", 1) for item in args.env)
    result = run_main(
        run(
            args.pods,
            args.other_pods,
            args.rounds,
            args.sync_period,
            args.stats_period,
            args.cpu_periods,
            env,
            args.tracemalloc,
            args.cprofile,
            argv,
            args.logs,
            tuple(args.floor_arg),
        )
    )
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
