"""A node rollback end to end below Prometheus: the real agent on a real containerd, the real
controller with its webhook and executor, the test API server between them.

The node failed to join (Ready False, no Lease) and its containerd holds an orphan sandbox (a pod
the API server no longer has). One Alertmanager delivery for it must end with: the orphan gone
from the real containerd, the desired pod's sandbox still there, the node cordoned and tainted,
then deleted (``--rollback.delete-nodes``), and an Event for every step.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from prometheus_client import CollectorRegistry

from exporter.agent.app import make_app as make_agent_app
from exporter.controller.app import make_app as make_controller_app
from exporter.controller.settings import ControllerSettings, ExecutorSettings, WebhookSettings
from exporter.controller.wiring import rollback_extensions
from exporter.cri.client import CRIClient
from exporter.model.alerts import Alert
from exporter.settings.declare import changed
from nodesync_sim.fake.apiserver.server import APIServer
from nodesync_sim.real.containerd import LocalContainerd
from nodesync_sim.real.runtime_pods import ContainerSpec, run_pod
from tests.agent.settings import agent_settings
from tests.controller.alert_builders import body
from tests.support.wait import until_async

pytestmark = [pytest.mark.containerd, pytest.mark.timeout(120)]

NODE = "node-new-1"
TOKEN = "integration-token-0123456789"
SLEEPER = [ContainerSpec("app", ["/bin/sleep", "inf"])]
Factory = Callable[..., Awaitable[TestClient[Any, Any]]]


def _failed_node() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "KubeletNotReady",
                    "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                }
            ]
        },
    }


def _desired_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-0",
            "namespace": "default",
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "web",
                    "uid": str(uuid.uuid4()),
                    "controller": True,
                }
            ],
        },
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "app", "image": "busybox"}],
        },
        "status": {"phase": "Running"},
    }


async def _sandbox_ids(endpoint: str) -> set[str]:
    async with CRIClient(endpoint, timeout=5) as cri:
        return {s.id for s in await cri.list_pod_sandboxes()}


async def test_rollback_removes_the_orphan_keeps_desired_pods_and_deletes_the_node(
    containerd: LocalContainerd,
    tmp_path: Path,
    unused_tcp_port: int,
    aiohttp_client: Factory,
) -> None:
    async with APIServer() as api:
        api.store.create("nodes", _failed_node())
        pod = api.store.create("pods", _desired_pod(), namespace="default")
        desired = await run_pod(
            containerd.endpoint, "web-0", "default", pod["metadata"]["uid"], SLEEPER
        )
        orphan = await run_pod(containerd.endpoint, "gone", "default", str(uuid.uuid4()), SLEEPER)
        kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig"))
        kubelet_root = tmp_path / "kubelet"
        (kubelet_root / "pods").mkdir(parents=True)

        agent = await aiohttp_client(
            make_agent_app(
                agent_settings(
                    containerd,
                    kubelet_root,
                    unused_tcp_port,
                    node_name=NODE,
                    kubeconfig=kubeconfig,
                    api_initial_jitter=0.0,
                    drift_grace_period=0.5,
                    # Not the tests' usual 0.5 s: a cleanup's status call over its deadline
                    # fails the cleanup, two runtime reads over it in a row answer it
                    # unavailable (for good, either way), and a busy machine's containerd can
                    # take longer than 0.5 s to answer.
                    cri_timeout=5.0,
                ),
                CollectorRegistry(),
            )
        )
        controller = await aiohttp_client(
            make_controller_app(
                ControllerSettings(listen=("127.0.0.1", 0), kubeconfig=kubeconfig),
                registry=CollectorRegistry(),
                extensions=rollback_extensions(
                    WebhookSettings(journal_path=str(tmp_path / "journal.db"), token=TOKEN),
                    changed(
                        ExecutorSettings(),
                        delete_nodes=True,
                        api_qps=50,
                        api_burst=50,
                        eviction_timeout=5,
                        cleanup_timeout=30,
                    ),
                ),
            )
        )

        # The alert comes after the drift has lasted past its grace period, as the rules make it.
        async def orphan_reported() -> bool:
            text = await (await agent.get("/metrics")).text()
            return 'nodesync_drift_pods{kind="orphan_sandbox"} 1.0' in text

        await until_async(
            orphan_reported, timeout=15.0, what="the agent to report the orphan sandbox"
        )
        alert = Alert(
            fingerprint="00000000000000aa",
            status="firing",
            labels={
                "alertname": "NodesyncNewNodeNotReady",
                "node": NODE,
                "nodesync_action": "rollback_node",
            },
            starts_at=float(int(time.time()) - 60),
        )
        response = await controller.post(
            "/alerts", json=body(alert), headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert response.status == 200, await response.text()

        async def orphan_gone() -> bool:
            return orphan.sandbox_id not in await _sandbox_ids(containerd.endpoint)

        await until_async(orphan_gone, timeout=60, what="the agent's cleanup to remove the orphan")

        async def node_deleted() -> bool:
            return api.store.try_get("nodes", NODE) is None

        await until_async(node_deleted, timeout=60, what="the rollback to delete the node")

        # The desired pod's sandbox was never the agent's to remove.
        assert desired.sandbox_id in await _sandbox_ids(containerd.endpoint)

        # A step is done when its effect, then its Event, then its count are in: the node being
        # gone does not mean the rest is yet.
        done = 'nodesync_actions_total{action="delete_node",result="done"} 1.0'

        async def deletion_counted() -> bool:
            return done in await (await controller.get("/metrics")).text()

        await until_async(deletion_counted, timeout=30, what="the deletion step to finish")
        # Cordon and taint came before the deletion (the Events say so, in order).
        events = api.store.list("events", namespace="default")
        reasons = [e["reason"] for e in events if e["involvedObject"]["name"] == NODE]
        for step in ("cordon", "taint", "drain", "cleanup_runtime", "verify", "delete_node"):
            assert any(step.replace("_", "") in r.lower().replace("_", "") for r in reasons), (
                step,
                reasons,
            )
        # The agent reported its cleanup, and the metrics agree.
        agent_metrics = await (await agent.get("/metrics")).text()
        assert 'nodesync_cleanup_requests_total{result="done"} 1.0' in agent_metrics
        assert 'nodesync_cleanup_removed_total{kind="sandbox"} 1.0' in agent_metrics
        # Stop both before the API server goes, so neither retries against a closed port.
        await controller.close()
        await agent.close()
