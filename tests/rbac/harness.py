"""nodesync under the RBAC it ships: the test API server authorizes every request with the
Roles, ClusterRoles and bindings of the built manifests, and the agent and the controller run
as their service accounts (each with its own token), with the settings the manifests give them.

A run succeeds when nodesync did its job (``AgentRun.missing`` / ``ControllerRun.missing``
say what is not done yet); ``watch`` polls that until it holds, or, when a permission was taken
away, until a request it governs was refused and the run still has not succeeded a while later.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from aiohttp import ClientTimeout
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from exporter.agent.app import make_app as make_agent_app
from exporter.agent.settings import AgentSettings
from exporter.controller.app import make_app as make_controller_app
from exporter.controller.journal import Journal
from exporter.controller.keys import CLUSTER, JOURNAL
from exporter.controller.settings import ControllerSettings, ExecutorSettings, WebhookSettings
from exporter.controller.wiring import rollback_extensions
from exporter.kube.noderollbacks import node_rollback
from exporter.model.cleanup import CleanupState, CleanupStatus
from exporter.model.rollback import CLEANUP_REQUEST_ANNOTATION, CLEANUP_STATUS_ANNOTATION, Phase
from exporter.settings.declare import build, changed
from nodesync_sim.fake.apiserver import APIServer
from nodesync_sim.fake.apiserver.rbac import Permission, RBACAuthorizer, service_account
from nodesync_sim.fake.apiserver.server import write_kubeconfig
from nodesync_sim.real.containerd import LocalContainerd
from nodesync_sim.real.runtime_pods import ContainerSpec, run_pod
from tests.controller.alert_builders import alert, body
from tests.deploy.commandline import parse_container
from tests.deploy.manifests import (
    COMPONENTS,
    NAMESPACE,
    OVERLAYS,
    Obj,
    build_with,
    container,
    controller_workload,
    one,
)
from tests.metrics.exposition import labels, series

AGENT = service_account(NAMESPACE, "nodesync-agent")
CONTROLLER = service_account(NAMESPACE, "nodesync-controller")
#: kube-prometheus' Prometheus, bound by the monitoring component (not nodesync's own).
PROMETHEUS = service_account("monitoring", "prometheus-k8s")
NODE = "node-a"
IDENTITY = "nodesync-controller-0"
WEBHOOK_TOKEN = "webhook-token-for-the-rbac-run"
SOURCE_API = labels(source="apiserver")
#: The Events a node rollback records on the Node, one per step.
ROLLBACK_EVENTS = frozenset(
    {
        "NodesyncCordon",
        "NodesyncTaint",
        "NodesyncDrain",
        "NodesyncCleanupRuntime",
        "NodesyncVerify",
        "NodesyncDeleteNode",
    }
)


def shipped_objects() -> list[Obj]:
    """A fresh copy (callers may change it)."""
    return copy.deepcopy(list(_shipped()))


@functools.cache
def _shipped() -> tuple[Obj, ...]:
    """Everything nodesync ships that grants permissions: the ha overlay (the base, plus the
    leader Lease) with the delete-nodes component."""
    return tuple(build_with([OVERLAYS / "ha"], [COMPONENTS / "delete-nodes"]))


def shipped_rbac() -> RBACAuthorizer:
    return RBACAuthorizer.from_objects(_shipped())


def shipped_agent_settings() -> AgentSettings:
    args, _ = parse_container(
        container(one(list(_shipped()), "DaemonSet", "nodesync-agent"), "agent")
    )
    return build(AgentSettings, args)


def shipped_hook_settings() -> ExecutorSettings:
    spec = container(controller_workload(list(_shipped())), "controller")
    args, _ = parse_container(spec)
    return build(ExecutorSettings, args)


# ---------------------------------------------------------------- the cluster


def _node(name: str) -> dict[str, Any]:
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "KubeletNotReady",
                    "lastTransitionTime": since,
                    "lastHeartbeatTime": since,
                }
            ]
        },
    }


def _lease(name: str) -> dict[str, Any]:
    renew = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    return {
        "metadata": {"name": name},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": renew},
    }


def _pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{name}-rs",
                    "uid": str(uuid.uuid4()),
                    "controller": True,
                }
            ],
        },
        "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "busybox"}]},
        "status": {"phase": "Running"},
    }


@dataclass
class Cluster:
    server: APIServer
    authorizer: RBACAuthorizer
    agent_kubeconfig: Path
    controller_kubeconfig: Path

    def node(self) -> dict[str, Any] | None:
        return self.server.store.try_get("nodes", NODE)

    def refused(self, permission: Permission) -> bool:
        return any(permission.matches(r) for r in self.authorizer.denials())


def _directory(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


@asynccontextmanager
async def cluster(authorizer: RBACAuthorizer, tmp_path: Path) -> AsyncIterator[Cluster]:
    """The test API server with one new node that failed to join (NotReady), its Lease, and a
    pod on it; the agent's and the controller's tokens authenticate their service accounts."""
    agent_token, controller_token = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    tokens = {agent_token: AGENT, controller_token: CONTROLLER}
    async with APIServer(
        authorizer=authorizer, extra_tokens=tokens, bookmark_interval=0.2
    ) as server:
        store = server.store
        store.create("namespaces", {"metadata": {"name": NAMESPACE}})
        store.create("nodes", _node(NODE))
        store.create("leases", _lease(NODE), namespace="kube-node-lease")
        store.create("pods", _pod("web"), namespace="default")
        yield Cluster(
            server,
            authorizer,
            write_kubeconfig(_directory(tmp_path) / "agent.kubeconfig", server.url, agent_token),
            write_kubeconfig(tmp_path / "controller.kubeconfig", server.url, controller_token),
        )


# ---------------------------------------------------------------- the agent


ORPHAN = [ContainerSpec("app", ["/bin/sleep", "inf"])]


@dataclass
class AgentRun:
    cluster: Cluster
    client: TestClient[Any, Any]
    containerd: LocalContainerd

    async def scrape(self) -> str:
        response = await self.client.get("/metrics", timeout=ClientTimeout(total=5.0))
        assert response.status == 200
        return await response.text()

    def status(self) -> CleanupStatus | None:
        node = self.cluster.node()
        annotations = (node or {}).get("metadata", {}).get("annotations") or {}
        return CleanupStatus.from_json(annotations.get(CLEANUP_STATUS_ANNOTATION, ""))

    def request(self, request_id: str) -> None:
        """What the controller does: ask the agent for a cleanup."""
        patch = {"metadata": {"annotations": {CLEANUP_REQUEST_ANNOTATION: request_id}}}
        self.cluster.server.store.patch("nodes", NODE, patch)

    async def missing(self, request_id: str) -> str | None:
        """None once the agent watches its Node, Lease and pods and answered ``request_id``."""
        text = await self.scrape()
        if series(text, "nodesync_source_up").get(SOURCE_API) != 1:
            return "the agent's view of the API server is not up"
        status = self.status()
        if status is None or status.id != request_id:
            return f"the agent has not answered cleanup request {request_id}"
        if status.state is not CleanupState.DONE:
            return f"the cleanup failed: {status.error}"
        return None


@asynccontextmanager
async def agent(
    cluster: Cluster, containerd: LocalContainerd, tmp_path: Path
) -> AsyncIterator[AgentRun]:
    """The agent as the DaemonSet configures it, on a private containerd and kubelet root, with
    short periods; an orphan sandbox in the runtime for it to clean up."""
    kubelet_root = _directory(tmp_path / "kubelet" / "pods").parent
    settings = replace(
        shipped_agent_settings(),
        cri_endpoint=containerd.endpoint,
        listen=("127.0.0.1", 0),
        sync_period=0.2,
        kubelet_root_dir=str(kubelet_root),
        containerd_root=str(containerd.root),
        kubelet_healthz_url="http://127.0.0.1:9/healthz",
        kubelet_timeout=0.2,
        node_name=NODE,
        kubeconfig=str(cluster.agent_kubeconfig),
        api_initial_jitter=0.0,
        drift_grace_period=0.3,
    )
    assert settings.cleanup, "the shipped agent answers cleanup requests"
    await run_pod(
        containerd.endpoint, f"orphan-{uuid.uuid4().hex[:6]}", "default", str(uuid.uuid4()), ORPHAN
    )
    app = make_agent_app(settings, CollectorRegistry())
    async with TestClient(TestServer(app)) as client:
        yield AgentRun(cluster, client, containerd)


# ---------------------------------------------------------------- the controller


@dataclass
class ControllerRun:
    cluster: Cluster
    client: TestClient[Any, Any]
    accepted: bool = False

    @property
    def journal(self) -> Journal:
        found: Journal = self.client.app[JOURNAL]
        return found

    async def notify(self) -> None:
        """Alertmanager: post the node's rollback alert until the controller accepts it (200),
        retrying 5xx (a follower answers 503) as Alertmanager does."""
        started = float(int(time.time()) - 60)
        # A cleanup of orphans first, then a rollback of the same node: one NodeRollback,
        # escalated.
        payload = body(
            alert(
                "00000000000000a0",
                node=NODE,
                starts_at=started,
                action="cleanup_orphans",
                alertname="NodesyncNodeNotReady",
            ),
            alert("00000000000000a1", node=NODE, starts_at=started),
        )
        headers = {"Authorization": f"Bearer {WEBHOOK_TOKEN}"}
        while True:
            response = await self.client.post("/alerts", json=payload, headers=headers)
            if response.status == 200:
                self.accepted = True
                return
            assert response.status >= 500, await response.text()
            await asyncio.sleep(0.2)

    def events(self) -> set[str]:
        return {
            e["reason"]
            for e in self.cluster.server.store.list("events", namespace="default")
            if e["involvedObject"]["name"] == NODE
        }

    def lease(self) -> dict[str, Any] | None:
        return self.cluster.server.store.try_get(
            "leases", "nodesync-controller", namespace=NAMESPACE
        )

    async def missing(self) -> str | None:
        """None once the controller rolled the node back: the cordon it decided first escalated
        to a node rollback, every step's Event, the node deleted, the NodeRollback succeeded
        and deleted after its retention, the leader Lease held and renewed, the view up."""
        if not self.accepted:
            return "the controller has not accepted the alert"
        cluster = self.client.app[CLUSTER]
        if not (cluster.synced and cluster.status().up):
            return "the controller's cluster view is not up"
        if cluster.pods is not None and not cluster.pods.up:
            return "the controller's watch of running pods is not up"
        lease = self.lease()
        spec = (lease or {}).get("spec") or {}
        if spec.get("holderIdentity") != IDENTITY:
            return "the controller does not hold the leader Lease"
        if spec.get("renewTime") == spec.get("acquireTime"):
            return "the controller has not renewed the leader Lease yet"
        verdicts = sorted(d.verdict for d in await self.journal.decisions())
        if verdicts != ["escalate", "plan"]:
            return f"the alerts were not decided as a plan and its escalation: {verdicts}"
        rollbacks = [node_rollback(o) for o in self.cluster.server.store.list("noderollbacks")]
        if rollbacks:
            r = rollbacks[0]
            if r.status.phase is Phase.SUCCEEDED:
                return "the finished rollback was not deleted after its retention"
            return f"the rollback has not succeeded: {r.status.phase.value} {r.status.reason}"
        if ROLLBACK_EVENTS - self.events():
            return f"Events missing: {sorted(ROLLBACK_EVENTS - self.events())}"
        if self.cluster.node() is not None:
            return "the node was not deleted"
        return None


@asynccontextmanager
async def controller(cluster: Cluster, tmp_path: Path) -> AsyncIterator[ControllerRun]:
    """The controller as the ha overlay with delete-nodes configures it: webhook, executor,
    leader election, deleting Nodes; short timeouts. Alertmanager posts the rollback alert of
    the node until the controller accepts it."""
    hook = changed(
        shipped_hook_settings(),
        leader_elect_identity=IDENTITY,
        eviction_timeout=2.0,
        cleanup_timeout=20.0,
        rollback_retention=0.5,
        max_rollbacks_window=0.5,
    )
    assert hook.leader_elect
    assert hook.policy.delete_nodes
    assert not hook.dry_run
    webhook = WebhookSettings(
        journal_path=str(tmp_path / "journal" / "journal.db"), token=WEBHOOK_TOKEN
    )
    settings = ControllerSettings(
        listen=("127.0.0.1", 0), kubeconfig=str(cluster.controller_kubeconfig)
    )
    app = make_controller_app(
        settings,
        registry=CollectorRegistry(),
        # A pass each 0.2 s: the run ends when its finished NodeRollback is deleted, which a
        # pass does; the shipped 5 s between passes would be most of the run.
        extensions=rollback_extensions(webhook, hook, poll_interval=0.2),
    )
    async with TestClient(TestServer(app)) as client:
        run = ControllerRun(cluster, client)
        alertmanager = asyncio.create_task(run.notify())
        try:
            yield run
        finally:
            alertmanager.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await alertmanager


# ---------------------------------------------------------------- outcomes


@dataclass(frozen=True)
class Outcome:
    succeeded: bool
    missing: str  # what was not done ("" on success)
    seconds: float
    refused: bool  # a request the removed permission governs was refused


async def watch(
    missing: Callable[[], Awaitable[str | None]],
    cluster: Cluster,
    *,
    removed: Permission | None = None,
    within: float = 40.0,
    grace: float = 3.0,
) -> Outcome:
    """Poll ``missing`` until the run succeeds, or: with a permission removed, until a request
    it governs was refused and ``grace`` seconds more brought no success; without, until
    ``within`` seconds passed."""
    started = time.monotonic()
    refused_at: float | None = None
    last = ""
    while True:
        now = time.monotonic()
        found = await missing()
        if found is None:
            return Outcome(True, "", now - started, refused_at is not None)
        last = found
        if removed is not None and refused_at is None and cluster.refused(removed):
            refused_at = now
        if refused_at is not None and now - refused_at > grace:
            return Outcome(False, last, now - started, True)
        if now - started > within:
            return Outcome(False, last, now - started, refused_at is not None)
        await asyncio.sleep(0.05)
