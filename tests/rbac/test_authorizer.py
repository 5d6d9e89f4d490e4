"""The RBAC authorizer answers as Kubernetes' RBAC does, decision by decision, and through the
test API server with the real client (403 Forbidden for what the roles do not grant)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.aio import client as aio_client
from kubernetes.aio.client.exceptions import ApiException

from nodesync_sim.fake.apiserver import APIServer
from nodesync_sim.fake.apiserver.rbac import (
    Permission,
    RBACAuthorizer,
    RBACError,
    RoleRef,
    service_account,
)

SA = service_account("team", "bot")


def role(kind: str, name: str, rules: list[dict[str, Any]], namespace: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": meta,
        "rules": rules,
    }


def rule(groups: list[str], resources: list[str], verbs: list[str], **more: Any) -> dict[str, Any]:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs, **more}


def binding(
    kind: str,
    name: str,
    role_kind: str,
    role_name: str,
    subjects: list[dict[str, str]],
    namespace: str = "",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name},
        "subjects": subjects,
    }


BOT = {"kind": "ServiceAccount", "name": "bot", "namespace": "team"}


def authorizer(rules: list[dict[str, Any]], *, namespace: str = "") -> RBACAuthorizer:
    """The rules in a ClusterRole bound cluster-wide, or in a Role bound in ``namespace``."""
    if namespace:
        return RBACAuthorizer.from_objects(
            [
                role("Role", "r", rules, namespace),
                binding("RoleBinding", "b", "Role", "r", [BOT], namespace),
            ]
        )
    return RBACAuthorizer.from_objects(
        [
            role("ClusterRole", "r", rules),
            binding("ClusterRoleBinding", "b", "ClusterRole", "r", [BOT]),
        ]
    )


def allows(
    authz: RBACAuthorizer, verb: str, resource: str, sub: str = "", ns: str = "", name: str = ""
) -> bool:
    return authz(SA, verb, resource, sub, ns, name)


def test_verbs_groups_and_resources_must_all_match() -> None:
    authz = authorizer([rule([""], ["nodes"], ["get", "list"])])
    assert allows(authz, "get", "nodes", name="n1")
    assert allows(authz, "list", "nodes")
    assert not allows(authz, "patch", "nodes", name="n1")
    assert not allows(authz, "get", "pods", ns="default", name="p")
    # leases are in coordination.k8s.io, not the core group
    assert not allows(authz, "list", "leases", ns="kube-node-lease")
    assert allows(
        authorizer([rule(["coordination.k8s.io"], ["leases"], ["list"])]), "list", "leases"
    )


def test_a_subresource_needs_its_own_rule() -> None:
    authz = authorizer([rule([""], ["pods"], ["create", "get"])])
    assert not allows(authz, "create", "pods", "eviction", "default", "p")
    assert allows(
        authorizer([rule([""], ["pods/eviction"], ["create"])]),
        "create",
        "pods",
        "eviction",
        "default",
        "p",
    )
    status = authorizer([rule([""], ["*/status"], ["patch"])])
    assert allows(status, "patch", "nodes", "status", name="n1")
    assert not allows(status, "patch", "nodes", name="n1")


def test_wildcards() -> None:
    authz = authorizer([rule(["*"], ["*"], ["*"])])
    assert allows(authz, "delete", "nodes", name="n1")
    assert allows(authz, "create", "pods", "eviction", "default", "p")


def test_resource_names_limit_named_requests_only() -> None:
    authz = authorizer(
        [
            rule(
                ["coordination.k8s.io"],
                ["leases"],
                ["get", "update", "create", "list"],
                resourceNames=["lead"],
            )
        ],
        namespace="team",
    )
    assert allows(authz, "get", "leases", ns="team", name="lead")
    assert not allows(authz, "get", "leases", ns="team", name="other")
    assert not allows(authz, "create", "leases", ns="team")  # a create carries no name
    assert not allows(authz, "list", "leases", ns="team")


def test_a_role_binding_grants_in_its_namespace_only() -> None:
    authz = authorizer([rule([""], ["pods", "nodes"], ["list"])], namespace="team")
    assert allows(authz, "list", "pods", ns="team")
    assert not allows(authz, "list", "pods", ns="other")
    assert not allows(authz, "list", "pods")  # across all namespaces
    assert not allows(authz, "list", "nodes")  # cluster-scoped: never through a RoleBinding


def test_a_role_binding_may_grant_a_cluster_role_in_its_namespace() -> None:
    authz = RBACAuthorizer.from_objects(
        [
            role("ClusterRole", "reader", [rule([""], ["pods"], ["get"])]),
            binding("RoleBinding", "b", "ClusterRole", "reader", [BOT], "team"),
        ]
    )
    assert allows(authz, "get", "pods", ns="team", name="p")
    assert not allows(authz, "get", "pods", ns="default", name="p")


@pytest.mark.parametrize(
    ("subject", "user", "allowed"),
    [
        (BOT, SA, True),
        (BOT, service_account("other", "bot"), False),
        ({"kind": "User", "name": "alice"}, "alice", True),
        ({"kind": "User", "name": "alice"}, "bob", False),
        ({"kind": "Group", "name": "system:serviceaccounts:team"}, SA, True),
        ({"kind": "Group", "name": "system:serviceaccounts"}, service_account("x", "y"), True),
        ({"kind": "Group", "name": "system:serviceaccounts"}, "alice", False),
        ({"kind": "Group", "name": "system:authenticated"}, "alice", True),
    ],
)
def test_subjects(subject: dict[str, str], user: str, allowed: bool) -> None:
    authz = RBACAuthorizer.from_objects(
        [
            role("ClusterRole", "r", [rule([""], ["nodes"], ["get"])]),
            binding("ClusterRoleBinding", "b", "ClusterRole", "r", [subject]),
        ]
    )
    assert authz(user, "get", "nodes", "", "", "n1") is allowed


def test_superusers_may_do_anything_and_are_not_recorded() -> None:
    authz = authorizer([])
    assert authz("admin", "delete", "nodes", "", "", "n1")
    assert not allows(authz, "get", "nodes", name="n1")
    assert authz.allowed == []
    assert [(r.user, r.verb, r.resource) for r in authz.denials()] == [(SA, "get", "nodes")]


def test_decisions_are_recorded_with_the_permission_that_allowed_them() -> None:
    authz = authorizer(
        [
            rule([""], ["nodes"], ["get", "patch"]),
            rule(["coordination.k8s.io"], ["leases"], ["list"]),
        ]
    )
    assert allows(authz, "get", "nodes", name="n1")
    assert allows(authz, "list", "leases", ns="kube-node-lease")
    assert authz.requests(SA) == {
        ("get", "", "nodes", ""),
        ("list", "coordination.k8s.io", "leases", ""),
    }
    assert [str(p) for p in authz.unused(SA)] == [
        "patch nodes in API group '' (ClusterRole r, rule 0)"
    ]
    ref = RoleRef("ClusterRole", "", "r")
    assert authz.permissions(SA) == [
        Permission(ref, 0, "", "nodes", "get"),
        Permission(ref, 0, "", "nodes", "patch"),
        Permission(ref, 1, "coordination.k8s.io", "leases", "list"),
    ]
    assert authz.permissions("alice") == []


def test_without_takes_exactly_one_permission_away() -> None:
    authz = authorizer([rule([""], ["nodes"], ["get", "patch"])])
    allows(authz, "get", "nodes", name="n1")
    get, patch = authz.permissions(SA)
    smaller = authz.without(get)
    assert smaller.allowed == []  # a fresh record
    assert not allows(smaller, "get", "nodes", name="n1")
    assert allows(smaller, "patch", "nodes", name="n1")
    assert allows(authz, "get", "nodes", name="n1")  # the original is unchanged
    with pytest.raises(KeyError):
        smaller.without(get)
    assert authz.fresh().allowed == []
    assert patch in authz.fresh().permissions(SA)


@pytest.mark.parametrize(
    ("objects", "error"),
    [
        (
            [{**role("ClusterRole", "r", []), "aggregationRule": {"clusterRoleSelectors": [{}]}}],
            "aggregated",
        ),
        (
            [role("ClusterRole", "r", [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}])],
            "nonResourceURLs",
        ),
        ([role("Role", "r", [])], "needs a namespace"),
        ([binding("ClusterRoleBinding", "b", "Role", "r", [BOT])], "cannot refer to a Role"),
        ([role("ClusterRole", "r", []), role("ClusterRole", "r", [])], "defined twice"),
        (
            [
                binding(
                    "ClusterRoleBinding", "b", "ClusterRole", "r", [{"kind": "Robot", "name": "x"}]
                )
            ],
            "subject kind",
        ),
        ([role("ClusterRole", "r", [rule([""], "nodes", ["get"])])], "list of strings"),
    ],
)
def test_what_it_cannot_represent_is_refused(objects: list[dict[str, Any]], error: str) -> None:
    with pytest.raises(RBACError, match=error):
        RBACAuthorizer.from_objects(objects)


async def test_the_api_server_enforces_it_for_the_real_client() -> None:
    authz = RBACAuthorizer.from_objects(
        [
            role("ClusterRole", "r", [rule([""], ["pods"], ["list"])]),
            role("Role", "leases", [rule(["coordination.k8s.io"], ["leases"], ["create"])], "team"),
            binding("ClusterRoleBinding", "b", "ClusterRole", "r", [BOT]),
            binding("RoleBinding", "b", "Role", "leases", [BOT], "team"),
        ]
    )
    async with APIServer(authorizer=authz, extra_tokens={"bot-token": SA}) as server:
        server.store.create("namespaces", {"metadata": {"name": "team"}})
        async with aio_client.ApiClient(server.aio_configuration("bot-token")) as api:
            core = aio_client.CoreV1Api(api)
            assert (await core.list_pod_for_all_namespaces()).items == []
            with pytest.raises(ApiException) as denied:
                await core.list_node()
            assert denied.value.status == 403
            with pytest.raises(ApiException) as eviction:
                await core.create_namespaced_pod_eviction(
                    "p", "team", {"metadata": {"name": "p", "namespace": "team"}}
                )
            assert eviction.value.status == 403
            lease = {"metadata": {"name": "lead"}, "spec": {"holderIdentity": "me"}}
            await aio_client.CoordinationV1Api(api).create_namespaced_lease("team", lease)
    assert authz.requests(SA) == {
        ("list", "", "pods", ""),
        ("create", "coordination.k8s.io", "leases", ""),
    }
    assert {(r.verb, r.resource, r.subresource) for r in authz.denials(SA)} == {
        ("list", "nodes", ""),
        ("create", "pods", "eviction"),
    }
