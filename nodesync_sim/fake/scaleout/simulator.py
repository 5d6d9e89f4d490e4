"""The simulator: a scenario's nodes, joining the API server on schedule.

    simulator = Simulator(scenario, api, backdate=...)   # api: exporter.kube.api.KubeAPI
    await simulator.start()          # watches; old nodes registered; agent metrics syncing
    port = await simulator.serve_metrics()
    simulator.start_waves()          # scenario time 0: the waves join, faults run on time
    ...
    await simulator.stop()

Old nodes exist before the scenario starts; their Node objects should be ``age_seconds`` old,
which no real API server allows: only the in-process test API server can give one object its
creation time. ``backdate(resource, namespace, name, seconds)`` (its store's
:meth:`~nodesync_sim.fake.apiserver.store.Store.creation_time`) is a context manager during which
that one object, when created, gets that creationTimestamp. The old node's own objects (its
Node, Lease and DaemonSet pods) get their age that way while it registers; everything else,
whoever creates it meanwhile, is created now. Without ``backdate``, a scenario with old nodes
of a non-zero age is refused (:class:`SimulatorError`): nodes created now would be new nodes to
the rules and the hook, and the rehearsal would be wrong.

The real node (if the scenario has one) gets a kubelet like the others, whose pods run in
``real_runtime`` (a real containerd, given by the caller); it gets no simulated agent (a real
agent watches it). ``on_fault(node, kind, active)`` is awaited when any node's fault starts or
ends (the chain freezes the real containerd for ``cri_timeouts``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from contextlib import AbstractContextManager
from typing import Any

from aiohttp import web

from exporter.kube.api import KubeAPI
from exporter.kube.convert import lease_info, node_info
from exporter.kube.errors import KubeError
from exporter.kube.informer import Informer
from exporter.kube.resources import LEASES, NODES, PODDISRUPTIONBUDGETS, PODS
from exporter.kube.writer import MERGE_PATCH, KubeWriter
from exporter.model.kube import LEASE_NAMESPACE, LeaseInfo, NodeInfo
from nodesync_sim.fake.scaleout import timeline
from nodesync_sim.fake.scaleout.agentview import AgentMetrics, NodeAgent
from nodesync_sim.fake.scaleout.client import KubeletClient
from nodesync_sim.fake.scaleout.kubelet import (
    FaultHook,
    PodRuntime,
    SimPodRuntime,
    SimulatedKubelet,
)
from nodesync_sim.fake.scaleout.layout import Layout, NodePlan, layout
from nodesync_sim.fake.scaleout.lifecycle import NodeLifecycle
from nodesync_sim.fake.scaleout.pods import BoundPod, NodeAPIView, PodIndex, bound_pod
from nodesync_sim.fake.scaleout.runtime import SimRuntime
from nodesync_sim.fake.scaleout.scenario import (
    AGENT_DOWN,
    CRI_TIMEOUTS,
    MEMORY_PRESSURE,
    PDBSpec,
    Scenario,
)
from nodesync_sim.fake.scaleout.timeline import ScenarioClock, Timeline

log = logging.getLogger(__name__)

Backdate = Callable[[str, str, str, float], AbstractContextManager[None]]
"""``backdate(resource, namespace, name, seconds)``: while open, that object is created with
creationTimestamp ``seconds``."""

_REGISTER_RETRY = 1.0


class SimulatorError(RuntimeError):
    """The simulator cannot run this scenario against this API server."""


class Simulator:
    def __init__(
        self,
        scenario: Scenario,
        api: KubeAPI,
        *,
        backdate: Backdate | None = None,
        real_runtime: PodRuntime | None = None,
        on_fault: FaultHook | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.scenario = scenario
        self.layout: Layout = layout(scenario)
        self.api = api
        self._backdate = backdate
        self._on_fault = on_fault
        self._writer = KubeWriter(api, component="nodesync-agent")
        # The components that remove a node's readiness taints (a CNI agent): their writes.
        self._taint_writer = KubeWriter(api, component="sim-readiness")
        self.clock = ScenarioClock(clock)
        self.timeline: Timeline = Timeline(clock)
        self._client = KubeletClient(api)
        self.pods: Informer[BoundPod] = Informer(api, PODS, bound_pod, name="sim pods")
        self.nodes: Informer[NodeInfo] = Informer(api, NODES, node_info, name="sim nodes")
        self.leases: Informer[LeaseInfo] = Informer(
            api, LEASES, lease_info, namespace=LEASE_NAMESPACE, name="sim leases"
        )
        self.index = PodIndex(self.pods)
        timing = scenario.timing
        self.metrics = AgentMetrics(
            timing.agent_sync_seconds, exists=self._node_exists, fail_scrape=self._fail_scrape
        )
        self._scrapes = 0
        self.runtimes: dict[str, SimRuntime] = {}
        self.kubelets: dict[str, SimulatedKubelet] = {}
        for index, plan in enumerate(self.layout.nodes):
            if plan.role == "real":
                if real_runtime is None:
                    raise SimulatorError(
                        f"the scenario's real node {plan.name} needs a real runtime "
                        "(run it in the local chain, nodesync_sim.demo.chain)"
                    )
                runtime: PodRuntime = real_runtime
                sim_runtime = None
            else:
                sim_runtime = self.runtimes[plan.name] = SimRuntime()
                runtime = SimPodRuntime(sim_runtime, clock)
            self.kubelets[plan.name] = SimulatedKubelet(
                plan,
                index=index,
                client=self._client,
                pods=self.index,
                runtime=runtime,
                timing=timing,
                clock=self.clock,
                timeline=self.timeline,
                on_fault=self._fault_hook,
                sim_runtime=sim_runtime,
                taint_writer=self._taint_writer,
            )
        grace = timing.node_monitor_grace_seconds
        self.lifecycle = (
            NodeLifecycle(
                self.layout.names,
                self._client,
                self.nodes,
                self.leases,
                grace_seconds=grace,
                clock=self.clock,
                timeline=self.timeline,
                pods=self.index,
            )
            if grace is not None
            else None
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._runner: web.AppRunner | None = None
        self.joined = asyncio.Event()  # every node of the scenario has registered

    async def _fault_hook(self, node: str, kind: str, active: bool) -> None:
        """A simulated node's runtime freezes during ``cri_timeouts``; then the caller's hook."""
        runtime = self.runtimes.get(node)
        if runtime is not None and kind == CRI_TIMEOUTS:
            runtime.frozen = active
        if self._on_fault is not None:
            await self._on_fault(node, kind, active)

    def _fail_scrape(self) -> bool:
        """Whether this scrape fails (``scrape_failures``: evenly spread over the scrapes)."""
        spec = self.scenario.scrape_failures
        t = self.clock.t()
        if spec is None or t < spec.at_seconds:
            return False
        if spec.for_seconds is not None and t >= spec.at_seconds + spec.for_seconds:
            return False
        self._scrapes += 1
        return int(self._scrapes * spec.share) != int((self._scrapes - 1) * spec.share)

    def _node_exists(self, name: str) -> bool:
        return name in self.nodes.store

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        task.add_done_callback(_report)
        self._tasks.append(task)

    # ------------------------------------------------------------------ lifecycle

    async def start(self, *, sync_timeout: float = 30.0) -> None:
        """Watch pods, Nodes and Leases; register the old nodes; start syncing agent metrics."""
        old = self.layout.of_role("old")
        if self._backdate is None and any(plan.age_seconds > 0 for plan in old):
            raise SimulatorError(
                "the scenario's old nodes must have been created "
                f"{old[0].age_seconds:g} s ago, which needs an API server that lets the "
                "simulator give objects their creation times (the in-process test API server); "
                "set old_nodes.age_seconds to 0 to create them now"
            )
        for informer in (self.pods, self.nodes, self.leases):
            self._spawn(informer.run(), f"informer {informer.name}")
        async with asyncio.timeout(sync_timeout):
            for informer in (self.pods, self.nodes, self.leases):
                await informer.wait_synced()
        for pdb in self.scenario.pdbs:
            await self._create_pdb(pdb)
        for plan in old:
            await self._register(plan)
        self._spawn(self.metrics.run(), "sim agent metrics")
        if self.lifecycle is not None:
            self._spawn(self.lifecycle.run(), "sim node lifecycle")

    def start_waves(self) -> None:
        """Scenario time starts now: the waves join on schedule, faults start on time."""
        if self.clock.started_at is not None:
            raise SimulatorError("the waves have started already")
        self.clock.start()
        self._spawn(self._waves(), "sim waves")
        for pdb in self.scenario.pdbs:
            if pdb.relax_at_seconds is not None:
                self._spawn(self._relax(pdb, pdb.relax_at_seconds), f"sim pdb {pdb.name}")

    # ------------------------------------------------------------------ budgets

    async def _create_pdb(self, pdb: PDBSpec) -> None:
        spec: dict[str, Any] = {"selector": {"matchLabels": {"app": pdb.app}}}
        if pdb.min_available is not None:
            spec["minAvailable"] = pdb.min_available
        else:
            spec["maxUnavailable"] = pdb.max_unavailable
        body = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": pdb.name, "namespace": self.scenario.namespace},
            "spec": spec,
        }
        ns = self.scenario.namespace
        await self.api.request(
            "POST", PODDISRUPTIONBUDGETS, "create", PODDISRUPTIONBUDGETS.path(ns), body=body
        )

    async def _relax(self, pdb: PDBSpec, at: float) -> None:
        """From ``at`` on, the budget allows ``relax_to`` disruptions (its owner relaxed it)."""
        delay = self.clock.at(at) - self.clock.now()
        if delay > 0:
            await asyncio.sleep(delay)
        patch = {"spec": {"minAvailable": None, "maxUnavailable": pdb.relax_to}}
        while True:
            try:
                await self.api.request(
                    "PATCH",
                    PODDISRUPTIONBUDGETS,
                    "patch",
                    PODDISRUPTIONBUDGETS.path(self.scenario.namespace, pdb.name),
                    body=patch,
                    content_type=MERGE_PATCH,
                )
                break
            except KubeError as exc:
                log.warning("cannot relax PodDisruptionBudget %s yet: %s", pdb.name, exc)
                await asyncio.sleep(_REGISTER_RETRY)
        self.timeline.record(pdb.name, timeline.PDB_RELAXED, str(pdb.relax_to))

    async def _waves(self) -> None:
        joining = sorted(
            (p for p in self.layout.nodes if p.role != "old"), key=lambda p: (p.join_at, p.name)
        )
        for plan in joining:
            delay = self.clock.at(plan.join_at) - self.clock.now()
            if delay > 0:
                await asyncio.sleep(delay)
            await self._register(plan)
        self.joined.set()

    async def _register(self, plan: NodePlan) -> None:
        kubelet = self.kubelets[plan.name]
        runtime = self.runtimes.get(plan.name)
        if runtime is not None and plan.orphan_sandboxes:
            # Left by an earlier attempt on this machine, before the kubelet registers.
            runtime.add_orphans(plan.orphan_sandboxes, self.scenario.namespace, self.clock.now())
        while True:
            try:
                if plan.age_seconds > 0 and self._backdate is not None:
                    await self._register_old(kubelet, plan.age_seconds, self._backdate)
                else:
                    await kubelet.register()
                break
            except KubeError as exc:
                log.warning("simulated node %s cannot register yet: %s", plan.name, exc)
                await asyncio.sleep(_REGISTER_RETRY)
        runtime = self.runtimes.get(plan.name)
        if runtime is not None:
            name = plan.name
            self.metrics.add(
                NodeAgent(
                    name,
                    runtime,
                    NodeAPIView(self.index, name),
                    kubelet_alive=lambda: kubelet.alive(self.clock.now()),
                    drift_grace_seconds=self.scenario.timing.drift_grace_seconds,
                    clock=self.clock.now,
                    down=lambda: plan.active(AGENT_DOWN, self.clock.t()) is not None,
                    memory_pressure=lambda: (
                        plan.active(MEMORY_PRESSURE, self.clock.t()) is not None
                    ),
                    node_object=lambda: self.nodes.store.get(name),
                    writer=self._writer,
                )
            )
        self._spawn(kubelet.run(), f"sim kubelet {plan.name}")

    async def _register_old(
        self, kubelet: SimulatedKubelet, age: float, backdate: Backdate
    ) -> None:
        """Register a node created ``age`` seconds ago: its own objects get that creation
        time, one by one (nothing else the server creates meanwhile does)."""
        created_at = self.clock.now() - age
        with contextlib.ExitStack() as stack:
            for resource, namespace, name in kubelet.registration_objects():
                stack.enter_context(backdate(resource, namespace, name, created_at))
            await kubelet.register(created_ago=age)

    async def serve_metrics(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Serve the simulated agents' metrics; the port."""
        if self._runner is not None:
            raise SimulatorError("the metrics are served already")
        runner = web.AppRunner(self.metrics.app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        return int(runner.addresses[0][1])

    async def stop(self) -> None:
        """Stop every simulated kubelet, agent and watch; what they created stays in the API
        server (a stopped kubelet does not delete its Node)."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def __aenter__(self) -> Simulator:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()


def _report(task: asyncio.Task[None]) -> None:
    if task.cancelled():
        return
    with contextlib.suppress(asyncio.CancelledError):
        exc = task.exception()
        if exc is not None:
            log.error("simulator task %s failed", task.get_name(), exc_info=exc)
