"""Lists: selectors, pagination with continue tokens, resourceVersion semantics."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from nodesync_sim.fake.apiserver import ThreadedAPIServer
from tests.sim.fake.apiserver.helpers import node, pod_body


@pytest.fixture
def pods(core: client.CoreV1Api, server: ThreadedAPIServer) -> None:
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="team")))
    specs = [
        ("default", "web-1", "n1", {"app": "web", "tier": "front"}),
        ("default", "web-2", "n2", {"app": "web"}),
        ("default", "db-1", "n1", {"app": "db"}),
        ("team", "job-1", None, {"app": "job"}),
    ]
    for ns, name, node_name, labels in specs:
        core.create_namespaced_pod(ns, pod_body(name, node_name, labels))
    server.store.patch(
        "pods", "db-1", {"status": {"phase": "Running"}}, namespace="default", subresource="status"
    )


def names(pod_list: client.V1PodList) -> list[str]:
    return [p.metadata.name for p in pod_list.items]


@pytest.mark.usefixtures("pods")
@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=web", ["web-1", "web-2"]),
        ("app==web", ["web-1", "web-2"]),
        ("app!=web", ["db-1", "job-1"]),
        ("app in (db,job)", ["db-1", "job-1"]),
        ("app notin (db,job)", ["web-1", "web-2"]),
        ("tier", ["web-1"]),
        ("!tier", ["db-1", "job-1", "web-2"]),
        ("app=web,!tier", ["web-2"]),
    ],
)
def test_label_selectors(core: client.CoreV1Api, selector: str, expected: list[str]) -> None:
    found = core.list_pod_for_all_namespaces(label_selector=selector)
    assert sorted(names(found)) == sorted(expected)


@pytest.mark.usefixtures("pods")
@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("spec.nodeName=n1", ["db-1", "web-1"]),
        ("spec.nodeName=", ["job-1"]),
        ("spec.nodeName!=n1", ["job-1", "web-2"]),
        ("status.phase=Running", ["db-1"]),
        ("metadata.name=web-2", ["web-2"]),
        ("metadata.namespace=team", ["job-1"]),
        ("spec.nodeName=n1,status.phase=Pending", ["web-1"]),
    ],
)
def test_field_selectors(core: client.CoreV1Api, selector: str, expected: list[str]) -> None:
    found = core.list_pod_for_all_namespaces(field_selector=selector)
    assert sorted(names(found)) == sorted(expected)


def test_unsupported_field_is_bad_request(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as info:
        core.list_node(field_selector="spec.nodeName=x")
    assert info.value.status == 400
    assert "field label not supported" in json.loads(info.value.body)["message"]


def test_malformed_label_selector_is_bad_request(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as info:
        core.list_node(label_selector="app in (a")
    assert info.value.status == 400


@pytest.mark.usefixtures("pods")
def test_namespaced_list_and_list_kind(
    core: client.CoreV1Api, api_client: client.ApiClient
) -> None:
    assert sorted(names(core.list_namespaced_pod("team"))) == ["job-1"]
    raw = core.list_namespaced_pod("default", _preload_content=False)
    body = json.loads(raw.data)
    assert body["kind"] == "PodList"
    assert body["apiVersion"] == "v1"
    assert int(body["metadata"]["resourceVersion"]) > 0
    assert "kind" not in body["items"][0]  # list items carry no kind, as on a real server


def test_pagination_with_continue_is_a_consistent_snapshot(
    core: client.CoreV1Api, server: ThreadedAPIServer
) -> None:
    for i in range(5):
        core.create_node(node(f"n{i}"))
    first = core.list_node(limit=2)
    assert names(first) == ["n0", "n1"]
    assert first.metadata.remaining_item_count == 3
    # Changes after the first page are not visible to later pages.
    core.delete_node("n3")
    core.create_node(node("n5"))
    second = core.list_node(limit=2, _continue=first.metadata._continue)
    assert names(second) == ["n2", "n3"]
    assert second.metadata.resource_version == first.metadata.resource_version
    third = core.list_node(limit=2, _continue=second.metadata._continue)
    assert names(third) == ["n4"]
    assert third.metadata._continue is None


def test_continue_token_expires_after_compaction(
    core: client.CoreV1Api, server: ThreadedAPIServer
) -> None:
    for i in range(3):
        core.create_node(node(f"n{i}"))
    first = core.list_node(limit=1)
    core.create_node(node("later"))
    server.compact()
    with pytest.raises(ApiException) as info:
        core.list_node(limit=1, _continue=first.metadata._continue)
    assert info.value.status == 410
    assert json.loads(info.value.body)["reason"] == "Expired"


def test_exact_resource_version_list(core: client.CoreV1Api, server: ThreadedAPIServer) -> None:
    core.create_node(node("a"))
    at = core.list_node().metadata.resource_version
    core.create_node(node("b"))
    old = core.list_node(resource_version=at, resource_version_match="Exact")
    assert names(old) == ["a"]
    assert old.metadata.resource_version == at
    assert names(core.list_node(resource_version="0")) == ["a", "b"]
    server.compact()
    with pytest.raises(ApiException) as info:
        core.list_node(resource_version=at, resource_version_match="Exact")
    assert info.value.status == 410


def test_too_large_resource_version(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as info:
        core.list_node(resource_version="999999")
    assert info.value.status == 504
