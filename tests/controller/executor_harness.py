"""The rollback executor's test bench: the test API server, the real client, the cluster watch,
the NodeRollback watch, a journal file, the writers and an executor, plus a stand-in for the
nodes' agents.

``Agent`` plays the node agent's side of the runtime cleanup handshake: it answers each
``nodesync.io/cleanup-request`` annotation with a ``nodesync.io/cleanup-status`` of the same id,
written into the API server's store directly, so the answers never count as API writes. The full
run with a real containerd and the real agent is assembled elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.controller.cluster import ClusterWatch
from exporter.controller.executor import REFUSAL_REASONS, Executor, Leadership
from exporter.controller.journal import DecisionRecord, Journal
from exporter.controller.rollbacks import RollbackWatch
from exporter.controller.settings import ExecutorSettings
from exporter.controller.wiring import build_executor
from exporter.kube.api import KubeAPI
from exporter.kube.noderollbacks import RollbackWrites, node_rollback
from exporter.kube.ratelimit import AsyncRateLimiter
from exporter.kube.writer import KubeWriter
from exporter.metrics.rollback import RollbackMetrics
from exporter.model.alerts import Alert, WebhookPayload
from exporter.model.outcomes import OUTCOMES
from exporter.model.rfc3339 import format_micro_time, format_time
from exporter.model.rollback import (
    ACTIVE_PHASES,
    CLEANUP_REQUEST_ANNOTATION,
    CLEANUP_STATUS_ANNOTATION,
    NodeRollback,
    Phase,
)
from exporter.settings.declare import changed
from nodesync_sim.fake.apiserver import APIServer
from nodesync_sim.fake.apiserver.store import Store
from tests.support.wait import until_async

DAY = 86_400.0
#: When the test alerts began firing (one value, so that every copy is the same episode).
STARTED = float(int(time.time()) - 60)
LEASES = "kube-node-lease"


# ---------------------------------------------------------------- objects


def node_object(
    name: str,
    *,
    ready: str = "False",
    since: float | None = None,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    transition = format_time(since if since is not None else time.time() - 30)
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = taints
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": ready,
                    "reason": "KubeletReady" if ready == "True" else "KubeletNotReady",
                    "lastTransitionTime": transition,
                    "lastHeartbeatTime": transition,
                }
            ]
        },
    }


def lease_object(name: str, renew: float) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": 40,
            "renewTime": format_micro_time(renew),
        },
    }


def pod_object(
    name: str, node: str, *, owner: str = "ReplicaSet", labels: dict[str, str] | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "default",
        "labels": labels or {},
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": owner,
                "name": f"{name}-owner",
                "uid": f"{name}-owner-uid",
                "controller": True,
            }
        ],
    }
    return {
        "metadata": meta,
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def alert(
    node: str,
    action: str = "rollback_node",
    *,
    fingerprint: str | None = None,
    status: str = "firing",
    starts_at: float | None = None,
    **labels: str,
) -> Alert:
    return Alert(
        fingerprint=fingerprint or f"fp-{action}-{node}",
        status=status,
        labels={
            "alertname": "NodesyncNewNodeNotReady",
            "node": node,
            "nodesync_action": action,
            **labels,
        },
        starts_at=starts_at if starts_at is not None else STARTED,
    )


def payload(*alerts: Alert) -> WebhookPayload:
    return WebhookPayload(
        version="4",
        group_key='{}:{alertname="NodesyncNewNodeNotReady"}',
        status="firing" if any(a.status == "firing" for a in alerts) else "resolved",
        receiver="nodesync",
        alerts=tuple(alerts),
    )


# ---------------------------------------------------------------- the agent's side


@dataclass
class Agent:
    """Answers cleanup requests in the store (see the module docstring). ``hold`` keeps it
    from answering (as an agent that is gone); ``state`` is what it reports (``running`` only
    acknowledges: a cleanup that never finishes)."""

    store: Store
    hold: bool = False
    state: str = "done"
    answered: list[tuple[str, str]] = field(default_factory=list)

    def answer_once(self) -> None:
        if self.hold:
            return
        for obj in self.store.list("nodes"):
            meta = obj["metadata"]
            annotations = meta.get("annotations") or {}
            request = annotations.get(CLEANUP_REQUEST_ANNOTATION)
            if not request:
                continue
            status = annotations.get(CLEANUP_STATUS_ANNOTATION)
            if status and json.loads(status).get("id") == request:
                continue  # answered (or acknowledged) already
            answer = {
                "id": request,
                "state": self.state,
                "removedSandboxes": 2,
                "removedContainers": 3,
                "finishedAt": format_time(time.time()),
                "error": "" if self.state == "done" else "runtime unavailable",
            }
            self.store.patch(
                "nodes",
                meta["name"],
                {"metadata": {"annotations": {CLEANUP_STATUS_ANNOTATION: json.dumps(answer)}}},
            )
            self.answered.append((meta["name"], request))

    async def run(self) -> None:
        while True:
            self.answer_once()
            await asyncio.sleep(0.02)


# ---------------------------------------------------------------- the bench


FAST = changed(
    ExecutorSettings(),
    eviction_timeout=0.5,
    cleanup_ack_timeout=5.0,
    cleanup_timeout=10.0,
    max_concurrent_rollbacks=10,
)


@dataclass
class Bench:
    server: APIServer
    api: KubeAPI
    cluster: ClusterWatch
    watch: RollbackWatch
    journal: Journal
    journal_path: Path
    agent: Agent

    @property
    def store(self) -> Store:
        return self.server.store

    # -- cluster

    def add_node(
        self,
        name: str,
        *,
        age: float = 120.0,
        ready: str = "False",
        lease_age: float | None = 5.0,
        labels: dict[str, str] | None = None,
        taints: list[dict[str, str]] | None = None,
        changed_ago: float | None = None,
    ) -> None:
        """A node created ``age`` seconds ago, NotReady unless ``ready``; its Ready condition
        changed ``changed_ago`` seconds ago (default: 30 s after it joined); its Lease renewed
        ``lease_age`` seconds ago (None: no Lease)."""
        now = time.time()
        since = now - changed_ago if changed_ago is not None else now - age + 30
        with self.store.creation_time("nodes", "", name, now - age):
            self.store.create(
                "nodes",
                node_object(name, ready=ready, since=since, labels=labels, taints=taints),
            )
        if lease_age is not None:
            self.store.create("leases", lease_object(name, now - lease_age), namespace=LEASES)

    def renew_lease(self, name: str) -> None:
        """The node's kubelet renews its Lease now."""
        lease = self.store.get("leases", name, namespace=LEASES)
        lease["spec"]["renewTime"] = format_micro_time(time.time())
        self.store.replace("leases", lease, namespace=LEASES)

    def add_pod(self, name: str, node: str, **kw: Any) -> str:
        created = self.store.create("pods", pod_object(name, node, **kw), namespace="default")
        return str(created["metadata"]["uid"])

    def node(self, name: str) -> dict[str, Any]:
        return self.store.get("nodes", name)

    def events(self, reason: str | None = None) -> list[dict[str, Any]]:
        found = [
            e
            for ns in ("default",)
            for e in self.store.list("events", namespace=ns)
            if reason is None or e.get("reason") == reason
        ]
        return sorted(found, key=lambda e: e["metadata"]["name"])

    def event_reasons(self, name: str | None = None) -> list[str]:
        return sorted(
            e["reason"]
            for e in self.events()
            if name is None or e["involvedObject"]["name"] == name
        )

    async def wait_cluster(self, nodes: int) -> None:
        await self.cluster.wait_synced()
        await until_async(
            _count(self.cluster, nodes), timeout=15.0, what=f"{nodes} nodes in the cluster view"
        )

    # -- alerts

    async def deliver(self, *alerts: Alert) -> None:
        await self.journal.record(payload(*alerts), received_at=time.time())

    # -- executor

    def executor(
        self,
        settings: ExecutorSettings = FAST,
        *,
        leadership: Leadership | None = None,
        limiter: AsyncRateLimiter | None = None,
        api: KubeAPI | None = None,
        writer: KubeWriter | None = None,
        writes: RollbackWrites | None = None,
    ) -> Executor:
        writer = writer or KubeWriter(api or self.api, limiter=limiter, dry_run=settings.dry_run)
        return build_executor(
            self.journal,
            writer,
            writes or RollbackWrites(api or self.api, limiter=limiter),
            self.watch,
            self.cluster,
            settings,
            RollbackMetrics(REFUSAL_REASONS, OUTCOMES),
            leadership=leadership,
            limiter=limiter,
            identity="test-controller",
            poll_interval=0.05,
            step_poll_interval=0.02,
            retry_initial=0.01,
            retry_max=0.05,
        )

    def rollbacks(self, *phases: Phase) -> list[NodeRollback]:
        """The NodeRollbacks in the server (in these phases), oldest first."""
        found = [node_rollback(o) for o in self.store.list("noderollbacks")]
        found = [r for r in found if not phases or r.status.phase in phases]
        return sorted(found, key=lambda r: (r.created_at, r.name))

    async def decisions(self, verdict: str | None = None) -> list[DecisionRecord]:
        return await self.journal.decisions(verdict)

    async def settled(self, executor: Executor, within: float = 20.0) -> None:
        """Run passes until every firing alert is decided (deferred ones stay deferred) and no
        NodeRollback is active, as the watch sees them: the watch holds every NodeRollback at
        the version the server holds (``executor.status()``, the phases, reasons and budget
        the metrics show, reads the watch, which sees the last status write after it landed)."""

        async def quiet() -> bool:
            await executor.run_once()
            await executor.wait_idle()
            undecided = await self.journal.alerts_to_decide()
            active = [r for r in self.rollbacks() if r.status.phase in ACTIVE_PHASES]
            return not active and self.watch_current() and len(undecided) == len(deferred(executor))

        await until_async(quiet, timeout=within, what="the executor to settle")

    def watch_current(self) -> bool:
        """The NodeRollback watch holds what the server holds: every one, at its version."""
        seen = {r.name: r.resource_version for r in self.watch.all()}
        return seen == {r.name: r.resource_version for r in self.rollbacks()}


def deferred(executor: Executor) -> dict[tuple[str, float], str]:
    return executor.intake._deferred


def _count(cluster: ClusterWatch, n: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return len(cluster.view().nodes) == n

    return check


@asynccontextmanager
async def running(executor: Executor) -> AsyncIterator[asyncio.Task[None]]:
    """The executor's own loop, as a task, cancelled on exit."""
    task = asyncio.create_task(executor.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@asynccontextmanager
async def bench(tmp_path: Path, cohort_keys: tuple[str, ...] = ()) -> AsyncIterator[Bench]:
    """``cohort_keys``: what the cluster view groups the nodes by (none: no cohorts)."""
    async with APIServer(bookmark_interval=0.2) as server:
        api = KubeAPI(server.aio_configuration())
        cluster = ClusterWatch(api, wave_label=None, wave_gap=120.0, cohort_keys=cohort_keys)
        watch = RollbackWatch(api)
        journal_path = tmp_path / "journal.db"
        journal = await Journal.open(str(journal_path))
        agent = Agent(server.store)
        tasks = [asyncio.create_task(agent.run()), asyncio.create_task(watch.run())]
        cluster.start()
        try:
            await watch.wait_synced()
            yield Bench(server, api, cluster, watch, journal, journal_path, agent)
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await cluster.stop()
            await journal.close()
            await api.close()


def settings(**kw: Any) -> ExecutorSettings:
    """FAST with these settings changed (the executor's and its policy's alike)."""
    return changed(FAST, **kw)


def nodes_patched(server: APIServer) -> int:
    return server.counters.count("patch", "nodes")


def step_states(rollback: NodeRollback) -> list[tuple[str, str]]:
    return [(s.kind.value, s.state.value) for s in rollback.status.steps]


def names(rollbacks: Iterable[NodeRollback]) -> list[str]:
    return sorted(r.spec.node for r in rollbacks)


def noderollback_writes(server: APIServer) -> dict[str, int]:
    """NodeRollback requests the server answered with success, by verb (status updates apart)."""
    counts = server.counters
    return {
        "create": counts.count("create", "noderollbacks"),
        "update": counts.count("update", "noderollbacks"),
        "status": counts.count("update", "noderollbacks/status"),
        "delete": counts.count("delete", "noderollbacks"),
    }
