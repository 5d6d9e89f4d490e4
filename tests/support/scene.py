"""One acceptance test's world on the shared real kube-apiserver (tests/support/controllers.py):
:class:`Scene` and the ``scene`` fixture."""

from __future__ import annotations

import json
import secrets
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from exporter.model.rfc3339 import format_micro_time, format_time
from nodesync_sim.real.kube_apiserver import CONTROLLER, LocalKubeAPIServer
from tests.support.acceptance import (
    CASE_LABEL,
    CLEANUP_REQUEST,
    CLEANUP_STATUS,
    DEADLINE,
    LEADER_ELECTION_RBAC,
    LEADER_LEASE,
    NODE_LEASES,
    NODEROLLBACKS,
    POLL,
    WAVE_LABEL,
)
from tests.support.controller_process import Controller, WarmPool
from tests.support.controller_rbac import rbac_docs, rbac_path
from tests.support.kubeapi import create_namespace, delete_namespace
from tests.support.kubeproxy import KubeProxy
from tests.support.rollback_requests import payload
from tests.support.scene_record import SceneRecord
from tests.support.wait import until


@dataclass
class Scene(SceneRecord):
    """One test's world on the shared server; see tests/support/controllers.py."""

    server: LocalKubeAPIServer
    namespace: str
    workdir: Path
    pool: WarmPool
    case: str = field(default_factory=lambda: secrets.token_hex(3))
    nodes: list[str] = field(default_factory=list)
    controllers: list[Controller] = field(default_factory=list)
    proxies: list[KubeProxy] = field(default_factory=list)
    agent_answers: bool = True
    answered: list[tuple[str, str]] = field(default_factory=list)
    _audit_start: int = 0

    @property
    def controller_user(self) -> str:
        return self.server.identities[CONTROLLER].user

    # -- the cluster

    def node_name(self, suffix: str) -> str:
        return f"acc-{self.case}-{suffix}"

    def add_node(
        self,
        suffix: str,
        *,
        ready: bool = False,
        lease_age: float | None = 1.0,
        annotations: dict[str, str] | None = None,
    ) -> str:
        """A Node that joined just now (NotReady unless ``ready``) and its Lease, renewed
        ``lease_age`` seconds ago (None: none). Returns its name."""
        name = self.node_name(suffix)
        now = time.time()
        since = format_time(now - 5)
        self.nodes.append(name)
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {CASE_LABEL: self.case, WAVE_LABEL: f"wave-{self.case}"},
                "annotations": annotations or {},
            },
            "spec": {},
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True" if ready else "False",
                        "reason": "KubeletReady" if ready else "KubeletNotReady",
                        "lastTransitionTime": since,
                        "lastHeartbeatTime": since,
                    }
                ]
            },
        }
        self.server.ok("POST", "/api/v1/nodes", node)
        if lease_age is not None:
            lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": name, "namespace": NODE_LEASES},
                "spec": {
                    "holderIdentity": name,
                    "leaseDurationSeconds": 40,
                    "renewTime": format_micro_time(now - lease_age),
                },
            }
            self.server.ok(
                "POST", f"/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASES}/leases", lease
            )
        return name

    def add_pod(self, name: str, node: str) -> str:
        """A running pod of a ReplicaSet bound to ``node``; returns its uid."""
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "ReplicaSet",
                        "name": f"{name}-rs",
                        "uid": "00000000-0000-0000-0000-" + secrets.token_hex(6),
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 30,
                "containers": [{"name": "c", "image": "registry.invalid/app:1"}],
            },
        }
        created = self.server.ok("POST", f"/api/v1/namespaces/{self.namespace}/pods", pod)
        return str(created["metadata"]["uid"])

    def get_node(self, name: str) -> dict[str, Any] | None:
        answer = self.server.request("GET", f"/api/v1/nodes/{name}")
        if answer.status == 404:
            return None
        assert answer.status == 200, (answer.status, answer.body)
        node: dict[str, Any] = answer.body
        return node

    def node(self, name: str) -> dict[str, Any]:
        """The Node, which must exist."""
        node = self.get_node(name)
        assert node is not None, f"node {name} is gone"
        return node

    def recover(self, name: str) -> None:
        """The node's kubelet is back: Ready True, its Lease renewed now."""
        now = time.time()
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "lastTransitionTime": format_time(now),
            "lastHeartbeatTime": format_time(now),
        }
        self.server.ok(
            "PATCH",
            f"/api/v1/nodes/{name}/status",
            {"status": {"conditions": [ready]}},
            content_type="application/merge-patch+json",
        )
        self.renew_lease(name)

    def renew_lease(self, name: str) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASES}/leases/{name}"
        lease = self.server.ok("GET", path)
        lease["spec"]["renewTime"] = format_micro_time(time.time())
        self.server.ok("PUT", path, lease)

    def pods(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.server.ok(
            "GET", f"/api/v1/namespaces/{self.namespace}/pods"
        )["items"]
        return items

    # -- the parts nobody runs here, played by the test

    def play_node_side(self) -> None:
        """One round of the node agents and kubelets of this scene's nodes: answer each open
        cleanup request ``done`` (unless ``agent_answers`` is off), and delete pods that were
        evicted (they carry a deletionTimestamp) with grace 0, as a kubelet confirms them."""
        if self.agent_answers:
            for name in self.nodes:
                node = self.get_node(name)
                if node is None:
                    continue
                annotations = node["metadata"].get("annotations") or {}
                request = annotations.get(CLEANUP_REQUEST)
                status = annotations.get(CLEANUP_STATUS)
                if not request or (status and json.loads(status).get("id") == request):
                    continue
                answer = {
                    "id": request,
                    "state": "done",
                    "removedSandboxes": 1,
                    "removedContainers": 2,
                    "skipped": 0,
                    "finishedAt": format_time(time.time()),
                    "error": "",
                    "remaining": {"sandboxes": 0, "containers": 0, "pods": []},
                }
                patch = {"metadata": {"annotations": {CLEANUP_STATUS: json.dumps(answer)}}}
                self.server.ok(
                    "PATCH",
                    f"/api/v1/nodes/{name}",
                    patch,
                    content_type="application/merge-patch+json",
                )
                self.answered.append((name, request))
        for pod in self.pods():
            if pod["metadata"].get("deletionTimestamp"):
                self.delete_pod(pod["metadata"]["name"])

    def delete_pod(self, name: str) -> None:
        answer = self.server.request(
            "DELETE",
            f"/api/v1/namespaces/{self.namespace}/pods/{name}",
            {"gracePeriodSeconds": 0},
        )
        assert answer.status in (200, 202, 404), (answer.status, answer.body)

    def until(self, condition: Callable[[], Any], what: str, timeout: float = DEADLINE) -> Any:
        """:func:`tests.support.wait.until`, playing the node side at every poll, and failing at
        once (with its log) when a controller that should run exited."""

        def played() -> Any:
            for controller in self.controllers:
                if controller.process.returncode not in (None, -signal.SIGKILL, 0, -15):
                    pytest.fail(f"{controller.name} exited:\n{controller.log_tail()}")
            self.play_node_side()
            return condition()

        def logs() -> str:
            return "".join(f"\n--- {c.name}:\n{c.log_tail(20)}" for c in self.controllers)

        return until(played, timeout=timeout, what=what, interval=POLL, detail=logs)

    # -- controllers, and Alertmanager

    def proxy(self, name: str) -> KubeProxy:
        proxy = KubeProxy(self.server, name).start()
        self.proxies.append(proxy)
        return proxy

    def controller(
        self,
        name: str,
        *args: str,
        proxy: KubeProxy | None = None,
        leader_elect: bool = True,
        identity: str = "",
        journal: Path | None = None,
        start: bool = True,
    ) -> Controller:
        """A controller, started; with ``start`` false only taken from the pool (for
        :meth:`Controller.start` later, e.g. as a restart). ``journal``: another one's file, as
        the same replica restarted."""
        controller = Controller(
            self,
            name,
            proxy=proxy,
            leader_elect=leader_elect,
            identity=identity or f"{name}-{self.case}",
            args=args,
            journal=journal,
        )
        self.controllers.append(controller)
        return controller.start() if start else controller

    def leader(self) -> str:
        """The holder of this scene's leader Lease ("" when none)."""
        path = f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{LEADER_LEASE}"
        answer = self.server.request("GET", path)
        if answer.status != 200:
            return ""
        return str(answer.body.get("spec", {}).get("holderIdentity") or "")

    def deliver(
        self, controllers: Iterable[Controller], *alerts: dict[str, Any], timeout: float = DEADLINE
    ) -> Controller:
        """Alertmanager: POST the alerts to the replicas in turn until one answers 200 (a
        follower answers 503 and Alertmanager retries); returns the one that took them."""
        replicas = list(controllers)
        body = payload(*alerts)

        def taken() -> Controller | None:
            for controller in replicas:
                if controller.running and controller.post_alerts(body) == 200:
                    return controller
            return None

        found: Controller = self.until(taken, "a controller to accept the alerts", timeout)
        return found

    # -- the end

    def close(self) -> None:
        """Stop every controller and proxy, delete every object of the scene."""
        failures: list[str] = []
        for controller in self.controllers:
            controller.stop()
        for proxy in self.proxies:
            proxy.stop()
        server = self.server
        for rollback in self.rollbacks():
            server.request("DELETE", f"{NODEROLLBACKS}/{rollback['metadata']['name']}")
        for name in self.nodes:
            for event in self.events(name):
                server.request(
                    "DELETE", f"/api/v1/namespaces/default/events/{event['metadata']['name']}"
                )
            for path in (
                f"/api/v1/nodes/{name}",
                f"/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASES}/leases/{name}",
            ):
                answer = server.request("DELETE", path, {"gracePeriodSeconds": 0})
                if answer.status not in (200, 202, 404):
                    failures.append(f"DELETE {path}: {answer.status}")
        for rollback in self.rollbacks():
            failures.append(f"NodeRollback {rollback['metadata']['name']} left")
        for name in self.nodes:
            server.wait_gone(f"/api/v1/nodes/{name}")
        if failures:
            raise AssertionError("scene cleanup failed: " + "; ".join(failures))


@pytest.fixture
def scene(
    controller_rbac: LocalKubeAPIServer, warm_pool: WarmPool, tmp_path: Path
) -> Iterator[Scene]:
    server = controller_rbac
    namespace = create_namespace(server, "acc-")
    for doc in rbac_docs(LEADER_ELECTION_RBAC):  # the leader Lease's Role, in this namespace
        doc["metadata"]["namespace"] = namespace
        collection, _ = rbac_path(doc)
        server.ok("POST", collection, doc)
    made = Scene(server, namespace, tmp_path, warm_pool)
    made._audit_start = server.audit_log.read_bytes().rfind(b"\n") + 1  # after the last line
    try:
        yield made
    finally:
        try:
            made.close()
        finally:
            for pod in made.pods():
                made.delete_pod(pod["metadata"]["name"])
            delete_namespace(server, namespace)
