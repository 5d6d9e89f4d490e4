"""POST /_sim/batch: each entry is the write it stands for, with its own watch event."""

from __future__ import annotations

from typing import Any

from kubernetes import client, watch

from nodesync_sim.fake.apiserver import ThreadedAPIServer
from tests.sim.fake.apiserver.helpers import call, node
from tests.sim.fake.apiserver.test_watch import collect

LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
MERGE = "application/merge-patch+json"


def _lease(name: str, renew: str) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": name, "renewTime": renew},
    }


def test_a_batch_creates_and_patches_in_order_each_with_its_watch_event(
    server: ThreadedAPIServer, core: client.CoreV1Api
) -> None:
    rv = core.list_node().metadata.resource_version
    code, answer = call(
        server,
        "POST",
        "/_sim/batch",
        {
            "requests": [
                {
                    "method": "POST",
                    "path": "/api/v1/nodes",
                    "body": client.ApiClient().sanitize_for_serialization(node("n1")),
                },
                {
                    "method": "POST",
                    "path": LEASES,
                    "body": _lease("n1", "2026-12-06T04:00:00.000001Z"),
                },
                {
                    "method": "PATCH",
                    "path": f"{LEASES}/n1",
                    "contentType": MERGE,
                    "body": {"spec": {"renewTime": "2026-12-06T04:00:10.000002Z"}},
                },
                {
                    "method": "PATCH",
                    "path": "/api/v1/nodes/n1",
                    "contentType": MERGE,
                    "body": {"spec": {"unschedulable": True}},
                },
            ]
        },
    )
    assert code == 200
    results = answer["results"]
    assert [r["code"] for r in results] == [201, 201, 200, 200]
    assert results[0]["object"]["metadata"]["uid"]
    assert results[2]["object"]["spec"]["renewTime"] == "2026-12-06T04:00:10.000002Z"
    versions = [int(r["object"]["metadata"]["resourceVersion"]) for r in results]
    assert versions == sorted(versions)
    assert len(set(versions)) == 4

    w = watch.Watch()
    events = collect(w.stream(core.list_node, resource_version=rv, timeout_seconds=10), w, 2)
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED"]
    assert events[1]["object"].spec.unschedulable is True
    assert server.counters.count(verb="create", resource="leases", code=201) == 1
    assert server.counters.count(verb="patch", resource="leases", code=200) == 1


def test_a_failed_entry_answers_its_status_and_the_others_are_applied(
    server: ThreadedAPIServer, core: client.CoreV1Api
) -> None:
    core.create_node(node("n1"))
    code, answer = call(
        server,
        "POST",
        "/_sim/batch",
        {
            "objects": False,
            "requests": [
                {
                    "method": "PATCH",
                    "path": "/api/v1/nodes/missing",
                    "contentType": MERGE,
                    "body": {"spec": {"unschedulable": True}},
                },
                {"method": "DELETE", "path": "/api/v1/nodes/n1"},
                {
                    "method": "PATCH",
                    "path": "/api/v1/nodes/n1",
                    "contentType": MERGE,
                    "body": {"spec": {"unschedulable": True}},
                },
            ],
        },
    )
    assert code == 200
    missing, refused, patched = answer["results"]
    assert missing["code"] == 404
    assert "missing" in missing["message"]
    assert refused["code"] == 400
    assert patched == {
        "code": 200,
        "resourceVersion": core.read_node("n1").metadata.resource_version,
    }
    assert core.read_node("n1").spec.unschedulable is True


def test_a_batch_needs_the_token_and_a_list_of_requests(server: ThreadedAPIServer) -> None:
    assert call(server, "POST", "/_sim/batch", {"requests": []}, token="wrong")[0] == 401
    assert call(server, "POST", "/_sim/batch", {"requests": {}})[0] == 400
    assert call(server, "POST", "/_sim/batch", {"requests": []}) == (200, {"results": []})
