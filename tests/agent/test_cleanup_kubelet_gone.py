"""Pods evicted from a node whose kubelet is gone, with everything real but the kubelet: a real
kube-apiserver (which, without a kubelet to confirm it, keeps a gracefully deleted pod
Terminating for good), a real containerd running the pods' sandboxes, the agent's app as its
service account, and kubelet's healthz served as a real kubelet's answers it (``ok``) or as a
silent one's does not. The Node's Ready condition is written as the node lifecycle controller
writes it.

- the kubelet gone (healthz failing, Ready Unknown): the request is acknowledged and waits while
  the evicted pods' deletion is not due, nothing removed before their deletionTimestamp; then
  their sandboxes and containers are removed, the running pod's are not, and the answer says
  the runtime holds nothing unwanted;
- the kubelet answering (Ready Unknown: a partition) or the Node Ready: nothing of the evicted
  pods is removed, though their deletion is past;
- a deletion that is not due: nothing removed, the request stays acknowledged;
- the agent's own pod deleted too (its DaemonSet updated): neither waited for nor removed, and
  not counted as remaining, while another pod deleted alike is removed.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from exporter.agent.app import make_app
from exporter.agent.cleanup import NodeCleanup
from exporter.agent.keys import CLEANUP
from exporter.cri.client import CRIClient
from exporter.model.cleanup import ANSWERS, CleanupState, CleanupStatus, Remaining
from exporter.model.rfc3339 import format_time, parse_time
from exporter.model.rollback import CLEANUP_REQUEST_ANNOTATION, CLEANUP_STATUS_ANNOTATION
from exporter.model.runtime import ContainerState, SandboxState
from nodesync_sim.fake.scaleout.realnode import KubeletHealthz
from nodesync_sim.real.containerd import LocalContainerd
from nodesync_sim.real.kube_apiserver import AGENT, LocalKubeAPIServer
from nodesync_sim.real.runtime_pods import ContainerSpec, Pod, run_pod
from tests.agent.settings import agent_settings
from tests.support.kubeapi import KubeCleanup
from tests.support.realkube import MERGE_PATCH
from tests.support.wait import until_async

pytestmark = [pytest.mark.kubeapi, pytest.mark.containerd, pytest.mark.timeout(120)]

SLEEPER = [ContainerSpec("app", ["/bin/sleep", "inf"])]


@dataclass
class Scene:
    server: LocalKubeAPIServer
    namespace: str
    node: str
    containerd: LocalContainerd
    client: TestClient
    kubelet: dict[str, bool]

    @property
    def cleanup(self) -> NodeCleanup:
        return self.client.app[CLEANUP]

    @property
    def pods(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods"

    def set_ready(self, status: str) -> None:
        """The Node's Ready condition, as kubelet (True) or the node lifecycle controller
        (Unknown: "Kubelet stopped posting node status.") writes it."""
        now = format_time(time.time())
        condition = {
            "type": "Ready",
            "status": status,
            "reason": "NodeStatusUnknown" if status == "Unknown" else "KubeletReady",
            "message": "Kubelet stopped posting node status.",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        patch = {"status": {"conditions": [condition]}}
        self.server.ok(
            "PATCH", f"/api/v1/nodes/{self.node}/status", patch, content_type=MERGE_PATCH
        )

    async def pod(self, name: str, grace: int = 30) -> tuple[str, Pod]:
        """A pod bound to the node, and its sandbox with a running container in containerd."""
        spec = {
            "nodeName": self.node,
            "terminationGracePeriodSeconds": grace,
            "containers": [{"name": "app", "image": "busybox"}],
        }
        created = self.server.ok("POST", self.pods, {"metadata": {"name": name}, "spec": spec})
        uid = created["metadata"]["uid"]
        return uid, await run_pod(self.containerd.endpoint, name, self.namespace, uid, SLEEPER)

    def evict(self, name: str) -> float:
        """Evict the pod as the drain does; its deletionTimestamp (the end of its grace), as
        the API server set it."""
        eviction = {
            "apiVersion": "policy/v1beta1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": self.namespace},
        }
        self.server.ok("POST", f"{self.pods}/{name}/eviction", eviction)
        pod = self.server.ok("GET", f"{self.pods}/{name}")
        deleted_at = parse_time(pod["metadata"].get("deletionTimestamp"))
        assert deleted_at is not None, "without a kubelet the pod stays, Terminating"
        return deleted_at

    def request(self, request_id: str) -> None:
        patch = {"metadata": {"annotations": {CLEANUP_REQUEST_ANNOTATION: request_id}}}
        self.server.ok("PATCH", f"/api/v1/nodes/{self.node}", patch, content_type=MERGE_PATCH)

    def status(self) -> CleanupStatus | None:
        node = self.server.ok("GET", f"/api/v1/nodes/{self.node}")
        annotations = node["metadata"].get("annotations") or {}
        return CleanupStatus.from_json(annotations.get(CLEANUP_STATUS_ANNOTATION, ""))

    async def answer(self, request_id: str, within: float = 60) -> CleanupStatus:
        answers: list[CleanupStatus] = []

        def answered() -> bool:
            status = self.status()
            if status is not None and status.id == request_id and status.state in ANSWERS:
                answers.append(status)
            return bool(answers)

        await until_async(
            answered, timeout=within, what=f"the agent's answer to {request_id}", interval=0.1
        )
        return answers[0]

    async def acknowledged(self) -> None:
        """Wait until the agent took the request up (``running``)."""
        await until_async(
            lambda: (s := self.status()) is not None and s.state is CleanupState.RUNNING,
            timeout=30,
            what="the request acknowledged",
            interval=0.05,
        )

    async def looks(self, n: int) -> None:
        """Wait for ``n`` more looks of the agent's cleanup loop: n chances to act."""
        target = self.cleanup.checks + n
        await until_async(lambda: self.cleanup.checks >= target, timeout=30, what=f"{n} more looks")

    async def held(self) -> tuple[set[str], set[str]]:
        """The sandbox ids and running container ids containerd holds now."""
        async with CRIClient(self.containerd.endpoint) as cri:
            sandboxes = await cri.list_pod_sandboxes()
            containers = await cri.list_containers()
        return (
            {s.id for s in sandboxes if s.state is SandboxState.READY},
            {c.id for c in containers if c.state is ContainerState.RUNNING},
        )


@pytest.fixture
async def scene(
    kubeapi: LocalKubeAPIServer,
    kubeapi_namespace: str,
    kubeapi_cleanup: KubeCleanup,
    agent_rbac: None,
    containerd: LocalContainerd,
    tmp_path: Path,
    unused_tcp_port: int,
    aiohttp_client: Callable[..., Awaitable[TestClient]],
) -> AsyncIterator[Scene]:
    """A fresh Node, its kubelet's healthz (answering ``ok`` while ``kubelet["alive"]``, 503
    otherwise, as the simulated kubelet's does), and the agent on it."""
    node = f"node-{secrets.token_hex(4)}"
    kubeapi_cleanup.create("/api/v1/nodes", {"metadata": {"name": node}})
    kubelet = {"alive": True}
    healthz = TestServer(KubeletHealthz(lambda: kubelet["alive"]).app())
    await healthz.start_server()
    try:
        kubelet_root = tmp_path / "kubelet"
        (kubelet_root / "pods").mkdir(parents=True)
        settings = agent_settings(
            containerd,
            kubelet_root,
            unused_tcp_port,
            node_name=node,
            kubeconfig=str(kubeapi.kubeconfig(AGENT)),
            kubelet_healthz_url=str(healthz.make_url("/healthz")),
            api_initial_jitter=0.0,
            drift_grace_period=0.5,
            cri_timeout=2.0,
        )
        client = await aiohttp_client(make_app(settings, CollectorRegistry()))
        yield Scene(kubeapi, kubeapi_namespace, node, containerd, client, kubelet)
    finally:
        await healthz.close()


async def test_evicted_pods_are_removed_past_their_deletion_when_the_kubelet_is_gone(
    scene: Scene,
) -> None:
    _, web = await scene.pod("web")
    evicted = {name: await scene.pod(name, grace=4) for name in ("app-0", "app-1")}
    # The kubelet goes silent: its healthz stops answering, the Node turns Ready Unknown.
    scene.kubelet["alive"] = False
    scene.set_ready("Unknown")
    # The drain evicts two pods; without a kubelet they stay, Terminating.
    due = max(scene.evict(name) for name in evicted)
    scene.request("r1")

    # Acknowledged, and nothing of theirs removed before their deletion is due.
    await scene.acknowledged()
    their_sandboxes = {ran.sandbox_id for _, ran in evicted.values()}
    their_containers = {ran.container_ids["app"] for _, ran in evicted.values()}
    still_there = 0.0  # the start of the last read that found both still running
    while True:
        before = time.time()
        sandboxes, containers = await scene.held()
        if their_sandboxes <= sandboxes and their_containers <= containers:
            still_there = before
        status = scene.status()
        if status is not None and status.state in ANSWERS:
            break
        assert time.time() < due + 60, "no answer a minute after the deletions were due"
        await asyncio.sleep(0.1)
    # Not removed when asked (4 s before the deletions were due) but once they were: within
    # 2 s of the deadline (reads every 0.1 s, on a busy machine) they still ran.
    assert still_there >= due - 2, (still_there, due)

    assert status.id == "r1"
    assert status.state is CleanupState.DONE, status
    assert (status.removed_sandboxes, status.removed_containers) == (2, 0)
    assert status.remaining == Remaining()
    sandboxes, containers = await scene.held()
    assert not their_sandboxes & sandboxes
    assert not their_containers & containers
    assert web.sandbox_id in sandboxes  # the pod nobody deleted runs on
    assert web.container_ids["app"] in containers
    # The API server still lists them Terminating: nobody confirmed the deletions.
    listed = {p["metadata"]["name"] for p in scene.server.ok("GET", scene.pods)["items"]}
    assert listed == {"web", "app-0", "app-1"}


@pytest.mark.parametrize(
    ("kubelet_alive", "ready"),
    [
        pytest.param(True, "Unknown", id="the kubelet answers (Ready Unknown: a partition)"),
        pytest.param(False, "True", id="the Node is Ready (a healthz that failed once)"),
    ],
)
async def test_evicted_pods_are_left_to_a_kubelet_that_is_not_gone(
    scene: Scene, kubelet_alive: bool, ready: str
) -> None:
    _, ran = await scene.pod("app-0", grace=1)
    scene.kubelet["alive"] = kubelet_alive
    scene.set_ready(ready)
    due = scene.evict("app-0")
    await until_async(
        lambda: time.time() > due + 1, timeout=10, what="the deletion to be past", interval=0.1
    )
    scene.request("r1")
    status = await scene.answer("r1")
    assert status.state is CleanupState.DONE, status
    assert (status.removed_sandboxes, status.removed_containers) == (0, 0)
    assert status.remaining == Remaining()  # a pod a kubelet is stopping is not unwanted yet
    sandboxes, containers = await scene.held()
    assert ran.sandbox_id in sandboxes
    assert ran.container_ids["app"] in containers


async def test_a_deletion_not_due_is_waited_for_and_nothing_removed(scene: Scene) -> None:
    _, ran = await scene.pod("app-0", grace=300)
    scene.kubelet["alive"] = False
    scene.set_ready("Unknown")
    due = scene.evict("app-0")
    scene.request("r1")
    await scene.acknowledged()
    await scene.looks(5)  # five more chances to act
    assert time.time() < due
    status = scene.status()
    assert status is not None
    assert (status.id, status.state) == ("r1", CleanupState.RUNNING)
    sandboxes, containers = await scene.held()
    assert ran.sandbox_id in sandboxes
    assert ran.container_ids["app"] in containers


async def test_the_agents_own_pod_being_deleted_is_spared(scene: Scene) -> None:
    own_uid, own = await scene.pod("nodesync-agent-x", grace=300)
    _, other = await scene.pod("app-0", grace=2)
    scene.cleanup.own_pod_uid = own_uid  # what the downward API gives the agent (POD_UID)
    scene.kubelet["alive"] = False
    scene.set_ready("Unknown")
    # The DaemonSet controller deletes the agent's pod; without a kubelet it stays Terminating,
    # its deletion not due for 300 s. Another pod is evicted alike, due in 2 s.
    assert scene.evict("nodesync-agent-x") > time.time() + 60
    scene.evict("app-0")
    scene.request("r1")
    status = await scene.answer("r1")
    assert status.state is CleanupState.DONE, status
    assert (status.removed_sandboxes, status.removed_containers) == (1, 0)
    assert status.remaining == Remaining()
    sandboxes, containers = await scene.held()
    assert other.sandbox_id not in sandboxes
    assert own.sandbox_id in sandboxes  # the agent's own pod runs on
    assert own.container_ids["app"] in containers
