"""Fixtures the agent's tests on the real kube-apiserver share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from exporter.model.kube import LEASE_NAMESPACE
from nodesync_sim.real.kube_apiserver import AGENT, LocalKubeAPIServer
from tests.support.realkube import AGENT_RBAC, rbac_applied

NODE_LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases"


@pytest.fixture
def agent_rbac(kubeapi: LocalKubeAPIServer) -> Iterator[None]:
    """The shipped agent RBAC on the shared server for the test."""
    with rbac_applied(kubeapi, AGENT, [AGENT_RBAC], ["/api/v1/nodes", NODE_LEASES]):
        yield
