"""Create, get, list, replace and delete through the real client; Status bodies on errors."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException, ConflictException, NotFoundException

from nodesync_sim.fake.apiserver import ThreadedAPIServer
from tests.sim.fake.apiserver.helpers import node, pod_body


def test_discovery_and_version(api_client: client.ApiClient) -> None:
    assert client.VersionApi(api_client).get_code().git_version.startswith("v1.")
    groups = client.ApisApi(api_client).get_api_versions()
    names = {g.name for g in groups.groups}
    assert {"coordination.k8s.io", "policy"} <= names
    core = client.CoreV1Api(api_client).get_api_resources()
    by_name = {r.name: r for r in core.resources}
    assert by_name["pods"].namespaced
    assert not by_name["nodes"].namespaced
    assert "pods/eviction" in by_name


def test_default_namespaces_exist(core: client.CoreV1Api) -> None:
    names = {ns.metadata.name for ns in core.list_namespace().items}
    assert {"default", "kube-system", "kube-node-lease"} <= names


def test_create_assigns_server_fields(core: client.CoreV1Api) -> None:
    before = int(core.list_node().metadata.resource_version)
    created = core.create_node(node("n1", {"zone": "a"}))
    assert created.metadata.uid
    assert created.metadata.creation_timestamp is not None
    assert int(created.metadata.resource_version) > before
    got = core.read_node("n1")
    assert got.metadata.uid == created.metadata.uid
    assert got.metadata.labels == {"zone": "a"}


def test_resource_versions_are_one_global_counter(
    core: client.CoreV1Api, coordination: client.CoordinationV1Api
) -> None:
    a = core.create_node(node("a"))
    lease = coordination.create_namespaced_lease(
        "kube-node-lease",
        client.V1Lease(metadata=client.V1ObjectMeta(name="a"), spec=client.V1LeaseSpec()),
    )
    b = core.create_node(node("b"))
    rvs = [int(o.metadata.resource_version) for o in (a, lease, b)]
    assert rvs == sorted(rvs)
    assert len(set(rvs)) == 3


def test_pod_create_resets_status_and_sets_generation(core: client.CoreV1Api) -> None:
    body = pod_body("p1", "n1")
    body.status = client.V1PodStatus(phase="Running")
    created = core.create_namespaced_pod("default", body)
    assert created.status.phase == "Pending"
    assert created.metadata.generation == 1
    assert created.metadata.namespace == "default"


def test_create_twice_is_already_exists(core: client.CoreV1Api) -> None:
    core.create_node(node("n1"))
    with pytest.raises(ConflictException) as info:
        core.create_node(node("n1"))
    status = json.loads(info.value.body)
    assert status["kind"] == "Status"
    assert status["status"] == "Failure"
    assert status["reason"] == "AlreadyExists"
    assert status["code"] == 409
    assert status["details"] == {"name": "n1", "kind": "nodes"}


def test_create_in_missing_namespace_is_not_found(core: client.CoreV1Api) -> None:
    with pytest.raises(NotFoundException) as info:
        core.create_namespaced_pod("nope", pod_body("p1"))
    status = json.loads(info.value.body)
    assert status["reason"] == "NotFound"
    assert status["details"] == {"name": "nope", "kind": "namespaces"}


def test_get_missing_is_not_found_status(coordination: client.CoordinationV1Api) -> None:
    with pytest.raises(NotFoundException) as info:
        coordination.read_namespaced_lease("ghost", "kube-node-lease")
    status = json.loads(info.value.body)
    assert status["message"] == 'leases.coordination.k8s.io "ghost" not found'
    assert status["details"]["group"] == "coordination.k8s.io"


def test_missing_name_is_invalid(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as info:
        core.create_node(client.V1Node(metadata=client.V1ObjectMeta()))
    assert info.value.status == 422
    assert json.loads(info.value.body)["reason"] == "Invalid"


def test_generate_name(core: client.CoreV1Api) -> None:
    created = core.create_node(client.V1Node(metadata=client.V1ObjectMeta(generate_name="w-")))
    assert created.metadata.name.startswith("w-")
    assert len(created.metadata.name) == 7


def test_replace_with_stale_resource_version_conflicts(core: client.CoreV1Api) -> None:
    first = core.create_node(node("n1"))
    first.metadata.labels = {"x": "1"}
    updated = core.replace_node("n1", first)
    assert int(updated.metadata.resource_version) > int(first.metadata.resource_version)
    first.metadata.labels = {"x": "2"}
    with pytest.raises(ConflictException) as info:
        core.replace_node("n1", first)  # still carries the old resourceVersion
    status = json.loads(info.value.body)
    assert status["reason"] == "Conflict"
    assert "the object has been modified" in status["message"]


def test_main_resource_update_keeps_status(core: client.CoreV1Api) -> None:
    created = core.create_node(node("n1"))
    created.status = client.V1NodeStatus(phase="Running")
    replaced = core.replace_node("n1", created)
    assert replaced.status is None or replaced.status.phase is None
    with_status = core.replace_node_status(
        "n1", replaced.model_copy(update={"status": created.status})
    )
    assert with_status.status.phase == "Running"


def test_no_op_update_does_not_bump_resource_version(core: client.CoreV1Api) -> None:
    created = core.create_node(node("n1", {"a": "b"}))
    again = core.patch_node("n1", {"metadata": {"labels": {"a": "b"}}})
    assert again.metadata.resource_version == created.metadata.resource_version


def test_delete_node_returns_success_status(
    core: client.CoreV1Api, server: ThreadedAPIServer
) -> None:
    core.create_node(node("n1"))
    answer = core.delete_node("n1")
    status = answer if isinstance(answer, dict) else answer.to_dict()
    assert status["status"] == "Success"
    assert server.store.try_get("nodes", "n1") is None


def test_delete_preconditions(core: client.CoreV1Api) -> None:
    created = core.create_node(node("n1"))
    wrong_uid = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="other"))
    with pytest.raises(ConflictException) as info:
        core.delete_node("n1", body=wrong_uid)
    assert (
        "Precondition failed: UID in precondition: other" in json.loads(info.value.body)["message"]
    )
    stale = client.V1DeleteOptions(preconditions=client.V1Preconditions(resource_version="1"))
    with pytest.raises(ConflictException):
        core.delete_node("n1", body=stale)
    exact = client.V1DeleteOptions(
        preconditions=client.V1Preconditions(
            uid=created.metadata.uid, resource_version=created.metadata.resource_version
        )
    )
    core.delete_node("n1", body=exact)
    with pytest.raises(NotFoundException):
        core.read_node("n1")


def test_protected_namespace_cannot_be_deleted(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as info:
        core.delete_namespace("kube-system")
    assert info.value.status == 403


def test_deleting_a_namespace_deletes_its_objects(
    core: client.CoreV1Api, server: ThreadedAPIServer
) -> None:
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="team")))
    core.create_namespaced_pod("team", pod_body("p1"))
    core.delete_namespace("team")
    assert server.store.list("pods", namespace="team") == []
    assert server.store.try_get("namespaces", "team") is None


def test_events_and_pdbs_round_trip(core: client.CoreV1Api, policy: client.PolicyV1Api) -> None:
    ev = core.create_namespaced_event(
        "default",
        client.CoreV1Event(
            metadata=client.V1ObjectMeta(name="n1.abc"),
            involved_object=client.V1ObjectReference(kind="Node", name="n1"),
            reason="Cordoned",
            message="cordoned by nodesync",
            type="Normal",
        ),
    )
    assert ev.reason == "Cordoned"
    found = core.list_namespaced_event("default", field_selector="involvedObject.name=n1")
    assert [e.metadata.name for e in found.items] == ["n1.abc"]
    pdb = policy.create_namespaced_pod_disruption_budget(
        "default",
        client.V1PodDisruptionBudget(
            metadata=client.V1ObjectMeta(name="web"),
            spec=client.V1PodDisruptionBudgetSpec(
                min_available=1, selector=client.V1LabelSelector(match_labels={"app": "web"})
            ),
        ),
    )
    assert pdb.metadata.generation == 1
    assert pdb.status.disruptions_allowed == 0
