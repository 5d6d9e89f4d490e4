"""Agent metrics for the simulated nodes, made by the agent's own code.

Each simulated node gets the agent's sync (:class:`exporter.agent.sync.AgentSync`) over
simulated sources: the node's :class:`~nodesync_sim.fake.scaleout.runtime.SimRuntime` as the
runtime, its kubelet (healthy while it talks to the API server; a pod directory per pod it
runs), a host with plenty of memory, disk and pids, and the pods the API server binds to the node
(the shared pod watch). The agent's mapping (:func:`exporter.agent.exposition.agent_families`:
pod phases from both sources, the API server's per-pod problems, container terminations and
loops, drift, source status) turns that into the same families a real agent exports. All nodes
are served on one port, every series with a ``node`` label (scrape it with
``honor_labels: true``), for as long as the node's Node object exists (a deleted node's agent
pod goes away with it). Each agent's series are rendered once per sync, right after it, in the
exposition format the last scrape asked for; a scrape joins what the agents rendered (rendering
hundreds of agents at every scrape held the event loop for most of a second).

What is not there: CRI request metrics (no CRI calls are made), resource usage and image
filesystem sizes (nothing runs).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import cast

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from exporter import __version__
from exporter.agent.cleanup import CleanupAPI, NodeCleanup
from exporter.agent.exposition import agent_families
from exporter.agent.sources import SOURCE_CRI
from exporter.agent.sync import AgentSync
from exporter.cri.errors import NotFound, RuntimeTimeout
from exporter.metrics.collector import SnapshotCollector
from exporter.metrics.cri_requests import SyncMetrics
from exporter.metrics.selfmetrics import build_info_family, start_family
from exporter.model.host import FilesystemStat, HostSnapshot, KubeletSnapshot
from exporter.model.kube import NodeInfo
from exporter.model.runtime import Container, PodSandbox, RuntimeSnapshot
from nodesync_sim.fake.scaleout.pods import NodeAPIView
from nodesync_sim.fake.scaleout.runtime import SimRuntime

log = logging.getLogger(__name__)

NODE_LABEL = "node"
_GIB = 1024**3


def simulated_host(now: float, *, memory_pressure: bool = False) -> HostSnapshot:
    """A roomy host: no eviction threshold is near (or memory is: 64 MiB available, under
    kubelet's default memory.available<100Mi)."""
    return HostSnapshot(
        taken_at=now,
        memory_total_bytes=16 * _GIB,
        memory_available_bytes=64 * 1024**2 if memory_pressure else 12 * _GIB,
        filesystems=(
            FilesystemStat(
                "nodefs", "/var/lib/kubelet", 100 * _GIB, 60 * _GIB, 6_000_000, 5_000_000
            ),
            FilesystemStat(
                "imagefs", "/var/lib/containerd", 100 * _GIB, 60 * _GIB, 6_000_000, 5_000_000
            ),
        ),
        pids_in_use=400,
        pid_max=4_194_304,
    )


def _frozen(runtime: SimRuntime, operation: str) -> None:
    if runtime.frozen:
        raise RuntimeTimeout(operation, "DEADLINE_EXCEEDED", "context deadline exceeded")


class _Runtime:
    def __init__(self, runtime: SimRuntime, clock: Callable[[], float]) -> None:
        self._runtime = runtime
        self._clock = clock

    async def read(self) -> RuntimeSnapshot:
        _frozen(self._runtime, "list_pod_sandboxes")
        return self._runtime.snapshot(self._clock())


class SimCRI:
    """The CRI calls of a cleanup (exporter.agent.cleanup.CleanupRuntime) on a simulated
    runtime: a frozen runtime times every call out, a missing object is NOT_FOUND."""

    def __init__(self, runtime: SimRuntime, clock: Callable[[], float]) -> None:
        self._runtime = runtime
        self._clock = clock

    async def list_pod_sandboxes(self) -> tuple[PodSandbox, ...]:
        _frozen(self._runtime, "list_pod_sandboxes")
        return self._runtime.snapshot(self._clock()).sandboxes

    async def list_containers(self) -> tuple[Container, ...]:
        _frozen(self._runtime, "list_containers")
        return self._runtime.snapshot(self._clock()).containers

    async def pod_sandbox_status(self, pod_sandbox_id: str) -> PodSandbox:
        _frozen(self._runtime, "pod_sandbox_status")
        found = self._runtime.sandbox_by_id(pod_sandbox_id)
        if found is None:
            raise NotFound("pod_sandbox_status", "NOT_FOUND", pod_sandbox_id)
        return found

    async def container_status(self, container_id: str, pod_sandbox_id: str = "") -> Container:
        _frozen(self._runtime, "container_status")
        found = self._runtime.container_by_id(container_id)
        if found is None:
            raise NotFound("container_status", "NOT_FOUND", container_id)
        return found

    async def stop_pod_sandbox(
        self, pod_sandbox_id: str, call_timeout: float | None = None
    ) -> None:
        _frozen(self._runtime, "stop_pod_sandbox")
        sandbox = self._runtime.sandbox_by_id(pod_sandbox_id)
        if sandbox is not None:
            self._runtime.stop(sandbox.uid, self._clock())

    async def remove_pod_sandbox(
        self, pod_sandbox_id: str, call_timeout: float | None = None
    ) -> None:
        _frozen(self._runtime, "remove_pod_sandbox")
        self._runtime.remove_sandbox(pod_sandbox_id)

    async def stop_container(self, container_id: str, timeout_seconds: int = 0) -> None:
        _frozen(self._runtime, "stop_container")

    async def remove_container(self, container_id: str, call_timeout: float | None = None) -> None:
        _frozen(self._runtime, "remove_container")
        self._runtime.remove_container(container_id)


class _Kubelet:
    def __init__(
        self, runtime: SimRuntime, alive: Callable[[], bool], clock: Callable[[], float]
    ) -> None:
        self._runtime = runtime
        self._alive = alive
        self._clock = clock

    async def read(self) -> KubeletSnapshot:
        healthy = self._alive()
        return KubeletSnapshot(
            taken_at=self._clock(),
            healthy=healthy,
            pod_uids=self._runtime.pod_uids(),
            pod_dir_readable=True,
            error="" if healthy else "kubelet is not responding",
        )


class NodeAgent:
    """The agent of one simulated node."""

    def __init__(
        self,
        node: str,
        runtime: SimRuntime,
        view: NodeAPIView,
        *,
        kubelet_alive: Callable[[], bool],
        drift_grace_seconds: float,
        clock: Callable[[], float] = time.time,
        down: Callable[[], bool] = lambda: False,
        memory_pressure: Callable[[], bool] = lambda: False,
        node_object: Callable[[], NodeInfo | None] | None = None,
        writer: CleanupAPI | None = None,
    ) -> None:
        self.node = node
        self.down = down
        self.registry = CollectorRegistry(auto_describe=False)
        self.started_at = clock()
        self.sync = AgentSync(
            _Runtime(runtime, clock),
            _Kubelet(runtime, kubelet_alive, clock),
            lambda: simulated_host(clock(), memory_pressure=memory_pressure()),
            SyncMetrics(self.registry),
            api=view,
            drift_grace_seconds=drift_grace_seconds,
            clock=clock,
        )
        self._static = [build_info_family(__version__), start_family(self.started_at)]
        #: The cleanup handshake (docs/cleanup.md), as the real agent answers it: given the
        #: node's Node (its watch) and a writer for the answer.
        self.cleanup: NodeCleanup | None = None
        if node_object is not None and writer is not None:
            sync = self.sync
            self.cleanup = NodeCleanup(
                node,
                node=node_object,
                drift=lambda: sync.state.drift,
                runtime=SimCRI(runtime, clock),
                runtime_error=lambda: _runtime_error(sync),
                api=writer,
                clock=clock,
            )

    def families(self) -> list[Metric]:
        return [*self._static, *agent_families(self.sync.state), *self.registry.collect()]


def _runtime_error(sync: AgentSync) -> str:
    source = sync.state.sources.get(SOURCE_CRI)
    if source is None or source.up:
        return ""
    return source.error or "the runtime does not answer"


def with_node_label(per_node: Mapping[str, Iterable[Metric]]) -> list[Metric]:
    """One family per name (an exposition may name a family once), each sample labelled with
    its node."""
    merged: dict[str, Metric] = {}
    for node, families in per_node.items():
        for family in families:
            target = merged.get(family.name)
            if target is None:
                target = Metric(family.name, family.documentation, family.type, family.unit)
                merged[family.name] = target
            for s in family.samples:
                labels = {**s.labels, NODE_LABEL: node}
                target.samples.append(Sample(s.name, labels, s.value, s.timestamp, s.exemplar))
    return list(merged.values())


#: Agents synced (and rendered) between two yields to the event loop.
YIELD_EVERY = 20

Encoder = Callable[[Collector], bytes]
_EOF = b"# EOF\n"  # OpenMetrics ends the exposition with it, once


class _Single:
    """One family as a collector, to render it alone."""

    def __init__(self, family: Metric) -> None:
        self._family = family

    def collect(self) -> Iterable[Metric]:
        return [self._family]


#: A family rendered for one node: its name, its header lines (HELP, TYPE, UNIT), its samples.
Rendered = tuple[str, bytes, bytes]


def render_node(node: str, families: Iterable[Metric], encode: Encoder) -> list[Rendered]:
    """``node``'s families, each labelled with the node and rendered alone by ``encode``, cut
    where the exposition starts a family (a HELP line: the text format writes a counter's or a
    histogram's ``_created`` series as a family of its own)."""
    out: list[Rendered] = []
    for family in with_node_label({node: families}):
        text = encode(cast(Collector, _Single(family)))
        if text.endswith(_EOF):
            text = text[: -len(_EOF)]
        name = ""
        header: list[bytes] = []
        samples: list[bytes] = []
        for line in text.splitlines(keepends=True):
            if line.startswith(b"# HELP "):
                if header:
                    out.append((name, b"".join(header), b"".join(samples)))
                name, header, samples = line.split(b" ", 3)[2].decode(), [line], []
            elif line.startswith(b"# ") and not samples:
                header.append(line)
            else:
                samples.append(line)
        if header:
            out.append((name, b"".join(header), b"".join(samples)))
    return out


def join_rendered(per_node: Iterable[list[Rendered]], *, eof: bool) -> bytes:
    """One exposition: each family's header once, then its samples of every node in order."""
    headers: dict[str, bytes] = {}
    samples: dict[str, list[bytes]] = {}
    for rendered in per_node:
        for name, header, lines in rendered:
            if name not in headers:
                headers[name] = header
                samples[name] = []
            samples[name].append(lines)
    body = b"".join(headers[name] + b"".join(samples[name]) for name in headers)
    return body + _EOF if eof else body


class AgentMetrics:
    """The agents of every simulated node, synced every ``period`` and served together."""

    def __init__(
        self,
        period: float,
        exists: Callable[[str], bool],
        fail_scrape: Callable[[], bool] = lambda: False,
    ) -> None:
        self.period = period
        self._exists = exists
        self._fail_scrape = fail_scrape
        self.agents: dict[str, NodeAgent] = {}
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SnapshotCollector(self.families))
        self.cycles = 0
        #: The encoder the last scrape asked for (its content type), and per node what its
        #: agent's last sync rendered with it.
        self._encoding: tuple[Encoder, str] = choose_encoder("")
        self._rendered: dict[str, tuple[str, list[Rendered]]] = {}

    def add(self, agent: NodeAgent) -> None:
        self.agents[agent.node] = agent

    def _served(self, node: str, agent: NodeAgent) -> bool:
        return agent.sync.state.synced and self._exists(node) and not agent.down()

    def families(self) -> list[Metric]:
        served = {
            node: agent.families()
            for node, agent in sorted(self.agents.items())
            if self._served(node, agent)
        }
        return with_node_label(served)

    def _render(self, agent: NodeAgent) -> list[Rendered]:
        encode, content_type = self._encoding
        rendered = render_node(agent.node, agent.families(), encode)
        self._rendered[agent.node] = (content_type, rendered)
        return rendered

    def exposition(self, accept: str = "") -> tuple[bytes, str]:
        """What a scrape with this Accept header gets, and its content type: every served
        node's series as its agent's last sync rendered them (rendered now for a node whose
        render is missing or in another format)."""
        self._encoding = encode, content_type = choose_encoder(accept)
        per_node = []
        for node, agent in sorted(self.agents.items()):
            if not self._served(node, agent):
                continue
            cached = self._rendered.get(node)
            per_node.append(
                cached[1]
                if cached is not None and cached[0] == content_type
                else self._render(agent)
            )
        eof = encode(cast(Collector, CollectorRegistry(auto_describe=False))).endswith(_EOF)
        return join_rendered(per_node, eof=eof), content_type

    async def sync_once(self) -> None:
        for index, agent in enumerate(list(self.agents.values())):
            if index % YIELD_EVERY == YIELD_EVERY - 1:
                # A few agents at a time: the loop serves the others in between, and a cycle
                # of hundreds stays well inside its period (yielding after every agent made
                # a 220-agent cycle take up to 9 s of a 4 s period on a busy loop).
                await asyncio.sleep(0)
            if agent.down():  # agent_down: it neither syncs nor answers
                continue
            try:
                await agent.sync.sync_once()
                if agent.cleanup is not None:
                    await agent.cleanup.check_once()
                if agent.sync.state.synced:
                    self._render(agent)
            except Exception:  # one node's bug must not stop the others' metrics
                log.exception("simulated agent of %s: sync failed", agent.node)
        self.cycles += 1

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            await self.sync_once()
            next_at = max(next_at + self.period, loop.time())
            await asyncio.sleep(next_at - loop.time())

    def app(self) -> web.Application:
        app = web.Application()

        async def metrics(request: web.Request) -> web.Response:
            if self._fail_scrape():
                return web.Response(status=503, text="overloaded\n")
            body, content_type = self.exposition(request.headers.get("Accept", ""))
            return web.Response(body=body, headers={"Content-Type": content_type})

        async def healthz(request: web.Request) -> web.Response:
            return web.json_response({"status": "ok", "nodes": len(self.agents)})

        app.router.add_get("/metrics", metrics)
        app.router.add_get("/healthz", healthz)
        return app
