"""Authentication, the authorization hook, fault injection and request counters."""

from __future__ import annotations

import json
import time

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from nodesync_sim.fake.apiserver import ThreadedAPIServer
from tests.sim.fake.apiserver.helpers import node


def test_missing_or_wrong_token_is_unauthorized(server: ThreadedAPIServer) -> None:
    for cfg in (client.Configuration(host=server.url), server.configuration(token="wrong")):
        with client.ApiClient(cfg) as api, pytest.raises(ApiException) as info:
            client.CoreV1Api(api).list_node()
        assert info.value.status == 401
        status = json.loads(info.value.body)
        assert status == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "Unauthorized",
            "reason": "Unauthorized",
            "code": 401,
        }
    assert server.counters.count(code=401) == 2


def test_authorizer_hook_forbids() -> None:
    calls: list[tuple[str, ...]] = []

    def no_node_writes(
        user: str, verb: str, resource: str, subresource: str, namespace: str, name: str
    ) -> bool:
        calls.append((user, verb, resource, subresource, namespace, name))
        return not (resource == "nodes" and verb == "patch")

    with (
        ThreadedAPIServer(authorizer=no_node_writes, extra_tokens={"t2": "alice"}) as srv,
        client.ApiClient(srv.configuration(token="t2")) as api,
    ):
        core = client.CoreV1Api(api)
        core.create_node(node("n1"))
        with pytest.raises(ApiException) as info:
            core.patch_node("n1", {"spec": {"unschedulable": True}})
        assert info.value.status == 403
        status = json.loads(info.value.body)
        assert status["reason"] == "Forbidden"
        assert status["message"] == (
            'nodes "n1" is forbidden: User "alice" cannot patch resource "nodes" '
            'in API group "" at the cluster scope'
        )
    assert ("alice", "create", "nodes", "", "", "") in calls


def test_injected_500_for_the_next_requests(
    core: client.CoreV1Api, server: ThreadedAPIServer
) -> None:
    server.faults.fail_next(2, 500, path_prefix="/api/v1/nodes", verb="list")
    core.list_namespace()  # other paths are untouched
    for _ in range(2):
        with pytest.raises(ApiException) as info:
            core.list_node()
        assert info.value.status == 500
        assert json.loads(info.value.body)["reason"] == "InternalError"
    assert core.list_node().items == []
    assert server.counters.count(verb="list", resource="nodes", code=500) == 2
    assert server.counters.count(verb="list", resource="nodes", code=200) == 1


def test_injected_429_has_retry_after(core: client.CoreV1Api, server: ThreadedAPIServer) -> None:
    core.create_node(node("n1"))
    server.faults.fail_next(1, 429, verb="patch", retry_after=3)
    with pytest.raises(ApiException) as info:
        core.patch_node("n1", {"spec": {"unschedulable": True}})
    assert info.value.status == 429
    assert info.value.headers["Retry-After"] == "3"
    assert json.loads(info.value.body)["details"]["retryAfterSeconds"] == 3
    assert not server.store.get("nodes", "n1")["spec"].get("unschedulable")  # nothing written
    assert core.patch_node("n1", {"spec": {"unschedulable": True}}).spec.unschedulable


def test_injected_latency(core: client.CoreV1Api, server: ThreadedAPIServer) -> None:
    # Long enough that a loaded machine's own delays cannot pass for it.
    server.faults.add_latency(2.0, path_prefix="/api/v1/nodes")
    started = time.monotonic()
    core.list_node()
    assert time.monotonic() - started >= 2.0
    assert server.faults.latency_for("/api/v1/namespaces", "list") == 0
    server.faults.clear()
    assert server.faults.latency_for("/api/v1/nodes", "list") == 0
    started = time.monotonic()
    core.list_node()
    assert time.monotonic() - started < 2.0


def test_admin_endpoint(server: ThreadedAPIServer, core: client.CoreV1Api) -> None:
    http = urllib3.PoolManager()
    headers = {"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"}
    try:
        assert http.request("GET", f"{server.url}/_sim/faults").status == 401
        old = core.list_node().metadata.resource_version
        core.create_node(node("n1"))
        body = {"fail": {"count": 1, "status": 500, "verb": "get"}, "compact": True}
        resp = http.request(
            "POST", f"{server.url}/_sim/faults", body=json.dumps(body), headers=headers
        )
        assert resp.status == 200
        state = json.loads(resp.data)
        assert state["failures"][0]["count"] == 1
        assert state["compacted_to"] > int(old)
        with pytest.raises(ApiException) as info:
            core.read_node("n1")
        assert info.value.status == 500
        with pytest.raises(ApiException) as info:
            core.list_node(resource_version=old, resource_version_match="Exact")
        assert info.value.status == 410
        resp = http.request("GET", f"{server.url}/_sim/counters", headers=headers)
        rows = json.loads(resp.data)
        assert {"verb": "get", "resource": "nodes", "code": 500, "count": 1} in rows
        cleared = http.request("DELETE", f"{server.url}/_sim/faults", headers=headers)
        assert json.loads(cleared.data) == {"failures": [], "latency": []}
    finally:
        http.clear()


def test_write_counters(core: client.CoreV1Api, server: ThreadedAPIServer) -> None:
    core.create_node(node("n1"))
    core.patch_node("n1", {"spec": {"unschedulable": True}})
    core.patch_node_status("n1", {"status": {"phase": "Running"}})
    core.read_node("n1")
    assert server.counters.writes("nodes") == 2
    assert server.counters.writes("nodes/status") == 1
    assert server.counters.count(verb="get") == 1
    server.counters.reset()
    assert server.counters.snapshot() == {}
