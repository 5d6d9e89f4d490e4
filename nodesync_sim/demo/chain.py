"""The whole local chain, on 127.0.0.1 free ports, from a scenario:

1. the test API server (in process, so that old nodes get their creation times; every write
   is audited by user, each component having its own token), over HTTPS with a CA made at
   start, and a kubeconfig for kubectl (:attr:`Chain.admin_kubeconfig`);
2. a private containerd (nodesync_sim.real.containerd) with the scenario's orphan sandboxes,
   when the scenario has a real node;
3. the real agent (``nodesync agent``'s app) for the real node, with its kubelet's healthz;
4. the controller (``nodesync controller``'s app) with the webhook and the rollback executor;
5. the simulator (nodesync_sim.fake.scaleout) and its agent metrics;
6. a real Alertmanager with the shipped deploy/alertmanager/alertmanager.yml (two, clustered
   with each other on loopback as an HA pair, with ``alertmanager.replicas`` 2: Prometheus
   sends every alert to both, both route to the hook), and a real Prometheus with the shipped
   rules/*.yml (package data, see :func:`shipped`), both as copies changed only by the
   scenario's overrides (short timers, the hook's address and token).

:meth:`Chain.stop` stops them in the reverse order, processes by PID, and removes every file,
mount and cgroup; it returns what it could not remove (empty when clean).

    async with Chain(load("scenarios/e2e-rollback.json")) as chain:
        await chain.start_waves()        # once Prometheus scrapes every target
        await chain.prometheus.wait_for_async('ALERTS{alertstate="firing"}', within=60)

Everything in-process runs in the caller's event loop; the processes are started from worker
threads so the loop keeps serving while they come up. :meth:`Chain.start` may be cancelled (a
Ctrl-C while it starts): a process coming up in a worker thread is waited for, then everything
started so far is stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web
from prometheus_client import CollectorRegistry

from exporter.agent.app import make_app as make_agent_app
from exporter.agent.settings import AgentSettings
from exporter.controller.app import make_app as make_controller_app
from exporter.controller.settings import (
    WAVE_GAP,
    ControllerSettings,
    ExecutorSettings,
    WebhookSettings,
)
from exporter.controller.wiring import rollback_extensions
from exporter.kube.api import KubeAPI
from exporter.kube.config import kubeconfig_configuration
from exporter.model.joins import JoinPolicy
from exporter.settings.declare import changed, model_of, settings_by_field
from exporter.settings.joins import JoinSettings
from nodesync_sim.fake.apiserver import APIServer, write_kubeconfig
from nodesync_sim.fake.apiserver.objects import Change
from nodesync_sim.fake.apiserver.tls import make_serving_certificate
from nodesync_sim.fake.scaleout.audit import ObjectHistory, WriteAudit
from nodesync_sim.fake.scaleout.overrides import (
    alertmanager_config,
    prometheus_duration,
    rewrite_rules,
)
from nodesync_sim.fake.scaleout.realnode import ContainerdPods, KubeletHealthz
from nodesync_sim.fake.scaleout.scenario import CRI_TIMEOUTS, Scenario
from nodesync_sim.fake.scaleout.simulator import Simulator
from nodesync_sim.real.containerd import LocalContainerd
from nodesync_sim.real.prometheus import LocalAlertmanager, LocalPrometheus, alertmanager_pair
from nodesync_sim.real.removal import remove_tree
from nodesync_sim.real.runtime_pods import ContainerSpec, run_pod

log = logging.getLogger(__name__)

T = TypeVar("T")


def shipped(*parts: str) -> Path:
    """A file the package carries: the shipped rules and Alertmanager route are package data
    (nodesync_sim/shipped links to the repository's rules/ and deploy/alertmanager/)."""
    return Path(str(resources.files("nodesync_sim").joinpath("shipped", *parts)))


SHIPPED_RULES = shipped("rules")
SHIPPED_ALERTMANAGER = shipped("alertmanager.yml")

# The users of the test API server, one per component.
SIM_USER = "nodesync-sim"
AGENT_USER = "nodesync-agent"
CONTROLLER_USER = "nodesync-controller"

CONTROLLER_JOB = "nodesync-controller"
AGENT_JOB = "nodesync-agent"
SIM_JOB = "nodesync-agent-sim"

_EXECUTOR_SETTINGS = frozenset(settings_by_field(ExecutorSettings))
_JOIN_SETTINGS = frozenset(settings_by_field(JoinSettings))


async def _start_in_thread(start: Callable[[], T]) -> T:
    """``start()`` in a worker thread. Cancelled meanwhile, it still waits for ``start`` to
    return before it raises CancelledError: what is half started is then complete, and
    :meth:`Chain.stop` never races with it."""
    task = asyncio.ensure_future(asyncio.to_thread(start))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        while not task.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({task})
        raise


#: How long an in-process part (the simulator, a web server, a client) may take to stop before
#: the stop goes on without it: the processes, mounts and files after it are still removed.
STOP_STEP_TIMEOUT = 20.0


async def _bounded(what: str, step: Awaitable[None]) -> None:
    try:
        async with asyncio.timeout(STOP_STEP_TIMEOUT):  # not wait_for (exporter.tasks.wait_set)
            await step
    except TimeoutError:
        log.warning("%s did not stop within %g s; stopping the rest", what, STOP_STEP_TIMEOUT)


async def _serve(app: web.Application, port: int = 0) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, int(runner.addresses[0][1])


class Chain:
    def __init__(
        self,
        scenario: Scenario,
        *,
        rules_dir: Path = SHIPPED_RULES,
        alertmanager_file: Path = SHIPPED_ALERTMANAGER,
        base_dir: str | None = None,
        log_level: str = "warning",
    ) -> None:
        self.scenario = scenario
        self._rules_dir = rules_dir
        self._alertmanager_file = alertmanager_file
        self._base_dir = base_dir
        self._log_level = log_level
        self.workdir: Path | None = None
        self.audit = WriteAudit()
        self.node_history = ObjectHistory("nodes")
        self._tokens = {
            user: secrets.token_urlsafe(24) for user in (SIM_USER, AGENT_USER, CONTROLLER_USER)
        }
        self.hook_token = secrets.token_urlsafe(24)
        self.api = APIServer(
            extra_tokens={token: user for user, token in self._tokens.items()},
            authorizer=self.audit,
            bookmark_interval=5.0,
        )
        self.containerd: LocalContainerd | None = None
        self.orphan_sandboxes: list[str] = []
        self.real_pods: ContainerdPods | None = None
        self.simulator: Simulator | None = None
        #: Every Alertmanager (one, or an HA pair); :attr:`alertmanager` is the first.
        self.alertmanagers: list[LocalAlertmanager] = []
        self.alertmanager: LocalAlertmanager | None = None
        self.prometheus: LocalPrometheus | None = None
        self.controller_port = 0
        self.agent_port = 0
        self.sim_metrics_port = 0
        self._runners: list[web.AppRunner] = []
        self._clients: list[KubeAPI] = []
        self._started = False
        self._controller_runner: web.AppRunner | None = None
        self._restart_task: asyncio.Task[None] | None = None
        self._restart_requested = False
        self._loop: asyncio.AbstractEventLoop | None = None
        #: (when it went down, when it was back, the step it followed) per controller restart.
        self.controller_restarts: list[tuple[float, float, str]] = []

    # ------------------------------------------------------------------ accessors

    @property
    def sim(self) -> Simulator:
        if self.simulator is None:
            raise RuntimeError("the chain has not started")
        return self.simulator

    @property
    def prom(self) -> LocalPrometheus:
        if self.prometheus is None:
            raise RuntimeError("the chain has not started")
        return self.prometheus

    @property
    def executor_settings(self) -> ExecutorSettings:
        values = {k: v for k, v in self.scenario.controller.items() if k in _EXECUTOR_SETTINGS}
        return changed(ExecutorSettings(), **values)

    @property
    def join_policy(self) -> JoinPolicy:
        values = {k: v for k, v in self.scenario.controller.items() if k in _JOIN_SETTINGS}
        return model_of(changed(JoinSettings(), **values), JoinPolicy)

    @property
    def real_node(self) -> str | None:
        return self.scenario.real_node.name if self.scenario.real_node is not None else None

    def endpoints(self) -> dict[str, str]:
        """Where each part of the running chain answers (for people and the demo)."""
        found = {
            "apiserver": self.api.url,
            "controller": f"http://127.0.0.1:{self.controller_port}",
            "simulated agents": f"http://127.0.0.1:{self.sim_metrics_port}/metrics",
        }
        if self.real_node is not None:
            found["real agent"] = f"http://127.0.0.1:{self.agent_port}/metrics"
        if self.containerd is not None:
            found["containerd"] = self.containerd.endpoint
        for i, alertmanager in enumerate(self.alertmanagers):
            found["alertmanager" if i == 0 else f"alertmanager {i + 1}"] = alertmanager.url
        if self.prometheus is not None:
            found["prometheus"] = self.prometheus.url
        if self.workdir is not None:
            found["kubeconfig"] = str(self.admin_kubeconfig)
        return found

    def kubeconfig(self, user: str) -> Path:
        assert self.workdir is not None
        return self.workdir / f"kubeconfig-{user}"

    @property
    def journal_path(self) -> Path:
        """The controller's journal (every controller the chain starts keeps it)."""
        assert self.workdir is not None
        return self.workdir / "journal" / "journal.db"

    @property
    def admin_kubeconfig(self) -> Path:
        """The kubeconfig for a person (kubectl): the API server's own admin token."""
        assert self.workdir is not None
        return self.workdir / "kubeconfig"

    # ------------------------------------------------------------------ start

    async def start(self, *, targets_within: float = 60.0) -> None:
        """Start everything, in order, and wait until Prometheus scrapes every target. On a
        failure everything started so far is stopped again."""
        if self._started:
            raise RuntimeError("the chain has started already")
        self._started = True
        self.workdir = Path(tempfile.mkdtemp(prefix="nodesync-chain-", dir=self._base_dir))
        try:
            await self._start(targets_within)
        except BaseException:
            await self.stop()
            raise

    async def _start(self, targets_within: float) -> None:
        assert self.workdir is not None
        self._loop = asyncio.get_running_loop()
        workdir = self.workdir
        # HTTPS, as a real API server: kubectl sends its token over HTTPS only.
        tls = await _start_in_thread(lambda: make_serving_certificate(workdir / "pki"))
        self.api.tls = tls
        await self.api.start()
        self.api.store.add_listener(self.node_history)
        if self.scenario.controller_restart is not None:
            self.api.store.add_listener(self._watch_steps)
        for user, token in self._tokens.items():
            write_kubeconfig(self.kubeconfig(user), self.api.url, token, ca_pem=tls.ca_pem)
        self.api.write_kubeconfig(self.admin_kubeconfig)
        if self.scenario.real_node is not None:
            await self._start_real_node()
        await self._start_controller()
        await self._start_simulator()
        await self._start_alerting()
        await self.prom.wait_for_targets_async(within=targets_within)

    async def _client(self, user: str) -> KubeAPI:
        api = KubeAPI(await kubeconfig_configuration(str(self.kubeconfig(user))))
        self._clients.append(api)
        return api

    async def _start_real_node(self) -> None:
        assert self.workdir is not None
        assert self.scenario.real_node is not None
        real = self.scenario.real_node
        containerd = self.containerd = LocalContainerd()
        await _start_in_thread(containerd.start)
        sleeper = [ContainerSpec("app", ["/bin/sleep", "inf"])]
        for i in range(real.orphan_sandboxes):
            # A pod of an earlier attempt that the API server no longer has.
            pod = await run_pod(
                containerd.endpoint,
                f"leftover-{i}",
                self.scenario.namespace,
                str(uuid.uuid4()),
                sleeper,
            )
            self.orphan_sandboxes.append(pod.sandbox_id)
        self.real_pods = ContainerdPods(containerd.endpoint)
        healthz = KubeletHealthz(lambda: self._real_kubelet_alive())
        runner, healthz_port = await _serve(healthz.app())
        self._runners.append(runner)
        kubelet_root = self.workdir / "kubelet"
        (kubelet_root / "pods").mkdir(parents=True)
        timing = self.scenario.timing
        agent = make_agent_app(
            AgentSettings(
                cri_endpoint=containerd.endpoint,
                listen=("127.0.0.1", 0),
                sync_period=timing.agent_sync_seconds,
                cri_timeout=1.0,
                kubelet_root_dir=str(kubelet_root),
                containerd_root=str(containerd.root),
                kubelet_healthz_url=f"http://127.0.0.1:{healthz_port}/healthz",
                kubelet_timeout=1.0,
                node_name=real.name,
                kubeconfig=str(self.kubeconfig(AGENT_USER)),
                api_initial_jitter=0.0,
                drift_grace_period=timing.drift_grace_seconds,
                cleanup=True,
                cleanup_call_timeout=10.0,
            ),
            CollectorRegistry(),
        )
        runner, self.agent_port = await _serve(agent)
        self._runners.append(runner)

    def _real_kubelet_alive(self) -> bool:
        name = self.real_node
        if self.simulator is None or name is None:
            return False
        kubelet = self.simulator.kubelets[name]
        return kubelet.registered_at is not None and kubelet.alive(self.simulator.clock.now())

    def _watch_steps(self, change: Change) -> None:
        """A store listener: the first NodeRollback whose ``after_step`` is done restarts the
        controller (once)."""
        restart = self.scenario.controller_restart
        if restart is None or self._restart_requested:
            return
        if change.rt.plural != "noderollbacks":
            return
        steps = (change.obj.obj.get("status") or {}).get("steps") or []
        step = restart.after_step.value
        if any(s.get("name") == step and s.get("state") == "done" for s in steps):
            self._restart_requested = True
            loop = self._loop
            assert loop is not None
            loop.call_soon_threadsafe(self._begin_restart, step, restart.down_seconds)

    def _begin_restart(self, step: str, down_seconds: float) -> None:
        self._restart_task = asyncio.create_task(self._restart_controller(step, down_seconds))

    async def _restart_controller(self, step: str, down_seconds: float) -> None:
        runner, self._controller_runner = self._controller_runner, None
        if runner is None:
            return
        down_at = time.time()
        self._runners.remove(runner)
        await runner.cleanup()
        log.warning("the chain stopped the controller after step %s", step)
        await asyncio.sleep(down_seconds)
        await self._start_controller(port=self.controller_port)
        self.controller_restarts.append((down_at, time.time(), step))

    async def _start_controller(self, port: int = 0) -> None:
        assert self.workdir is not None
        settings = ControllerSettings(
            listen=("127.0.0.1", 0),
            kubeconfig=str(self.kubeconfig(CONTROLLER_USER)),
            wave_label=self.scenario.wave_label or "",
            wave_gap=float(self.scenario.controller.get("wave_gap", WAVE_GAP.value())),
            join=self.join_policy,
        )
        app = make_controller_app(
            settings,
            registry=CollectorRegistry(),
            extensions=rollback_extensions(
                WebhookSettings(
                    journal_path=str(self.journal_path),
                    token=self.hook_token,
                ),
                self.executor_settings,
            ),
        )
        runner, self.controller_port = await _serve(app, port)
        self._runners.append(runner)
        self._controller_runner = runner

    async def _start_simulator(self) -> None:
        api = await self._client(SIM_USER)
        self.simulator = Simulator(
            self.scenario,
            api,
            backdate=self.api.store.creation_time,
            real_runtime=self.real_pods,
            on_fault=self._on_fault,
        )
        await self.simulator.start()
        self.sim_metrics_port = await self.simulator.serve_metrics()

    async def _on_fault(self, node: str, kind: str, active: bool) -> None:
        """``cri_timeouts`` on the real node: its containerd stops answering (SIGSTOP)."""
        if node != self.real_node or kind != CRI_TIMEOUTS or self.containerd is None:
            return
        if active:
            self.containerd.freeze()
        else:
            self.containerd.thaw()

    def scrape_configs(self) -> list[dict[str, Any]]:
        configs: list[dict[str, Any]] = [
            {
                "job_name": CONTROLLER_JOB,
                "static_configs": [{"targets": [f"127.0.0.1:{self.controller_port}"]}],
            },
            {
                "job_name": SIM_JOB,
                "honor_labels": True,
                "static_configs": [{"targets": [f"127.0.0.1:{self.sim_metrics_port}"]}],
            },
        ]
        if self.real_node is not None:
            configs.append(
                {
                    "job_name": AGENT_JOB,
                    "static_configs": [
                        {
                            "targets": [f"127.0.0.1:{self.agent_port}"],
                            "labels": {"node": self.real_node},
                        }
                    ],
                }
            )
        return configs

    async def _start_alerting(self) -> None:
        assert self.workdir is not None
        token_file = self.workdir / "hook-token"
        token_file.write_text(self.hook_token)
        token_file.chmod(0o600)
        config = alertmanager_config(
            self._alertmanager_file,
            self.scenario.alertmanager,
            hook_url=f"http://127.0.0.1:{self.controller_port}/alerts",
            token_file=token_file,
        )
        if self.scenario.alertmanager.replicas == 2:
            self.alertmanagers = alertmanager_pair(config, base_dir=self.workdir)
        else:
            self.alertmanagers = [LocalAlertmanager(config, base_dir=self.workdir)]
        self.alertmanager = self.alertmanagers[0]
        for alertmanager in self.alertmanagers:
            await _start_in_thread(alertmanager.start)
        rule_files = rewrite_rules(
            sorted(self._rules_dir.glob("*.yml")), self.scenario.rules, self.workdir / "rules"
        )
        spec = self.scenario.prometheus
        self.prometheus = LocalPrometheus(
            self.scrape_configs(),
            rule_files,
            scrape_interval=prometheus_duration(spec.scrape_interval),
            evaluation_interval=prometheus_duration(spec.evaluation_interval),
            alertmanager_urls=[alertmanager.url for alertmanager in self.alertmanagers],
            base_dir=self.workdir,
        )
        await _start_in_thread(self.prometheus.start)

    def start_waves(self) -> None:
        """Scenario time 0: the waves join."""
        self.sim.start_waves()

    # ------------------------------------------------------------------ stop

    async def stop(self) -> list[str]:
        """Stop everything in the reverse order; what is left behind (empty when clean)."""
        leftovers: list[str] = []
        services: list[LocalPrometheus | LocalAlertmanager | None] = [
            self.prometheus,
            *self.alertmanagers,
        ]
        for service in services:
            if service is not None:
                await asyncio.to_thread(service.cleanup)
                leftovers += service.leftovers()
        if self._restart_task is not None:
            self._restart_task.cancel()
            await asyncio.gather(self._restart_task, return_exceptions=True)
        if self.simulator is not None:
            await _bounded("the simulator", self.simulator.stop())
        for runner in reversed(self._runners):
            await _bounded("a web server of the chain", runner.cleanup())
        self._runners.clear()
        for api in self._clients:
            await _bounded("an API client", api.close())
        self._clients.clear()
        if self.containerd is not None:
            await asyncio.to_thread(self.containerd.cleanup)
            leftovers += self.containerd.leftovers()
        self.api.store.remove_listener(self.node_history)
        if self.scenario.controller_restart is not None:
            self.api.store.remove_listener(self._watch_steps)
        await _bounded("the test API server", self.api.stop())
        if self.workdir is not None:
            remove_tree(self.workdir)
            if self.workdir.exists():
                leftovers.append(f"directory {self.workdir}")
        return leftovers

    async def __aenter__(self) -> Chain:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        leftovers = await self.stop()
        if leftovers:
            log.error("the local chain left things behind: %s", leftovers)
