"""The controller's shipped RBAC on the shared real kube-apiserver, for the acceptance tests
(tests/support/controllers.py): the ``controller_rbac`` fixture."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodesync_sim.real.kube_apiserver import CONTROLLER, LocalKubeAPIServer
from tests.support.acceptance import NODEROLLBACKS, RBAC_FILES


def rbac_path(doc: dict[str, Any]) -> tuple[str, str]:
    """(collection, object path) of an RBAC document."""
    base = "/apis/rbac.authorization.k8s.io/v1"
    plural = {
        "ClusterRole": "clusterroles",
        "ClusterRoleBinding": "clusterrolebindings",
        "Role": "roles",
        "RoleBinding": "rolebindings",
    }[doc["kind"]]
    namespace = doc["metadata"].get("namespace")
    collection = f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"
    return collection, f"{collection}/{doc['metadata']['name']}"


def rbac_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] != "ServiceAccount"]


@pytest.fixture(scope="module")
def controller_rbac(noderollback_crd: LocalKubeAPIServer) -> Iterator[LocalKubeAPIServer]:
    """The shipped controller RBAC on the shared server, for this module's tests."""
    server = noderollback_crd
    created: list[str] = []
    try:
        for doc in (d for f in RBAC_FILES for d in rbac_docs(f)):
            collection, path = rbac_path(doc)
            answer = server.request("POST", collection, doc)
            if answer.status == 409:  # left by an interrupted run: take it as ours
                server.ok("PUT", path, {**doc, "metadata": server.ok("GET", path)["metadata"]})
            elif answer.status != 201:
                raise AssertionError(f"POST {collection}: {answer.status} {answer.body}")
            created.append(path)
        server.wait_for(
            lambda: (
                server.request("GET", NODEROLLBACKS, identity=CONTROLLER).status == 200
                and server.request("GET", "/api/v1/nodes", identity=CONTROLLER).status == 200
            ),
            "the controller's RBAC to take effect",
        )
        yield server
    finally:
        for path in reversed(created):
            server.request("DELETE", path)
        # Leave the shared server as found: the controller's account is refused again.
        server.wait_for(
            lambda: server.request("GET", "/api/v1/nodes", identity=CONTROLLER).status == 403,
            "the controller to be refused again",
        )
