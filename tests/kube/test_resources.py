"""REST paths are built only from names the API server could hold: ``..`` would be collapsed
into another path by the HTTP client, ``n/status`` would reach a subresource."""

from __future__ import annotations

import pytest

from exporter.kube.errors import InvalidName, KubeError
from exporter.kube.resources import LEASES, NODES, PODS


def test_paths_of_valid_names() -> None:
    assert NODES.path(None, "ip-10-0-0-1.ec2.internal") == "/api/v1/nodes/ip-10-0-0-1.ec2.internal"
    assert PODS.path("kube-system", "p-1") == "/api/v1/namespaces/kube-system/pods/p-1"
    assert LEASES.path("kube-node-lease") == (
        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
    )
    assert NODES.path() == "/api/v1/nodes"


@pytest.mark.parametrize("name", ["..", ".", "old-0/status", "a%2Fb", "A", "n" * 254, "a b"])
def test_no_path_from_an_invalid_name(name: str) -> None:
    with pytest.raises(InvalidName) as raised:
        NODES.path(None, name)
    assert isinstance(raised.value, KubeError)  # handled where API failures are
    assert not raised.value.retryable
    assert len(str(raised.value)) < 200


@pytest.mark.parametrize("namespace", ["..", "a.b", "ns/pods", "N", "n" * 64])
def test_no_path_from_an_invalid_namespace(namespace: str) -> None:
    with pytest.raises(InvalidName):
        PODS.path(namespace, "p")
    with pytest.raises(InvalidName):
        PODS.path(namespace)
