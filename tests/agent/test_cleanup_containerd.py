"""The cleanup handshake with everything real: a real containerd, the test API server over HTTP,
the agent's app. The controller's side is played by patching the Node's annotation."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc.aio
import pytest
from aiohttp import ClientTimeout
from aiohttp.test_utils import TestClient
from prometheus_client import CollectorRegistry

from exporter.agent.app import make_app
from exporter.agent.cleanup import NodeCleanup
from exporter.agent.keys import CLEANUP
from exporter.agent.settings import AgentSettings
from exporter.cri.client import CRIClient
from exporter.cri.pb import api_pb2, api_pb2_grpc
from exporter.model.cleanup import ANSWERS, CleanupState, CleanupStatus
from exporter.model.rollback import CLEANUP_REQUEST_ANNOTATION, CLEANUP_STATUS_ANNOTATION
from exporter.model.runtime import (
    LABEL_POD_NAME,
    LABEL_POD_NAMESPACE,
    LABEL_POD_UID,
    ContainerState,
    SandboxState,
)
from nodesync_sim.fake.apiserver.server import APIServer
from nodesync_sim.real.containerd import LocalContainerd, cgroup_root_for
from nodesync_sim.real.runtime_pods import ContainerSpec, run_pod
from tests.metrics.exposition import labels, series
from tests.support.wait import until_async

#: On the machine's containerd; the cleanup itself runs on every release too.
pytestmark = [pytest.mark.containerd]

NODE = "node-a"
#: How long a change may take to show in /metrics.
WITHIN = 20.0
GRACE = 0.5
SLEEPER = [ContainerSpec("app", ["/bin/sleep", "inf"])]
REMOVE_SANDBOX = labels(operation_type="remove_podsandbox")


@dataclass
class Env:
    containerd: LocalContainerd
    api: APIServer
    client: TestClient

    @property
    def cleanup(self) -> NodeCleanup:
        return self.client.app[CLEANUP]

    async def scrape(self) -> str:
        response = await self.client.get("/metrics", timeout=ClientTimeout(total=2.0))
        assert response.status == 200
        return await response.text()

    def annotations(self) -> dict[str, str]:
        node = self.api.store.get("nodes", NODE)
        return dict(node["metadata"].get("annotations") or {})

    def request(self, request_id: str, **more: str) -> None:
        """What the controller does: set the request annotation on the Node."""
        patch = {"metadata": {"annotations": {CLEANUP_REQUEST_ANNOTATION: request_id, **more}}}
        self.api.store.patch("nodes", NODE, patch)

    async def answer(self, request_id: str, wait: float = WITHIN) -> CleanupStatus:
        def answered() -> CleanupStatus | None:
            raw = self.annotations().get(CLEANUP_STATUS_ANNOTATION, "")
            status = CleanupStatus.from_json(raw)
            if status is not None and status.id == request_id and status.state in ANSWERS:
                return status  # an answer, not the acknowledgement (running)
            return None

        return await until_async(
            answered,
            timeout=wait,
            what=f"an answer to {request_id}",
            detail=lambda: repr(self.annotations()),
        )

    async def looked_at(self, annotation: str, what: str, more: int = 2) -> None:
        """Wait until a look of the cleanup loop saw ``annotation`` on the Node, then for
        ``more`` looks after it: every chance to act on what it saw."""
        cleanup = self.cleanup
        await until_async(
            lambda: cleanup.last_seen is not None and annotation in cleanup.last_seen.annotations,
            timeout=WITHIN,
            what=f"the agent to see {what}",
        )
        target = cleanup.checks + more
        await until_async(
            lambda: cleanup.checks >= target, timeout=WITHIN, what="the cleanup loop to look again"
        )


def _pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "busybox"}]},
        "status": {"phase": "Running"},
    }


@pytest.fixture
async def env(
    containerd: LocalContainerd,
    tmp_path: Path,
    unused_tcp_port: int,
    aiohttp_client: Callable[..., Awaitable[TestClient]],
) -> AsyncIterator[Env]:
    async with APIServer() as api:
        api.store.create("nodes", {"metadata": {"name": NODE}})
        kubelet_root = tmp_path / "kubelet"
        (kubelet_root / "pods").mkdir(parents=True)
        settings = AgentSettings(
            cri_endpoint=containerd.endpoint,
            listen=("127.0.0.1", 0),
            sync_period=0.2,
            cri_timeout=2.0,
            kubelet_root_dir=str(kubelet_root),
            containerd_root=str(containerd.root),
            kubelet_healthz_url=f"http://127.0.0.1:{unused_tcp_port}/healthz",
            kubelet_timeout=0.5,
            node_name=NODE,
            kubeconfig=str(api.write_kubeconfig(tmp_path / "kubeconfig")),
            api_initial_jitter=0.0,
            drift_grace_period=GRACE,
        )
        client = await aiohttp_client(make_app(settings, CollectorRegistry()))
        yield Env(containerd, api, client)


async def _stop_sandbox(endpoint: str, sandbox_id: str) -> None:
    async with grpc.aio.insecure_channel(endpoint) as channel:
        stub = api_pb2_grpc.RuntimeServiceStub(channel)
        await stub.StopPodSandbox(
            api_pb2.StopPodSandboxRequest(pod_sandbox_id=sandbox_id), timeout=30
        )


async def _run_sandbox(endpoint: str, name: str, uid: str, attempt: int) -> str:
    """A bare host-network sandbox of a pod, at a given attempt (kubelet's recreation)."""
    host = api_pb2.NamespaceOption(network=api_pb2.NODE, pid=api_pb2.CONTAINER, ipc=api_pb2.POD)
    config = api_pb2.PodSandboxConfig(
        metadata=api_pb2.PodSandboxMetadata(
            name=name, uid=uid, namespace="default", attempt=attempt
        ),
        labels={LABEL_POD_NAME: name, LABEL_POD_NAMESPACE: "default", LABEL_POD_UID: uid},
        linux=api_pb2.LinuxPodSandboxConfig(
            cgroup_parent=f"{cgroup_root_for(endpoint)}/pod{uid}-{attempt}",
            security_context=api_pb2.LinuxSandboxSecurityContext(namespace_options=host),
        ),
    )
    async with grpc.aio.insecure_channel(endpoint) as channel:
        stub = api_pb2_grpc.RuntimeServiceStub(channel)
        ran = await stub.RunPodSandbox(api_pb2.RunPodSandboxRequest(config=config), timeout=30)
    return str(ran.pod_sandbox_id)


def _drift(text: str) -> dict[str, float]:
    return {dict(k)["kind"]: v for k, v in series(text, "nodesync_drift_pods").items()}


def _removes(text: str) -> float:
    return series(text, "nodesync_cri_request_duration_seconds_count").get(REMOVE_SANDBOX, 0.0)


# On every release: the stops and removals are the release's own (1.6 answers a repeated
# stop NOT_FOUND, 1.7 and 2.x OK).
@pytest.mark.containerd_releases
async def test_cleanup_removes_exactly_the_orphans_once_per_request(env: Env) -> None:
    endpoint = env.containerd.endpoint
    # A desired, running pod: never touched.
    web_uid = env.api.store.create("pods", _pod("web"), namespace="default")["metadata"]["uid"]
    web = await run_pod(endpoint, "web", "default", web_uid, SLEEPER)
    # A pod the API server does not know: its sandbox is an orphan.
    orphan = await run_pod(endpoint, "gone", "default", str(uuid.uuid4()), SLEEPER)
    # A desired pod whose first sandbox died and was recreated: the old one is stale.
    job_uid = env.api.store.create("pods", _pod("job"), namespace="default")["metadata"]["uid"]
    stale = await run_pod(endpoint, "job", "default", job_uid, SLEEPER)
    await _stop_sandbox(endpoint, stale.sandbox_id)
    current_job = await _run_sandbox(endpoint, "job", job_uid, attempt=1)

    text = await until_async(
        env.scrape,
        accept=lambda t: (
            _drift(t).get("orphan_sandbox") == 1 and _drift(t).get("stale_sandbox") == 1
        ),
        timeout=WITHIN,
        what="an orphan and a stale sandbox",
    )
    assert _drift(text)["missing_sandbox"] == 0
    assert _drift(text)["orphan_container"] == 0
    assert _removes(text) == 0

    env.request("r1")
    status = await env.answer("r1")
    assert status.state is CleanupState.DONE
    assert (status.removed_sandboxes, status.removed_containers) == (2, 0)
    assert (status.skipped, status.error) == (0, "")
    assert status.finished_at > 0

    # What the real containerd holds now.
    async with CRIClient(endpoint) as cri:
        sandboxes = {s.id: s for s in await cri.list_pod_sandboxes()}
        containers = await cri.list_containers()
    assert set(sandboxes) == {web.sandbox_id, current_job}
    assert sandboxes[web.sandbox_id].state is SandboxState.READY
    web_app = [c for c in containers if c.id == web.container_ids["app"]]
    assert [c.state for c in web_app] == [ContainerState.RUNNING]
    assert {c.pod_sandbox_id for c in containers} == {web.sandbox_id}
    assert orphan.sandbox_id not in sandboxes

    text = await until_async(
        env.scrape,
        accept=lambda t: (
            _drift(t).get("orphan_sandbox") == 0 and _drift(t).get("stale_sandbox") == 0
        ),
        timeout=WITHIN,
        what="drift to go back to 0",
    )
    assert series(text, "nodesync_cleanup_requests_total") == {
        labels(result="done"): 1.0,
        labels(result="failed"): 0.0,
        labels(result="unavailable"): 0.0,
    }
    assert series(text, "nodesync_cleanup_removed_total") == {
        labels(kind="sandbox"): 2.0,
        labels(kind="container"): 0.0,
    }
    (last,) = series(text, "nodesync_cleanup_last_timestamp_seconds").values()
    assert time.time() - 60 < last <= time.time()
    removes = _removes(text)
    assert removes == 2

    # The same request again (the Node changes, the id does not): nothing happens.
    answered = env.annotations()[CLEANUP_STATUS_ANNOTATION]
    env.request("r1", touched="1")
    await env.looked_at("touched", "the touched Node")
    assert env.annotations()[CLEANUP_STATUS_ANNOTATION] == answered
    text = await env.scrape()
    assert _removes(text) == removes
    assert series(text, "nodesync_cleanup_requests_total")[labels(result="done")] == 1

    # A new id with nothing left to clean: answered, done, nothing removed.
    env.request("r2")
    status = await env.answer("r2")
    assert status.state is CleanupState.DONE
    assert (status.removed_sandboxes, status.removed_containers, status.skipped) == (0, 0, 0)
    text = await env.scrape()
    assert _removes(text) == removes
    assert series(text, "nodesync_cleanup_requests_total")[labels(result="done")] == 2
    async with CRIClient(endpoint) as cri:
        assert {s.id for s in await cri.list_pod_sandboxes()} == {web.sandbox_id, current_job}


async def test_a_frozen_runtime_is_answered_unavailable_and_a_new_request_cleans(
    env: Env,
) -> None:
    """A containerd that does not answer cannot be cleaned: the request is acknowledged, then
    answered ``unavailable`` (a node rollback goes on without the cleanup), nothing removed.
    Once the runtime answers again, a new request cleans up."""
    endpoint = env.containerd.endpoint
    orphan = await run_pod(endpoint, "gone", "default", str(uuid.uuid4()), SLEEPER)
    await until_async(
        env.scrape,
        accept=lambda t: _drift(t).get("orphan_sandbox") == 1,
        timeout=WITHIN,
        what="the orphan",
    )
    env.containerd.freeze()
    try:
        await until_async(
            env.scrape,
            accept=lambda t: series(t, "nodesync_drift_pods") == {},
            timeout=WITHIN,
            what="drift to be unknown",
        )
        env.request("r1")
        status = await env.answer("r1", wait=30)
        assert status.state is CleanupState.UNAVAILABLE
        assert (status.removed_sandboxes, status.removed_containers) == (0, 0)
        assert status.error
        text = await env.scrape()
        assert series(text, "nodesync_cleanup_requests_total") == {
            labels(result="done"): 0.0,
            labels(result="failed"): 0.0,
            labels(result="unavailable"): 1.0,
        }
    finally:
        env.containerd.thaw()
    await until_async(
        env.scrape,
        accept=lambda t: _drift(t).get("orphan_sandbox") == 1,
        timeout=WITHIN,
        what="drift known again",
    )
    async with CRIClient(endpoint) as cri:
        assert orphan.sandbox_id in {s.id for s in await cri.list_pod_sandboxes()}
    env.request("r2")
    status = await env.answer("r2", wait=30)
    assert (status.state, status.removed_sandboxes) == (CleanupState.DONE, 1)
    async with CRIClient(endpoint) as cri:
        assert orphan.sandbox_id not in {s.id for s in await cri.list_pod_sandboxes()}
