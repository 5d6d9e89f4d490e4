"""A small real cluster for the dashboards: a real containerd, the real agent and controller
apps against the test API server, and a real Prometheus that scrapes both and loads rules/*.yml.

The cluster (times relative to the start):

- ``node-c``: an old, established control-plane node (joined 2 h ago, Ready, fresh Lease).
- ``node-b``: a failed join of wave ``wave-7`` (joined 15 min ago, NotReady for 13 min, Lease
  stale, cordoned and tainted by nodesync): NodesyncNewNodeNotReady goes pending; the controller's
  join objective runs out for it 10 s after the start (a ``not_ready`` join).
- ``node-a``: the healthy node of wave ``wave-7`` (joined 5 min ago, Ready), with the agent on a
  real containerd. The API server binds pods to it: ``web`` (runs: reported Running once
  containerd runs it, its node's first workload pod), ``mixed`` (runs the four
  containers of :class:`~nodesync_sim.real.runtime_pods.MixedPod`; the API reports a crash-looping
  container), ``stuck`` (Pending for 5 min, no sandbox: missing-sandbox drift). containerd also
  runs ``gone``, a pod the API does not know (orphan-sandbox drift), and kubelet's pods dir holds
  a directory nobody knows (kubelet-only drift). The OOM container is restarted twice (an OOM
  loop and a crash loop in the runtime), containerd is frozen until the agent's CRI calls time
  out (DEADLINE_EXCEEDED errors), and the agent's first pod list is answered with a 500.

The controller runs with its rollback hook (webhook and executor, in dry run: it writes
nothing), and with every collector switch on, so that the panels of the series that are off by
default (kubelet's other conditions, cordons and taints) are checked too. A real Alertmanager
with the shipped deploy/alertmanager/alertmanager.yml (the hook's address, token file and
shorter timers put in) delivers a rollback alert for ``node-b`` to it; Prometheus sends its
alerts to that Alertmanager too.

The apps run in an event loop of their own thread, so tests can block on Prometheus.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry

from exporter.agent.app import make_app as make_agent_app
from exporter.agent.settings import AgentSettings
from exporter.controller.app import CLUSTER
from exporter.controller.app import make_app as make_controller_app
from exporter.controller.settings import ControllerSettings, ExecutorSettings, WebhookSettings
from exporter.controller.wiring import rollback_extensions
from exporter.metrics.nodes import NodeCollectors
from exporter.model.joins import JoinPolicy
from exporter.model.rfc3339 import format_micro_time, format_time
from exporter.model.runtime import ContainerState
from nodesync_sim.fake.apiserver import APIServer
from nodesync_sim.fake.apiserver.store import Store
from nodesync_sim.real.containerd import LocalContainerd
from nodesync_sim.real.prometheus import LocalAlertmanager, LocalPrometheus
from nodesync_sim.real.runtime_pods import (
    ContainerSpec,
    MixedPod,
    restart_container,
    run_mixed_pod,
    run_pod,
    wait_for_state,
)
from tests.metrics.exposition import labels, series
from tests.support.wait import until_async

ROOT = Path(__file__).resolve().parents[2]
RULE_FILES = sorted((ROOT / "rules").glob("*.yml"))
ALERTMANAGER_CONFIG = ROOT / "deploy" / "alertmanager" / "alertmanager.yml"

NODE = "node-a"
FAILED_NODE = "node-b"
FAILED_JOINED = 900.0  # seconds before the start
OLD_NODE = "node-c"
NODES = (NODE, FAILED_NODE, OLD_NODE)
WAVE_LABEL = "example.com/scale-out"
NAMESPACE = "default"
LEASES = "kube-node-lease"
HOOK_TOKEN = "a-token-for-the-dashboard-scenario"

T = TypeVar("T")


@dataclass
class OffsetClock:
    """The API server's clock: real time minus ``offset`` seconds (creation times)."""

    offset: float = 0.0

    def __call__(self) -> float:
        return time.time() - self.offset


def _node(name: str, *, ready: str, since: float, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": ready,
                    "reason": "KubeletReady" if ready == "True" else "KubeletNotReady",
                    "lastTransitionTime": format_time(time.time() - since),
                    "lastHeartbeatTime": format_time(time.time() - since),
                },
                {
                    "type": "DiskPressure",
                    "status": "False",
                    "lastTransitionTime": format_time(time.time() - since),
                },
            ]
        },
    }


def _lease(name: str, renewed_ago: float) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": 40,
            "renewTime": format_micro_time(time.time() - renewed_ago),
        },
    }


def _pod(name: str, status: dict[str, Any], containers: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "nodeName": NODE,
            "containers": [{"name": c, "image": "busybox"} for c in containers],
        },
        "status": status,
    }


def _mixed_status() -> dict[str, Any]:
    running = {"running": {"startedAt": format_time(time.time() - 200)}}
    return {
        "phase": "Running",
        "containerStatuses": [
            {"name": MixedPod.RUNNING, "state": running, "restartCount": 0, "ready": True},
            {
                "name": MixedPod.ERROR,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"reason": "Error", "exitCode": 1}},
                "restartCount": 4,
                "ready": False,
            },
        ],
    }


def _stuck_status() -> dict[str, Any]:
    return {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "True",
                "lastTransitionTime": format_time(time.time() - 300),
            }
        ],
        "containerStatuses": [
            {
                "name": "app",
                "state": {"waiting": {"reason": "ImagePullBackOff"}},
                "restartCount": 0,
                "ready": False,
            }
        ],
    }


def _replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"expected {old!r} once in the Alertmanager configuration"
    return text.replace(old, new)


def alertmanager_config(hook_url: str, token_file: Path) -> str:
    """The shipped Alertmanager configuration, delivering to ``hook_url`` at once."""
    text = ALERTMANAGER_CONFIG.read_text(encoding="utf-8")
    text = _replace_once(text, "http://nodesync-controller.nodesync.svc:9618/alerts", hook_url)
    text = _replace_once(text, "/etc/alertmanager/nodesync/token", str(token_file))
    text = _replace_once(text, "group_wait: 30s", "group_wait: 0s")
    return _replace_once(text, "group_interval: 1m", "group_interval: 1s")


def rollback_alert(node: str) -> dict[str, Any]:
    """A firing NodesyncNewNodeNotReady as Prometheus posts it to Alertmanager."""
    return {
        "labels": {
            "alertname": "NodesyncNewNodeNotReady",
            "node": node,
            "severity": "critical",
            "nodesync_action": "rollback_node",
        },
        "annotations": {"summary": f"New node {node} is not Ready: rolling it back."},
        "startsAt": format_time(time.time() - 60),
        "generatorURL": "http://127.0.0.1/graph",
    }


class LoopThread:
    """An asyncio event loop running in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.run(self.loop.shutdown_asyncgens(), 10.0)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10.0)
        self.loop.close()


async def _serve(app: web.Application) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, int(runner.addresses[0][1])


@dataclass
class Scenario:
    """The running cluster; :meth:`start` builds it, :meth:`close` removes every trace."""

    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="nodesync-dash-")))
    containerd: LocalContainerd = field(default_factory=LocalContainerd)
    clock: OffsetClock = field(default_factory=OffsetClock)
    prometheus: LocalPrometheus | None = None
    alertmanager: LocalAlertmanager | None = None
    agent_port: int = 0
    controller_port: int = 0
    _thread: LoopThread | None = None
    _api: APIServer | None = None
    _controller_app: web.Application | None = None
    _controller_made: float = 0.0  # after make_app: its join tracker started before
    _runners: list[web.AppRunner] = field(default_factory=list)

    @property
    def prom(self) -> LocalPrometheus:
        assert self.prometheus is not None
        return self.prometheus

    def start(self) -> None:
        self.containerd.start()
        self._thread = LoopThread()
        uids = self._thread.run(self._start_apps())
        token_file = self.workdir / "token"
        token_file.write_text(HOOK_TOKEN)
        hook_url = f"http://127.0.0.1:{self.controller_port}/alerts"
        self.alertmanager = LocalAlertmanager(alertmanager_config(hook_url, token_file))
        self.alertmanager.start()
        self.prometheus = LocalPrometheus(
            [
                {
                    "job_name": "nodesync-agent",
                    "static_configs": [
                        {"targets": [f"127.0.0.1:{self.agent_port}"], "labels": {"node": NODE}}
                    ],
                },
                {
                    "job_name": "nodesync-controller",
                    "static_configs": [{"targets": [f"127.0.0.1:{self.controller_port}"]}],
                },
            ],
            RULE_FILES,
            alertmanager_url=self.alertmanager.url,
        )
        self.prometheus.start()
        self.alertmanager.post_alerts([rollback_alert(FAILED_NODE)])
        # Prometheus scrapes for the first time ~5 s from now: run the pods meanwhile.
        self._thread.run(self._run_workload(uids), timeout=90.0)
        self.prometheus.wait_for_targets(timeout=30.0)
        self.prometheus.wait_for(
            'nodesync_alerts_received_total{status="firing"} > 0', timeout=30.0
        )

    async def _start_apps(self) -> dict[str, str]:
        self._api = api = APIServer(store=Store(clock=self.clock), bookmark_interval=0.5)
        await api.start()
        store = api.store
        for name, joined, ready, since, renewed, node_labels in (
            (OLD_NODE, 7200, "True", 7000, 0, {"node-role.kubernetes.io/control-plane": ""}),
            (FAILED_NODE, FAILED_JOINED, "False", 800, 820, {WAVE_LABEL: "wave-7"}),
            (NODE, 300, "True", 250, 0, {WAVE_LABEL: "wave-7"}),
        ):
            self.clock.offset = joined
            node = _node(name, ready=ready, since=since, labels=node_labels)
            if name == FAILED_NODE:
                node["spec"] = {
                    "unschedulable": True,
                    "taints": [{"key": "nodesync.io/rollback", "effect": "NoSchedule"}],
                }
            store.create("nodes", node)
            store.create("leases", _lease(name, renewed), namespace=LEASES)
        self.clock.offset = 0.0
        uids = {}
        for name, status, containers in (
            # Pending until containerd runs it (_run_workload): node-a's first workload pod
            ("web", {"phase": "Pending"}, ["app"]),
            ("mixed", _mixed_status(), [MixedPod.RUNNING, MixedPod.ERROR]),
            ("stuck", _stuck_status(), ["app"]),
        ):
            created = store.create("pods", _pod(name, status, containers), namespace=NAMESPACE)
            uids[name] = str(created["metadata"]["uid"])
        # The agent's first list of its pods fails: an API error on the dashboards.
        api.faults.fail_next(1, 500, path_prefix="/api/v1/pods", verb="list")

        kubeconfig = str(api.write_kubeconfig(self.workdir / "kubeconfig"))
        kubelet_root = self.workdir / "kubelet"
        (kubelet_root / "pods" / str(uuid.uuid4())).mkdir(parents=True)
        agent = make_agent_app(
            AgentSettings(
                cri_endpoint=self.containerd.endpoint,
                listen=("127.0.0.1", 0),
                sync_period=0.2,
                # Stats every second, not every minute: a first stats read that misses its
                # 0.5 s CRI deadline on a busy machine is read again before the panels' wait
                # for data runs out.
                stats_period=1.0,
                cri_timeout=0.5,
                kubelet_root_dir=str(kubelet_root),
                containerd_root=str(self.containerd.root),
                kubelet_healthz_url="http://127.0.0.1:1/healthz",
                kubelet_timeout=0.5,
                node_name=NODE,
                kubeconfig=kubeconfig,
                api_initial_jitter=0.0,
                drift_grace_period=0.5,
            ),
            CollectorRegistry(),
        )
        controller = make_controller_app(
            ControllerSettings(
                listen=("127.0.0.1", 0),
                kubeconfig=kubeconfig,
                wave_label=WAVE_LABEL,
                wave_gap=120.0,
                # every switch on: the panels of the series off by default show data too
                collectors=NodeCollectors.everything(),
                # node-b's objective runs out 10 s after it is created: the join SLO has a
                # judgement (a failed join) soon after the controller started
                join=JoinPolicy(ready_objective=FAILED_JOINED + 10.0),
            ),
            registry=CollectorRegistry(),
            extensions=rollback_extensions(
                WebhookSettings(
                    journal_path=str(self.workdir / "journal" / "journal.db"),
                    token=HOOK_TOKEN,
                ),
                ExecutorSettings(dry_run=True),
            ),
        )
        self._controller_made = time.time()
        runner, self.agent_port = await _serve(agent)
        self._runners.append(runner)
        runner, self.controller_port = await _serve(controller)
        self._runners.append(runner)
        self._controller_app = controller
        return uids

    async def _scrape_agent(self) -> str:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{self.agent_port}/metrics") as response,
        ):
            return await response.text()

    async def _agent_until(self, name: str, value: float, what: str, within: float = 20) -> None:
        await until_async(
            self._scrape_agent,
            accept=lambda text: series(text, name).get(labels()) == value,
            timeout=within,
            what=f"the agent: {what}",
            interval=0.1,
        )

    async def _report_running(self, name: str) -> None:
        """What kubelet does once the pod runs: its status says Running, from now. The
        controller's watch of running pods must be up to see it (its join's pod_running)."""
        assert self._controller_app is not None
        pods = self._controller_app[CLUSTER].pods
        await until_async(
            lambda: pods is not None and pods.up,
            timeout=20,
            what="the controller's pod watch",
            interval=0.1,
        )
        # The controller observes only the stages reached after it started, and a container's
        # startedAt has whole seconds: a start in the controller's own first second would read
        # as before it and land in no wave histogram.
        await until_async(
            lambda: int(time.time()) > self._controller_made,
            timeout=5,
            what="the second after the controller's start",
            interval=0.05,
        )
        assert self._api is not None
        pod = self._api.store.get("pods", name, namespace=NAMESPACE)
        pod["status"] = {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "app",
                    "state": {"running": {"startedAt": format_time(time.time())}},
                    "ready": True,
                    "restartCount": 0,
                }
            ],
        }
        self._api.store.replace("pods", pod, namespace=NAMESPACE, subresource="status")

    async def _run_workload(self, uids: dict[str, str]) -> None:
        endpoint = self.containerd.endpoint
        sleeper = [ContainerSpec("app", ["/bin/sleep", "inf"])]
        await run_pod(endpoint, "web", NAMESPACE, uids["web"], sleeper)
        await self._report_running("web")
        await run_pod(endpoint, "gone", NAMESPACE, str(uuid.uuid4()), sleeper)
        mixed = await run_mixed_pod(endpoint, "mixed", NAMESPACE, uids["mixed"])
        for _ in range(2):  # three OOM kills in all: an OOM loop and a crash loop
            container = await restart_container(endpoint, mixed, MixedPod.OOM)
            await wait_for_state(endpoint, container, ContainerState.EXITED)
        # A frozen containerd accepts connections and answers nothing: CRI calls time out.
        self.containerd.freeze()
        try:
            await self._agent_until("nodesync_cri_up", 0.0, "CRI calls to time out")
        finally:
            self.containerd.thaw()
        await self._agent_until("nodesync_cri_up", 1.0, "the runtime to answer again")

    def close(self) -> list[str]:
        """Stop everything; returns what was left behind (empty when clean)."""
        leftovers: list[str] = []
        for service in (self.prometheus, self.alertmanager):
            if service is not None:
                service.cleanup()
                leftovers += service.leftovers()
        if self._thread is not None:
            self._thread.run(self._stop_apps())
            self._thread.close()
            self._thread = None
        self.containerd.cleanup()
        leftovers += self.containerd.leftovers()
        shutil.rmtree(self.workdir, ignore_errors=True)
        if self.workdir.exists():
            leftovers.append(f"directory {self.workdir}")
        return leftovers

    async def _stop_apps(self) -> None:
        for runner in reversed(self._runners):
            await runner.cleanup()
        self._runners.clear()
        if self._api is not None:
            await self._api.stop()
            self._api = None
