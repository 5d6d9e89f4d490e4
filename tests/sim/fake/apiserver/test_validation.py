"""Field validation a real kube-apiserver does: Lease times and durations, an Event's
involvedObject.namespace. Refusals are 422 Invalid Status bodies with one cause per field, and
nothing is stored. Bodies are sent as written (the typed client would rewrite the times)."""

from __future__ import annotations

from typing import Any

import pytest

from nodesync_sim.fake.apiserver import ThreadedAPIServer
from nodesync_sim.fake.apiserver.errors import APIError
from tests.sim.fake.apiserver.helpers import call

NS = "kube-node-lease"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
MICRO = "2024-01-01T00:00:00.000000Z"
MERGE_PATCH = "application/merge-patch+json"


def lease(name: str = "n1", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": MICRO, **spec},
    }


def refusal(answer: tuple[int, Any]) -> dict[str, Any]:
    status, body = answer
    assert status == 422, body
    assert (body["kind"], body["status"], body["reason"], body["code"]) == (
        "Status",
        "Failure",
        "Invalid",
        422,
    )
    return dict(body)


def fields(body: dict[str, Any]) -> list[str]:
    return [c["field"] for c in body["details"]["causes"]]


# ---------------------------------------------------------------- leases


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"acquireTime": MICRO, "leaseTransitions": 0},
        {"renewTime": "2024-01-01T02:00:00.123456+02:00"},
        {"renewTime": None, "leaseDurationSeconds": None},
        {"leaseDurationSeconds": 1},
    ],
)
def test_a_valid_lease_is_stored(server: ThreadedAPIServer, spec: dict[str, Any]) -> None:
    status, created = call(server, "POST", LEASES, lease(**spec))
    assert status == 201, created
    assert created["metadata"]["uid"]


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        (
            {"renewTime": "2024-01-01T00:00:00Z"},
            "spec.renewTime",
            'Invalid value: "2024-01-01T00:00:00Z": must be an RFC 3339 time with microseconds '
            "(2006-01-02T15:04:05.000000Z07:00)",
        ),
        ({"renewTime": "2024-01-01T00:00:00+00:00"}, "spec.renewTime", None),
        ({"renewTime": "2024-01-01T00:00:00.123Z"}, "spec.renewTime", None),
        ({"renewTime": "2024-13-01T00:00:00.000000Z"}, "spec.renewTime", None),
        ({"renewTime": 1704067200}, "spec.renewTime", None),
        ({"acquireTime": "2024-01-01T00:00:00Z"}, "spec.acquireTime", None),
        (
            {"leaseDurationSeconds": 0},
            "spec.leaseDurationSeconds",
            "Invalid value: 0: must be greater than 0",
        ),
        ({"leaseDurationSeconds": -40}, "spec.leaseDurationSeconds", None),
        ({"leaseDurationSeconds": "40"}, "spec.leaseDurationSeconds", None),
        (
            {"leaseTransitions": -1},
            "spec.leaseTransitions",
            "Invalid value: -1: must be greater than or equal to 0",
        ),
    ],
)
def test_an_invalid_lease_is_refused_with_the_field(
    server: ThreadedAPIServer, spec: dict[str, Any], field: str, message: str | None
) -> None:
    body = refusal(call(server, "POST", LEASES, lease(**spec)))
    assert fields(body) == [field]
    details = body["details"]
    assert (details["name"], details["group"], details["kind"]) == (
        "n1",
        "coordination.k8s.io",
        "Lease",
    )
    cause = details["causes"][0]
    assert cause["reason"] == "FieldValueInvalid"
    if message is not None:
        assert cause["message"] == message
        assert body["message"] == f'Lease.coordination.k8s.io "n1" is invalid: {field}: {message}'
    assert server.store.try_get("leases", "n1", namespace=NS) is None


def test_every_invalid_field_is_named(server: ThreadedAPIServer) -> None:
    invalid = lease(renewTime="2024-01-01T00:00:00Z", leaseDurationSeconds=0)
    body = refusal(call(server, "POST", LEASES, invalid))
    assert fields(body) == ["spec.renewTime", "spec.leaseDurationSeconds"]
    assert body["message"].startswith('Lease.coordination.k8s.io "n1" is invalid: [spec.renewTime')


def test_updates_and_patches_are_validated_too(server: ThreadedAPIServer) -> None:
    status, created = call(server, "POST", LEASES, lease())
    assert status == 201
    stored = server.store.get("leases", "n1", namespace=NS)
    rv = created["metadata"]["resourceVersion"]
    stale_format = lease(renewTime="2024-01-01T00:00:10Z")
    stale_format["metadata"]["resourceVersion"] = rv
    assert fields(refusal(call(server, "PUT", f"{LEASES}/n1", stale_format))) == ["spec.renewTime"]
    zero = {"spec": {"leaseDurationSeconds": 0}}
    answer = call(server, "PATCH", f"{LEASES}/n1", zero, MERGE_PATCH)
    assert fields(refusal(answer)) == ["spec.leaseDurationSeconds"]
    assert server.store.get("leases", "n1", namespace=NS) == stored
    renewed = lease(renewTime="2024-01-01T00:00:10.000000Z")
    renewed["metadata"]["resourceVersion"] = rv
    status, after = call(server, "PUT", f"{LEASES}/n1", renewed)
    assert status == 200
    assert after["spec"]["renewTime"] == "2024-01-01T00:00:10.000000Z"


def test_the_store_backdoor_validates_as_well(server: ThreadedAPIServer) -> None:
    with pytest.raises(APIError) as info:
        server.store.create("leases", lease(leaseDurationSeconds=0), namespace=NS)
    assert (info.value.code, info.value.reason) == (422, "Invalid")


# ---------------------------------------------------------------- events


def events_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/events"


def event(namespace: str, involved: dict[str, Any], name: str = "e1") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": involved,
        "reason": "Test",
        "message": "m",
        "type": "Normal",
    }


@pytest.mark.parametrize(
    ("namespace", "involved"),
    [
        ("default", {"kind": "Pod", "name": "p", "namespace": "default"}),
        ("kube-system", {"kind": "Pod", "name": "p", "namespace": "kube-system"}),
        ("default", {"kind": "Node", "name": "n1"}),  # a cluster-scoped object: no namespace
        ("default", {"kind": "Node", "name": "n1", "namespace": ""}),
    ],
)
def test_an_event_in_its_objects_namespace_is_stored(
    server: ThreadedAPIServer, namespace: str, involved: dict[str, Any]
) -> None:
    status, created = call(server, "POST", events_path(namespace), event(namespace, involved))
    assert status == 201, created
    assert created["involvedObject"] == involved


def test_an_event_about_an_object_of_another_namespace_is_refused(
    server: ThreadedAPIServer,
) -> None:
    involved = {"kind": "Pod", "name": "p", "namespace": "kube-system"}
    body = refusal(call(server, "POST", events_path("default"), event("default", involved)))
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "kube-system": does not match event.namespace',
            "field": "involvedObject.namespace",
        }
    ]
    assert body["message"] == (
        'Event "e1" is invalid: involvedObject.namespace: Invalid value: "kube-system": '
        "does not match event.namespace"
    )
    assert server.store.try_get("events", "e1", namespace="default") is None


def test_an_event_update_is_validated_too(server: ThreadedAPIServer) -> None:
    path = events_path("default")
    status, _ = call(server, "POST", path, event("default", {"kind": "Node", "name": "n1"}))
    assert status == 201
    moved = {"involvedObject": {"namespace": "kube-system"}}
    answer = call(server, "PATCH", f"{path}/e1", moved, MERGE_PATCH)
    assert fields(refusal(answer)) == ["involvedObject.namespace"]
    replaced = event("default", {"kind": "Pod", "name": "p", "namespace": "kube-public"})
    assert fields(refusal(call(server, "PUT", f"{path}/e1", replaced))) == [
        "involvedObject.namespace"
    ]
