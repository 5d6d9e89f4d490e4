"""A real kube-apiserver with etcd, as the kubeapi fixtures run it: identities, RBAC, audit,
restart, compaction."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from nodesync_sim.real.kube_apiserver import ADMIN, AGENT, CONTROLLER, LocalKubeAPIServer
from tests.support.kubeapi import KubeCleanup

pytestmark = [pytest.mark.kubeapi, pytest.mark.timeout(120)]

AGENT_RBAC = Path(__file__).resolve().parents[3] / "deploy" / "base" / "agent-rbac.yaml"
AGENT_USER = "system:serviceaccount:nodesync:nodesync-agent"
MERGE_PATCH = "application/merge-patch+json"


def _node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"nodesync.test/case": name}},
    }


def _unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


def test_admin_creates_a_node_and_lists_it(
    kubeapi: LocalKubeAPIServer, kubeapi_cleanup: KubeCleanup
) -> None:
    name = _unique("node")
    created = kubeapi_cleanup.create("/api/v1/nodes", _node(name))
    assert created["metadata"]["uid"]
    assert int(created["metadata"]["resourceVersion"]) > 0

    listed = kubeapi.ok("GET", f"/api/v1/nodes?labelSelector=nodesync.test/case={name}")
    assert [item["metadata"]["name"] for item in listed["items"]] == [name]

    # The admin kubeconfig works as it is for the kubernetes client (TLS verified).
    with kubernetes.config.new_client_from_config(
        config_file=str(kubeapi.kubeconfig(ADMIN)), persist_config=False
    ) as api:
        nodes = kubernetes.client.CoreV1Api(api).list_node(
            label_selector=f"nodesync.test/case={name}"
        )
    assert [node.metadata.uid for node in nodes.items] == [created["metadata"]["uid"]]


def test_service_account_is_refused_until_its_rbac_is_applied(
    kubeapi: LocalKubeAPIServer, kubeapi_cleanup: KubeCleanup
) -> None:
    refused = kubeapi.request("GET", "/api/v1/nodes", identity=AGENT)
    assert refused.status == 403
    assert refused.body["reason"] == "Forbidden"
    assert f'User "{AGENT_USER}"' in refused.body["message"]

    # The shipped ClusterRole and ClusterRoleBinding bind exactly this identity.
    for doc in yaml.safe_load_all(AGENT_RBAC.read_text()):
        if doc["kind"] == "ClusterRole":
            kubeapi_cleanup.create("/apis/rbac.authorization.k8s.io/v1/clusterroles", doc)
        elif doc["kind"] == "ClusterRoleBinding":
            kubeapi_cleanup.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", doc)
    kubeapi.wait_for(
        lambda: kubeapi.request("GET", "/api/v1/nodes", identity=AGENT).status == 200,
        "the agent's ClusterRoleBinding to take effect",
    )
    # It grants reads of nodes, not writes, and nothing to the controller's account.
    assert kubeapi.request("POST", "/api/v1/nodes", _node("x"), identity=AGENT).status == 403
    assert kubeapi.request("GET", "/api/v1/nodes", identity=CONTROLLER).status == 403

    # Leave the shared server as found: refused again once the binding is gone.
    kubeapi_cleanup.run()
    kubeapi.wait_for(
        lambda: kubeapi.request("GET", "/api/v1/nodes", identity=AGENT).status == 403,
        "the agent to be refused again",
    )


def test_audit_log_records_a_create_with_its_user_and_body(
    kubeapi: LocalKubeAPIServer, kubeapi_namespace: str
) -> None:
    name = _unique("cm")
    collection = f"/api/v1/namespaces/{kubeapi_namespace}/configmaps"
    kubeapi.ok("POST", collection, {"metadata": {"name": name}, "data": {"k": "v"}})
    assert kubeapi.request("GET", "/api/v1/nodes", identity=AGENT).status == 403

    def is_create(event: dict[str, Any]) -> bool:
        ref = event.get("objectRef", {})
        return (
            event["verb"] == "create"
            and ref.get("resource") == "configmaps"
            and ref.get("namespace") == kubeapi_namespace
            and ref.get("name") == name
        )

    create = kubeapi.wait_for_audit(is_create)
    assert create["stage"] == "ResponseComplete"
    assert create["user"]["username"] == ADMIN
    assert "system:masters" in create["user"]["groups"]
    assert create["responseStatus"]["code"] == 201
    assert create["level"] == "Request"
    assert create["requestObject"]["data"] == {"k": "v"}

    refusal = kubeapi.wait_for_audit(
        lambda event: (
            event["user"].get("username") == AGENT_USER  # none when refused unauthenticated
            and event["requestURI"] == "/api/v1/nodes"
            and event["responseStatus"]["code"] == 403
        )
    )
    assert refusal["level"] == "Metadata"
    assert "requestObject" not in refusal
    assert refusal["user"]["groups"] == [
        "system:serviceaccounts",
        "system:serviceaccounts:nodesync",
        "system:authenticated",
    ]
    assert refusal["annotations"]["authorization.k8s.io/decision"] == "forbid"


def test_restart_keeps_the_data_and_is_ready_again(private_kubeapi: LocalKubeAPIServer) -> None:
    server = private_kubeapi
    name = _unique("node")
    created = server.ok("POST", "/api/v1/nodes", _node(name))
    for doc in yaml.safe_load_all(AGENT_RBAC.read_text()):
        if doc["kind"] == "ClusterRole":
            server.ok("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", doc)
        elif doc["kind"] == "ClusterRoleBinding":
            server.ok("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", doc)
    server.wait_for(
        lambda: server.request("GET", "/api/v1/nodes", identity=AGENT).status == 200,
        "the agent's ClusterRoleBinding to take effect",
    )
    port, pid, ca = server.port, server.apiserver_pid, server.ca_file.read_bytes()
    kubeconfig = server.kubeconfig(AGENT).read_text()

    for kill in (False, True):
        server.restart(kill=kill)
        assert server.port == port
        assert server.apiserver_pid not in (None, pid)
        pid = server.apiserver_pid
        # Same certificate, so kubeconfigs handed out before stay valid.
        assert server.ca_file.read_bytes() == ca
        assert server.kubeconfig(AGENT).read_text() == kubeconfig
        assert server.request("GET", "/readyz").status == 200
        # Ready means RBAC is ready too: no transient 403 right after the restart.
        answer = server.request("GET", f"/api/v1/nodes/{name}", identity=AGENT)
        assert answer.status == 200, answer.body
        assert answer.body["metadata"]["uid"] == created["metadata"]["uid"]
        assert answer.body["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]

    server.ok("DELETE", f"/api/v1/nodes/{name}")


def test_compaction_expires_old_resource_versions(private_kubeapi: LocalKubeAPIServer) -> None:
    server = private_kubeapi
    name = _unique("node")
    old = server.ok("POST", "/api/v1/nodes", _node(name))["metadata"]["resourceVersion"]
    for value in ("1", "2"):
        server.ok(
            "PATCH",
            f"/api/v1/nodes/{name}",
            {"metadata": {"labels": {"step": value}}},
            content_type=MERGE_PATCH,
        )
    watch_from_old = f"/api/v1/nodes?watch=1&resourceVersion={old}&timeoutSeconds=5"
    exact_list_at_old = f"/api/v1/nodes?resourceVersion={old}&resourceVersionMatch=Exact"

    compacted = server.compact()
    assert compacted > int(old)
    # etcd forgot the old revision: a list at exactly that version is expired ...
    answer = server.request("GET", exact_list_at_old)
    assert answer.status == 410
    assert answer.body["reason"] == "Expired"
    # ... but the watch cache still holds the events after it and replays them.
    with server.watch(watch_from_old) as events:
        replayed = [next(events), next(events)]
    assert [event["type"] for event in replayed] == ["MODIFIED", "MODIFIED"]
    assert [e["object"]["metadata"]["labels"]["step"] for e in replayed] == ["1", "2"]

    # Once the watch cache starts again, past the compaction, the old version is gone.
    server.expire_history()
    with server.watch(watch_from_old) as events:
        first = next(events)
    assert first["type"] == "ERROR"
    assert first["object"]["code"] == 410
    assert first["object"]["reason"] == "Expired"

    # A relist gives a version that can be watched from again.
    listed = server.ok("GET", f"/api/v1/nodes?fieldSelector=metadata.name={name}")
    resume = listed["metadata"]["resourceVersion"]
    with server.watch(f"/api/v1/nodes?watch=1&resourceVersion={resume}&timeoutSeconds=5") as events:
        server.ok(
            "PATCH",
            f"/api/v1/nodes/{name}",
            {"metadata": {"labels": {"step": "3"}}},
            content_type=MERGE_PATCH,
        )
        event = next(event for event in events if event["object"]["metadata"]["name"] == name)
    assert event["type"] == "MODIFIED"
    assert event["object"]["metadata"]["labels"]["step"] == "3"

    server.ok("DELETE", f"/api/v1/nodes/{name}")
