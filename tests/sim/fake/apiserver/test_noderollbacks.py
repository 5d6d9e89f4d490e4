"""The NodeRollback custom resource (nodesync.io/v1alpha1, cluster-scoped, status subresource),
served as a real server serves a CRD: through the real client's CustomObjectsApi, and raw
requests where the answer's exact shape matters."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from nodesync_sim.fake.apiserver import ThreadedAPIServer
from nodesync_sim.fake.apiserver.errors import APIError
from nodesync_sim.fake.apiserver.rbac import RBACAuthorizer, service_account
from tests.sim.fake.apiserver.helpers import call

GROUP, VERSION, PLURAL = "nodesync.io", "v1alpha1", "noderollbacks"
API_VERSION = f"{GROUP}/{VERSION}"
BASE = f"/apis/{GROUP}/{VERSION}/{PLURAL}"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


def rollback(name: str = "rb-1", labels: dict[str, str] | None = None, **more: Any) -> Any:
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = labels
    return {
        "apiVersion": API_VERSION,
        "kind": "NodeRollback",
        "metadata": meta,
        "spec": {"node": "new-1", "reason": "NotReady"},
        **more,
    }


@pytest.fixture
def crs(api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


class Objects:
    """CustomObjectsApi calls for NodeRollbacks, plain dicts in and out."""

    def __init__(self, api: client.CustomObjectsApi) -> None:
        self.api = api

    def create(self, body: Any) -> Any:
        return self.api.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)

    def get(self, name: str = "rb-1") -> Any:
        return self.api.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)

    def list(self, **query: Any) -> Any:
        return self.api.list_cluster_custom_object(GROUP, VERSION, PLURAL, **query)

    def replace(self, body: Any, name: str = "rb-1") -> Any:
        return self.api.replace_cluster_custom_object(GROUP, VERSION, PLURAL, name, body)

    def replace_status(self, body: Any, name: str = "rb-1") -> Any:
        return self.api.replace_cluster_custom_object_status(GROUP, VERSION, PLURAL, name, body)

    def patch(self, body: Any, content_type: str = MERGE_PATCH, name: str = "rb-1") -> Any:
        return self.api.patch_cluster_custom_object(
            GROUP, VERSION, PLURAL, name, body, _content_type=content_type
        )

    def patch_status(self, body: Any, content_type: str = MERGE_PATCH, name: str = "rb-1") -> Any:
        return self.api.patch_cluster_custom_object_status(
            GROUP, VERSION, PLURAL, name, body, _content_type=content_type
        )

    def delete(self, name: str = "rb-1", **options: Any) -> Any:
        return self.api.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name, **options)


@pytest.fixture
def nrb(crs: client.CustomObjectsApi) -> Objects:
    return Objects(crs)


def status_of(info: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(info.value.body)
    assert body["code"] == info.value.status
    return body


# ---------------------------------------------------------------- discovery


def test_discovery_lists_the_group_the_resource_and_its_status(server: ThreadedAPIServer) -> None:
    status, groups = call(server, "GET", "/apis")
    assert status == 200
    [group] = [g for g in groups["groups"] if g["name"] == GROUP]
    preferred = {"groupVersion": API_VERSION, "version": VERSION}
    assert group["versions"] == [preferred]
    assert group["preferredVersion"] == preferred
    status, one = call(server, "GET", f"/apis/{GROUP}")
    assert (status, one["kind"], one["name"]) == (200, "APIGroup", GROUP)
    status, resources = call(server, "GET", f"/apis/{GROUP}/{VERSION}")
    assert (status, resources["kind"], resources["groupVersion"]) == (
        200,
        "APIResourceList",
        API_VERSION,
    )
    by_name = {r["name"]: r for r in resources["resources"]}
    assert set(by_name) == {PLURAL, f"{PLURAL}/status"}
    main = by_name[PLURAL]
    assert (main["kind"], main["singularName"], main["namespaced"], main["shortNames"]) == (
        "NodeRollback",
        "noderollback",
        False,
        ["nrb"],
    )
    assert set(main["verbs"]) == {
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    }
    assert set(by_name[f"{PLURAL}/status"]["verbs"]) == {"get", "patch", "update"}


# ---------------------------------------------------------------- create, get, list


def test_create_sets_the_server_fields_and_drops_a_status(nrb: Objects) -> None:
    created = nrb.create(rollback(status={"phase": "Done"}))
    meta = created["metadata"]
    assert meta["uid"]
    assert meta["creationTimestamp"]
    assert meta["resourceVersion"]
    assert meta["generation"] == 1
    assert "namespace" not in meta
    assert (created["kind"], created["apiVersion"]) == ("NodeRollback", API_VERSION)
    assert "status" not in created  # a create cannot set the status of a custom resource
    assert created["spec"] == {"node": "new-1", "reason": "NotReady"}
    assert nrb.get() == created


def test_a_rollback_without_spec_gets_no_defaults(nrb: Objects) -> None:
    created = nrb.create({"metadata": {"name": "bare"}})
    assert set(created) == {"apiVersion", "kind", "metadata"}


def test_it_is_cluster_scoped(server: ThreadedAPIServer) -> None:
    path = f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}"
    assert call(server, "POST", path, rollback())[0] == 404
    assert call(server, "GET", f"{path}/rb-1")[0] == 404
    assert call(server, "GET", "/api/v1/namespaces/default/nodes")[0] == 404  # as for any kind


def test_create_twice_conflicts_and_a_missing_one_is_not_found(nrb: Objects) -> None:
    nrb.create(rollback())
    with pytest.raises(ApiException) as info:
        nrb.create(rollback())
    assert (info.value.status, status_of(info)["reason"]) == (409, "AlreadyExists")
    with pytest.raises(ApiException) as info:
        nrb.get("ghost")
    body = status_of(info)
    assert (body["reason"], body["message"]) == (
        "NotFound",
        'noderollbacks.nodesync.io "ghost" not found',
    )
    assert body["details"] == {"name": "ghost", "group": GROUP, "kind": PLURAL}


def test_list_with_selectors_pages_and_versions(nrb: Objects, server: ThreadedAPIServer) -> None:
    for i, wave in enumerate(("a", "a", "b")):
        nrb.create(rollback(f"rb-{i}", labels={"wave": wave}))
    listed = nrb.list()
    assert (listed["kind"], listed["apiVersion"]) == ("NodeRollbackList", API_VERSION)
    assert [o["metadata"]["name"] for o in listed["items"]] == ["rb-0", "rb-1", "rb-2"]
    # Items of an unstructured list carry their kind and apiVersion.
    assert {(o["kind"], o["apiVersion"]) for o in listed["items"]} == {
        ("NodeRollback", API_VERSION)
    }
    by_label = nrb.list(label_selector="wave=a")
    assert [o["metadata"]["name"] for o in by_label["items"]] == ["rb-0", "rb-1"]
    by_name = nrb.list(field_selector="metadata.name=rb-2")
    assert [o["metadata"]["name"] for o in by_name["items"]] == ["rb-2"]
    with pytest.raises(ApiException) as info:
        nrb.list(field_selector="spec.node=new-1")
    assert info.value.status == 400
    first = nrb.list(limit=2)
    assert len(first["items"]) == 2
    rest = nrb.list(limit=2, _continue=first["metadata"]["continue"])
    assert [o["metadata"]["name"] for o in rest["items"]] == ["rb-2"]
    at = listed["metadata"]["resourceVersion"]
    nrb.delete("rb-0")
    then = nrb.list(resource_version=at, resource_version_match="Exact")
    assert len(then["items"]) == 3
    server.compact()
    with pytest.raises(ApiException) as info:
        nrb.list(limit=2, _continue=first["metadata"]["continue"])
    assert info.value.status == 410


# ---------------------------------------------------------------- watch


def test_watch_with_bookmarks_and_410(nrb: Objects, server: ThreadedAPIServer) -> None:
    rv = nrb.list()["metadata"]["resourceVersion"]
    nrb.create(rollback())
    nrb.patch({"spec": {"reason": "Pending"}})
    nrb.delete()
    w = watch.Watch()
    seen: list[tuple[str, str]] = []
    for event in w.stream(
        nrb.api.list_cluster_custom_object,
        GROUP,
        VERSION,
        PLURAL,
        resource_version=rv,
        allow_watch_bookmarks=True,
        timeout_seconds=10,
    ):
        obj = event["object"]
        seen.append((event["type"], obj["kind"]))
        if event["type"] == "BOOKMARK":
            assert set(obj["metadata"]) <= {"resourceVersion", "creationTimestamp"}
            assert obj["apiVersion"] == API_VERSION
            w.stop()
    assert seen == [
        ("ADDED", "NodeRollback"),
        ("MODIFIED", "NodeRollback"),
        ("DELETED", "NodeRollback"),
        ("BOOKMARK", "NodeRollback"),
    ]
    server.compact()
    with pytest.raises(ApiException) as info:
        list(
            watch.Watch().stream(
                nrb.api.list_cluster_custom_object,
                GROUP,
                VERSION,
                PLURAL,
                resource_version=rv,
                timeout_seconds=5,
            )
        )
    assert info.value.status == 410


def test_a_watch_from_a_compacted_version_is_one_error_event(server: ThreadedAPIServer) -> None:
    old = call(server, "GET", BASE)[1]["metadata"]["resourceVersion"]
    call(server, "POST", BASE, rollback())
    server.compact()
    headers = {"Authorization": f"Bearer {server.token}"}
    resp = urllib3.request(
        "GET", f"{server.url}{BASE}?watch=1&resourceVersion={old}", headers=headers, timeout=10.0
    )
    lines = [json.loads(line) for line in resp.data.splitlines() if line]
    assert resp.status == 200
    assert [(e["type"], e["object"]["code"], e["object"]["reason"]) for e in lines] == [
        ("ERROR", 410, "Expired")
    ]


# ---------------------------------------------------------------- the main resource


def test_an_update_ignores_the_status_and_counts_spec_changes(nrb: Objects) -> None:
    nrb.create(rollback())
    nrb.patch_status({"status": {"phase": "Running"}})
    current = nrb.get()
    changed = {**current, "status": {"phase": "Forged"}}
    changed["metadata"] = {**current["metadata"], "labels": {"wave": "a"}}
    relabelled = nrb.replace(changed)
    assert relabelled["status"] == {"phase": "Running"}
    assert relabelled["metadata"]["labels"] == {"wave": "a"}
    assert relabelled["metadata"]["generation"] == 1  # metadata and status: no new generation
    respecced = nrb.replace({**relabelled, "spec": {"node": "new-2"}})
    assert respecced["spec"] == {"node": "new-2"}
    assert respecced["metadata"]["generation"] == 2


def test_an_update_must_carry_a_current_resource_version(nrb: Objects) -> None:
    created = nrb.create(rollback())
    unconditional = rollback(spec={"node": "new-2"})
    with pytest.raises(ApiException) as info:
        nrb.replace(unconditional)
    body = status_of(info)
    assert (info.value.status, body["reason"]) == (422, "Invalid")
    assert body["details"]["causes"][0]["field"] == "metadata.resourceVersion"
    nrb.patch({"metadata": {"labels": {"a": "b"}}})
    stale = {**created, "spec": {"node": "new-2"}}  # the version it was created at
    for write in (nrb.replace, nrb.replace_status):
        with pytest.raises(ApiException) as info:
            write(stale)
        assert (info.value.status, status_of(info)["reason"]) == (409, "Conflict")
    with pytest.raises(ApiException) as info:
        nrb.patch({"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}})
    assert info.value.status == 409
    assert nrb.get()["spec"] == {"node": "new-1", "reason": "NotReady"}


def test_merge_patches_of_the_main_resource(nrb: Objects) -> None:
    created = nrb.create(rollback())
    merged = nrb.patch({"spec": {"reason": "Pending"}, "status": {"phase": "Forged"}})
    assert merged["spec"] == {"node": "new-1", "reason": "Pending"}
    assert "status" not in merged
    assert merged["metadata"]["generation"] == 2
    patched = nrb.patch({"spec": {"node": "new-2"}})
    assert patched["spec"]["node"] == "new-2"
    assert patched["metadata"]["generation"] == 3
    labelled = nrb.patch({"metadata": {"labels": {"a": "b"}}})
    assert labelled["metadata"]["generation"] == 3
    only_status = nrb.patch({"status": {"phase": "Forged"}})
    assert only_status["metadata"]["resourceVersion"] == labelled["metadata"]["resourceVersion"]
    assert int(labelled["metadata"]["resourceVersion"]) > int(
        created["metadata"]["resourceVersion"]
    )


def test_a_strategic_merge_patch_is_an_unsupported_media_type(
    nrb: Objects, server: ThreadedAPIServer
) -> None:
    nrb.create(rollback())
    for patch in (nrb.patch, nrb.patch_status):
        with pytest.raises(ApiException) as info:
            patch({"spec": {"reason": "x"}}, STRATEGIC)
        body = status_of(info)
        assert (info.value.status, body["reason"]) == (415, "UnsupportedMediaType")
        assert STRATEGIC not in body["message"].split("include: ")[1]
    assert nrb.get()["spec"]["reason"] == "NotReady"
    with pytest.raises(APIError) as direct:
        server.store.patch(PLURAL, "rb-1", {"spec": {"reason": "x"}})  # strategic by default
    assert direct.value.code == 415


def test_spec_and_status_must_be_objects(nrb: Objects, server: ThreadedAPIServer) -> None:
    answer = call(server, "POST", BASE, {**rollback(), "spec": "new-1"})
    assert answer[0] == 422
    cause = answer[1]["details"]["causes"][0]
    assert (cause["field"], cause["message"]) == (
        "spec",
        'Invalid value: "string": spec in body must be of type object: "string"',
    )
    assert answer[1]["message"].startswith('NodeRollback.nodesync.io "rb-1" is invalid: spec:')
    nrb.create(rollback())
    with pytest.raises(ApiException) as info:
        nrb.patch_status({"status": ["Done"]})
    assert [c["field"] for c in status_of(info)["details"]["causes"]] == ["status"]


# ---------------------------------------------------------------- the status subresource


def test_status_writes_change_only_the_status(nrb: Objects) -> None:
    created = nrb.create(rollback(labels={"wave": "a"}))
    current = {**created, "status": {"phase": "Cordoning"}, "spec": {"node": "forged"}}
    current["metadata"] = {**created["metadata"], "labels": {"wave": "forged"}}
    put = nrb.replace_status(current)
    assert put["status"] == {"phase": "Cordoning"}
    assert put["spec"] == created["spec"]
    assert put["metadata"]["labels"] == {"wave": "a"}
    assert put["metadata"]["generation"] == 1
    merged = nrb.patch_status({"status": {"step": 2}, "spec": {"node": "forged"}})
    assert merged["status"] == {"phase": "Cordoning", "step": 2}
    assert merged["spec"] == created["spec"]
    patched_status = nrb.patch_status({"status": {"phase": "Done"}})
    assert patched_status["status"] == {"phase": "Done", "step": 2}
    assert patched_status["metadata"]["generation"] == 1
    read = nrb.api.get_cluster_custom_object_status(GROUP, VERSION, PLURAL, "rb-1")
    assert read == patched_status
    with pytest.raises(ApiException) as info:
        nrb.patch_status({"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}})
    assert info.value.status == 409


# ---------------------------------------------------------------- delete


def test_delete_answers_a_status_and_checks_preconditions(nrb: Objects) -> None:
    created = nrb.create(rollback())
    uid = created["metadata"]["uid"]
    for preconditions in ({"uid": "someone-else"}, {"resourceVersion": "1"}):
        with pytest.raises(ApiException) as info:
            nrb.delete(body={"preconditions": preconditions})
        assert (info.value.status, status_of(info)["reason"]) == (409, "Conflict")
    answer = nrb.delete(body={"preconditions": {"uid": uid}})
    assert answer["kind"] == "Status"
    assert answer["status"] == "Success"
    assert answer["details"] == {"name": "rb-1", "group": GROUP, "kind": PLURAL, "uid": uid}
    with pytest.raises(ApiException) as info:
        nrb.get()
    assert info.value.status == 404


def test_finalizers_hold_a_deleted_rollback(nrb: Objects) -> None:
    body = rollback()
    body["metadata"]["finalizers"] = ["nodesync.io/cleanup"]
    nrb.create(body)
    held = nrb.delete()
    assert held["metadata"]["deletionTimestamp"]
    assert nrb.get()["metadata"]["deletionTimestamp"] == held["metadata"]["deletionTimestamp"]
    nrb.patch_status({"status": {"phase": "Done"}})  # still writable while held
    nrb.patch({"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as info:
        nrb.get()
    assert info.value.status == 404


# ---------------------------------------------------------------- RBAC


BOT = service_account("nodesync", "controller")


@pytest.fixture
def guarded() -> Iterator[tuple[ThreadedAPIServer, RBACAuthorizer]]:
    rules = [
        {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["create", "get", "list"]},
        {"apiGroups": [GROUP], "resources": [f"{PLURAL}/status"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": [PLURAL], "verbs": ["delete"]},  # the wrong group
    ]
    authz = RBACAuthorizer.from_objects(
        [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": "rollbacks"},
                "rules": rules,
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "rollbacks"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "rollbacks",
                },
                "subjects": [
                    {"kind": "ServiceAccount", "name": "controller", "namespace": "nodesync"}
                ],
            },
        ]
    )
    with ThreadedAPIServer(authorizer=authz, extra_tokens={"bot": BOT}) as srv:
        yield srv, authz


def test_rbac_governs_the_resource_and_its_status_in_its_group(
    guarded: tuple[ThreadedAPIServer, RBACAuthorizer],
) -> None:
    server, authz = guarded
    assert call(server, "POST", BASE, rollback(), token="bot")[0] == 201
    assert call(server, "GET", f"{BASE}/rb-1", token="bot")[0] == 200
    assert call(server, "GET", BASE, token="bot")[0] == 200
    status_patch = {"status": {"phase": "Done"}}
    assert (
        call(server, "PATCH", f"{BASE}/rb-1/status", status_patch, MERGE_PATCH, token="bot")[0]
        == 200
    )
    denied = call(server, "PATCH", f"{BASE}/rb-1", {"spec": {}}, MERGE_PATCH, token="bot")
    assert denied[0] == 403
    assert denied[1]["message"] == (
        'noderollbacks.nodesync.io "rb-1" is forbidden: User "system:serviceaccount:nodesync:'
        'controller" cannot patch resource "noderollbacks" in API group "nodesync.io" at the '
        "cluster scope"
    )
    assert call(server, "PUT", f"{BASE}/rb-1/status", rollback(), token="bot")[0] == 403
    assert call(server, "DELETE", f"{BASE}/rb-1", token="bot")[0] == 403
    assert authz.requests(BOT) == {
        ("create", GROUP, PLURAL, ""),
        ("get", GROUP, PLURAL, ""),
        ("list", GROUP, PLURAL, ""),
        ("patch", GROUP, PLURAL, "status"),
    }
    assert {(r.verb, r.group, r.resource, r.subresource) for r in authz.denials(BOT)} == {
        ("patch", GROUP, PLURAL, ""),
        ("update", GROUP, PLURAL, "status"),
        ("delete", GROUP, PLURAL, ""),
    }
    assert [str(p) for p in authz.unused(BOT)] == [
        "delete noderollbacks in API group '' (ClusterRole rollbacks, rule 2)"
    ]
