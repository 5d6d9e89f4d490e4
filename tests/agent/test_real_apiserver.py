"""The agent's API side against a real kube-apiserver 1.20, as the agent's service account with
the shipped RBAC (deploy/base/agent-rbac.yaml): its own-object watches (NodeObjects) are current
again within 5 s of a restarted server's return, and the cleanup handshake with a real
containerd computes drift from the real server's pods and removes exactly the orphan."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientTimeout
from aiohttp.test_utils import TestClient
from prometheus_client import CollectorRegistry

from exporter.agent.app import make_app
from exporter.agent.node_objects import NodeObjects
from exporter.cri.client import CRIClient
from exporter.kube.convert import lease_info
from exporter.model.cleanup import CleanupState, CleanupStatus
from exporter.model.kube import LEASE_NAMESPACE
from exporter.model.rfc3339 import format_micro_time
from exporter.model.rollback import CLEANUP_REQUEST_ANNOTATION, CLEANUP_STATUS_ANNOTATION
from exporter.model.runtime import SandboxState
from nodesync_sim.real.containerd import LocalContainerd
from nodesync_sim.real.kube_apiserver import AGENT, LocalKubeAPIServer
from nodesync_sim.real.runtime_pods import ContainerSpec, run_pod
from tests.agent.settings import agent_settings
from tests.metrics.exposition import labels, series
from tests.support.kubeapi import KubeCleanup
from tests.support.realkube import (
    AGENT_RBAC,
    MERGE_PATCH,
    FailureCounter,
    all_closed,
    apply_rbac,
    code,
    connect,
    outage,
    received,
    requests,
    user_of,
    wait_allowed,
)
from tests.support.wait import until_async

pytestmark = [pytest.mark.kubeapi, pytest.mark.timeout(120)]

RECOVERY = 5.0
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases"
SLEEPER = [ContainerSpec("app", ["/bin/sleep", "inf"])]


def _pod(name: str, node: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "busybox"}]},
    }


def _lease(node: str) -> dict[str, Any]:
    return {
        "metadata": {"name": node, "namespace": LEASE_NAMESPACE},
        "spec": {
            "holderIdentity": node,
            "leaseDurationSeconds": 40,
            "renewTime": format_micro_time(time.time()),
        },
    }


# ---------------------------------------------------------------- recovery


async def test_own_object_watches_are_current_within_5s_of_the_servers_return(
    private_kubeapi: LocalKubeAPIServer,
) -> None:
    server = private_kubeapi
    node = "node-a"
    apply_rbac(server, AGENT_RBAC)
    wait_allowed(server, AGENT, "/api/v1/nodes")
    server.ok("POST", "/api/v1/namespaces", {"metadata": {"name": "apps"}})
    server.ok("POST", "/api/v1/nodes", {"metadata": {"name": node}})
    server.ok("POST", LEASES, _lease(node))
    server.ok("POST", "/api/v1/namespaces/apps/pods", _pod("web-0", node))
    server.ok("POST", "/api/v1/namespaces/apps/pods", _pod("elsewhere", "node-b"))

    failures = FailureCounter()
    async with await connect(server, AGENT, observer=failures) as api:
        objects = NodeObjects(api, node, initial_jitter_seconds=0.0)
        task = asyncio.create_task(objects.run())
        try:
            async with asyncio.timeout(20):
                await objects.wait_synced()

            def complete() -> bool:  # lists from the watch cache may be a moment behind
                pods = objects.pods()
                names = [p.name for p in pods] if pods is not None else None
                return names == ["web-0"] and None not in (objects.node(), objects.lease())

            await until_async(complete, timeout=10.0, what="the node's own objects")
            assert objects.up

            before = {r: failures.failed(r) for r in ("nodes", "leases", "pods")}

            def failed_for_long() -> bool:
                # Every watch failed three times: each backoff grew to its cap.
                down = [part for part in objects.error.split("; ") if part]
                return (
                    not objects.up
                    and len(down) == 3
                    and all(failures.failed(r) >= n + 3 for r, n in before.items())
                )

            returned = await outage(server, failed_for_long)
            returned_at = time.time()

            # After the return: a pod bound to the node, a renewed Lease, a cleanup request.
            server.ok("POST", "/api/v1/namespaces/apps/pods", _pod("web-1", node))
            patch = {"spec": {"renewTime": format_micro_time(time.time())}}
            renewed = lease_info(
                server.ok("PATCH", f"{LEASES}/{node}", patch, content_type=MERGE_PATCH)
            ).renew_time
            request = {"metadata": {"annotations": {CLEANUP_REQUEST_ANNOTATION: "r-1"}}}
            server.ok("PATCH", f"/api/v1/nodes/{node}", request, content_type=MERGE_PATCH)
            seen: dict[str, float] = {}

            def current() -> bool:
                now = time.monotonic() - returned
                pods = objects.pods()
                if "pod" not in seen and pods and "web-1" in {p.name for p in pods}:
                    seen["pod"] = now
                lease = objects.lease()
                if "lease" not in seen and lease is not None and lease.renew_time == renewed:
                    seen["lease"] = now
                info = objects.node()
                asked = info is not None and info.annotations.get(CLEANUP_REQUEST_ANNOTATION)
                if "node" not in seen and asked == "r-1":
                    seen["node"] = now
                return len(seen) == 3

            await until_async(current, timeout=30, what="the agent's view after the return")
            assert objects.up
            pods = objects.pods()
            assert pods is not None
            assert sorted(p.name for p in pods) == ["web-0", "web-1"]
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    await all_closed(server)

    print(f"recovery after the server's return: {seen}")
    assert max(seen.values()) <= RECOVERY, seen
    agent = requests(server, user=user_of(server, AGENT), product=True)
    assert {e["verb"] for e in agent} <= {"list", "watch"}
    refused = [e for e in agent if code(e) == 403]
    assert all(received(e) < returned_at for e in refused), refused


# ---------------------------------------------------------------- cleanup with containerd


@pytest.fixture
async def agent(
    kubeapi: LocalKubeAPIServer,
    kubeapi_cleanup: KubeCleanup,
    agent_rbac: None,
    containerd: LocalContainerd,
    tmp_path: Path,
    unused_tcp_port: int,
    aiohttp_client: Callable[..., Awaitable[TestClient]],
) -> AsyncIterator[tuple[str, TestClient]]:
    """An agent app on a node of its own (a fresh Node), as the agent's service account."""
    node = f"node-{secrets.token_hex(4)}"
    kubeapi_cleanup.create("/api/v1/nodes", {"metadata": {"name": node}})
    kubelet_root = tmp_path / "kubelet"
    (kubelet_root / "pods").mkdir(parents=True)
    settings = agent_settings(
        containerd,
        kubelet_root,
        unused_tcp_port,
        node_name=node,
        kubeconfig=str(kubeapi.kubeconfig(AGENT)),
        api_initial_jitter=0.0,
        drift_grace_period=0.5,
        cri_timeout=2.0,
    )
    client = await aiohttp_client(make_app(settings, CollectorRegistry()))
    return node, client


def _drift(text: str) -> dict[str, float]:
    return {dict(k)["kind"]: v for k, v in series(text, "nodesync_drift_pods").items()}


async def test_cleanup_request_removes_exactly_the_orphan_as_the_agents_account(
    kubeapi: LocalKubeAPIServer,
    kubeapi_namespace: str,
    containerd: LocalContainerd,
    agent: tuple[str, TestClient],
) -> None:
    node, client = agent
    namespace = kubeapi_namespace
    endpoint = containerd.endpoint
    pods = f"/api/v1/namespaces/{namespace}/pods"
    # A desired pod that runs: its sandbox is the real server's pod's (matched by uid).
    web_uid = kubeapi.ok("POST", pods, _pod("web", node))["metadata"]["uid"]
    web = await run_pod(endpoint, "web", namespace, web_uid, SLEEPER)
    # A desired pod without a sandbox (kubelet has not started it): missing, never removed.
    kubeapi.ok("POST", pods, _pod("waiting", node))
    # A sandbox of a pod the server does not have: the orphan.
    orphan = await run_pod(endpoint, "gone", namespace, str(uuid.uuid4()), SLEEPER)

    async def scrape() -> str:
        response = await client.get("/metrics", timeout=ClientTimeout(total=2.0))
        assert response.status == 200
        return await response.text()

    last: list[str] = [""]

    async def drift_is(expected: dict[str, float]) -> None:
        async def poll() -> bool:
            last[0] = await scrape()
            drift = _drift(last[0])
            return all(drift.get(k) == v for k, v in expected.items())

        deadline = time.monotonic() + 20
        while not await poll():
            assert time.monotonic() < deadline, f"drift never became {expected}:\n{last[0]}"
            await asyncio.sleep(0.1)

    await drift_is({"orphan_sandbox": 1, "missing_sandbox": 1, "stale_sandbox": 0})

    # The controller's side: the request annotation on the Node.
    request = {"metadata": {"annotations": {CLEANUP_REQUEST_ANNOTATION: "req-1"}}}
    kubeapi.ok("PATCH", f"/api/v1/nodes/{node}", request, content_type=MERGE_PATCH)

    answers: list[CleanupStatus] = []

    def answered() -> bool:
        annotations = kubeapi.ok("GET", f"/api/v1/nodes/{node}")["metadata"].get("annotations")
        status = CleanupStatus.from_json((annotations or {}).get(CLEANUP_STATUS_ANNOTATION, ""))
        if status is not None and status.id == "req-1":
            answers.append(status)
        return bool(answers)

    await until_async(answered, timeout=30, what="the agent's answer", interval=0.1)
    status = answers[0]
    assert status.state is CleanupState.DONE, status
    assert (status.removed_sandboxes, status.removed_containers, status.skipped) == (1, 0, 0)
    assert status.error == ""

    async with CRIClient(endpoint) as cri:
        sandboxes = {s.id: s for s in await cri.list_pod_sandboxes()}
    assert set(sandboxes) == {web.sandbox_id}
    assert sandboxes[web.sandbox_id].state is SandboxState.READY
    assert orphan.sandbox_id not in sandboxes
    await drift_is({"orphan_sandbox": 0, "missing_sandbox": 1})
    text = last[0]
    assert series(text, "nodesync_cleanup_requests_total")[labels(result="done")] == 1

    # Everything the agent asked, it asked as its service account and was allowed; its only
    # write is the status annotation on its own Node. (1.20 audits a watch only once it has
    # ended: the running ones are not in the log yet.)
    user = user_of(kubeapi, AGENT)
    agent_requests = [
        e for e in requests(kubeapi, user=user, product=True) if node in e["requestURI"]
    ]
    assert {(e["verb"], e["objectRef"]["resource"]) for e in agent_requests} == {
        ("list", "nodes"),  # its Node, from the watch cache
        ("list", "pods"),  # its pods: from the cache, then the cleanup's consistent re-read
        ("list", "leases"),
        ("get", "nodes"),  # the cleanup's read before the write
        ("patch", "nodes"),
    }
    assert not [e for e in agent_requests if code(e) == 403]
    writes = [e for e in agent_requests if e["verb"] not in ("get", "list", "watch")]
    assert [(e["verb"], e["objectRef"]["name"], code(e)) for e in writes] == [("patch", node, 200)]
    assert set(writes[0]["requestObject"]["metadata"]["annotations"]) == {CLEANUP_STATUS_ANNOTATION}
