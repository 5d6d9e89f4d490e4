"""The simulator's privilege: one object, named before it exists, gets a given creation time;
nothing else does (the server's clock is never moved)."""

from __future__ import annotations

import time

from kubernetes import client

from exporter.model.rfc3339 import format_time, parse_time
from nodesync_sim.fake.apiserver import ThreadedAPIServer
from tests.sim.fake.apiserver.helpers import node, pod_body

LONG_AGO = 1_700_000_000.0


def age(created: str | None) -> float:
    seconds = parse_time(created)
    assert seconds is not None, created
    return time.time() - seconds


def test_only_the_named_object_gets_the_creation_time(
    core: client.CoreV1Api, server: ThreadedAPIServer
) -> None:
    with server.store.creation_time("nodes", "", "old", LONG_AGO):
        other = core.create_node(node("new"))  # created meanwhile, through the API
        pod = core.create_namespaced_pod("default", pod_body("old", "old"))  # same name
        old = core.create_node(node("old"))
        lease = server.store.create(
            "leases", {"metadata": {"name": "old"}}, namespace="kube-node-lease"
        )
    assert old.metadata.creation_timestamp.timestamp() == LONG_AGO
    assert server.store.get("nodes", "old")["metadata"]["creationTimestamp"] == format_time(
        LONG_AGO
    )
    for created in (other, pod):
        assert abs(time.time() - created.metadata.creation_timestamp.timestamp()) < 60
    assert age(lease["metadata"]["creationTimestamp"]) < 60


def test_updates_keep_it_and_a_later_create_gets_the_time_of_its_creation(
    core: client.CoreV1Api, server: ThreadedAPIServer
) -> None:
    with server.store.creation_time("pods", "default", "p1", LONG_AGO):
        core.create_namespaced_pod("default", pod_body("p1"))
    patched = core.patch_namespaced_pod("p1", "default", {"metadata": {"labels": {"a": "b"}}})
    assert patched.metadata.creation_timestamp.timestamp() == LONG_AGO
    core.delete_namespaced_pod("p1", "default")
    again = core.create_namespaced_pod("default", pod_body("p1"))
    assert abs(time.time() - again.metadata.creation_timestamp.timestamp()) < 60
