"""Watches through the real client: events, bookmarks, 410 Expired, selectors, drops."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from nodesync_sim.fake.apiserver import ThreadedAPIServer
from tests.sim.fake.apiserver.helpers import node, pod_body
from tests.support.wait import until


def collect(stream: Any, w: watch.Watch, count: int) -> list[dict[str, Any]]:
    events = []
    for event in stream:
        events.append(event)
        if len(events) == count:
            w.stop()
    return events


def test_watch_from_a_version_delivers_every_later_change(core: client.CoreV1Api) -> None:
    rv = core.list_node().metadata.resource_version
    core.create_node(node("n1"))
    core.patch_node("n1", {"spec": {"unschedulable": True}})
    core.delete_node("n1")
    w = watch.Watch()
    events = collect(w.stream(core.list_node, resource_version=rv, timeout_seconds=10), w, 3)
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    assert events[1]["object"].spec.unschedulable is True
    rvs = [int(e["raw_object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs)
    assert rvs[0] > int(rv)


def test_watch_without_version_starts_with_current_objects(core: client.CoreV1Api) -> None:
    core.create_node(node("a"))
    core.create_node(node("b"))
    w = watch.Watch()
    events = collect(w.stream(core.list_node, timeout_seconds=10), w, 2)
    assert sorted((e["type"], e["object"].metadata.name) for e in events) == [
        ("ADDED", "a"),
        ("ADDED", "b"),
    ]


def test_watch_sees_writes_made_while_it_is_open(
    core: client.CoreV1Api, server: ThreadedAPIServer
) -> None:
    rv = core.list_node().metadata.resource_version
    resp = core.list_node(
        watch=True, resource_version=rv, timeout_seconds=10, _preload_content=False
    )
    try:
        until(lambda: server.open_watches == 1, timeout=10.0, what="the watch open")
        server.store.create("nodes", {"metadata": {"name": "late"}})
        line = resp.readline()
    finally:
        resp.close()
    event = json.loads(line)
    assert event["type"] == "ADDED"
    assert event["object"]["metadata"]["name"] == "late"
    assert event["object"]["kind"] == "Node"


def test_bookmarks_carry_only_the_resource_version(core: client.CoreV1Api) -> None:
    core.create_node(node("n1"))
    rv = core.list_node().metadata.resource_version
    w = watch.Watch()
    for event in w.stream(
        core.list_node, resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=10
    ):
        assert event["type"] == "BOOKMARK"
        assert event["raw_object"]["metadata"]["resourceVersion"] == rv
        assert set(event["raw_object"]["metadata"]) <= {"resourceVersion", "creationTimestamp"}
        w.stop()
    assert w.resource_version == rv


def test_no_bookmarks_unless_allowed(core: client.CoreV1Api) -> None:
    rv = core.list_node().metadata.resource_version
    w = watch.Watch()
    # The server ends the watch after timeoutSeconds; bookmarks (every 0.2 s) were not asked for.
    events = list(w.stream(core.list_node, resource_version=rv, timeout_seconds=1))
    assert events == []


def test_compacted_version_gets_410_then_relist_works(
    core: client.CoreV1Api, server: ThreadedAPIServer
) -> None:
    old = core.list_node().metadata.resource_version
    core.create_node(node("n1"))
    server.compact()
    raw = core.list_node(
        watch=True, resource_version=old, timeout_seconds=5, _preload_content=False
    )
    try:
        assert raw.status == 200
        lines = [line for line in raw.read().splitlines() if line]
    finally:
        raw.close()
    assert len(lines) == 1
    error = json.loads(lines[0])
    assert error["type"] == "ERROR"
    assert error["object"]["code"] == 410
    assert error["object"]["reason"] == "Expired"
    w = watch.Watch()
    with pytest.raises(ApiException) as info:
        list(w.stream(core.list_node, resource_version=old, timeout_seconds=5))
    assert info.value.status == 410
    # Relist, then watch from the list's version.
    listed = core.list_node()
    assert [n.metadata.name for n in listed.items] == ["n1"]
    core.patch_node("n1", {"metadata": {"labels": {"a": "b"}}})
    w = watch.Watch()
    events = collect(
        w.stream(
            core.list_node, resource_version=listed.metadata.resource_version, timeout_seconds=5
        ),
        w,
        1,
    )
    assert events[0]["type"] == "MODIFIED"


def test_history_window_expires_old_versions() -> None:
    with (
        ThreadedAPIServer(history_limit=4) as small,
        client.ApiClient(small.configuration()) as api,
    ):
        v1 = client.CoreV1Api(api)
        old = v1.list_node().metadata.resource_version
        for i in range(10):
            v1.create_node(node(f"n{i}"))
        with pytest.raises(ApiException) as info:
            list(watch.Watch().stream(v1.list_node, resource_version=old, timeout_seconds=5))
        assert info.value.status == 410
        recent = str(small.store.resource_version - 1)
        w = watch.Watch()
        events = collect(w.stream(v1.list_node, resource_version=recent, timeout_seconds=5), w, 1)
        assert events[0]["object"].metadata.name == "n9"


def test_label_selector_watch_sees_objects_enter_and_leave(core: client.CoreV1Api) -> None:
    rv = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_pod("default", pod_body("p1", labels={"app": "web"}))
    core.create_namespaced_pod("default", pod_body("other", labels={"app": "db"}))
    core.patch_namespaced_pod("p1", "default", {"metadata": {"labels": {"app": "gone"}}})
    core.patch_namespaced_pod("other", "default", {"metadata": {"labels": {"app": "web"}}})
    w = watch.Watch()
    events = collect(
        w.stream(
            core.list_namespaced_pod,
            "default",
            label_selector="app=web",
            resource_version=rv,
            timeout_seconds=10,
        ),
        w,
        3,
    )
    seen = [(e["type"], e["object"].metadata.name) for e in events]
    assert seen == [("ADDED", "p1"), ("DELETED", "p1"), ("ADDED", "other")]
    # The DELETED event carries the old labels at the change's resourceVersion.
    assert events[1]["object"].metadata.labels == {"app": "web"}
    assert int(events[1]["object"].metadata.resource_version) > int(
        events[0]["object"].metadata.resource_version
    )


def test_field_selector_watch_by_node_name(core: client.CoreV1Api) -> None:
    rv = core.list_pod_for_all_namespaces().metadata.resource_version
    core.create_namespaced_pod("default", pod_body("on-a", "node-a"))
    core.create_namespaced_pod("kube-system", pod_body("on-b", "node-b"))
    core.create_namespaced_pod("kube-system", pod_body("also-a", "node-a"))
    w = watch.Watch()
    events = collect(
        w.stream(
            core.list_pod_for_all_namespaces,
            field_selector="spec.nodeName=node-a",
            resource_version=rv,
            timeout_seconds=10,
        ),
        w,
        2,
    )
    assert [e["object"].metadata.name for e in events] == ["on-a", "also-a"]


def test_namespaced_watch_ignores_other_namespaces(coordination: client.CoordinationV1Api) -> None:
    rv = coordination.list_lease_for_all_namespaces().metadata.resource_version
    for ns in ("default", "kube-node-lease"):
        coordination.create_namespaced_lease(
            ns, client.V1Lease(metadata=client.V1ObjectMeta(name="l"), spec=client.V1LeaseSpec())
        )
    w = watch.Watch()
    events = collect(
        w.stream(
            coordination.list_namespaced_lease,
            "kube-node-lease",
            resource_version=rv,
            timeout_seconds=10,
        ),
        w,
        1,
    )
    assert events[0]["object"].metadata.namespace == "kube-node-lease"


def test_drop_watches_ends_open_streams(core: client.CoreV1Api, server: ThreadedAPIServer) -> None:
    resp = core.list_node(watch=True, timeout_seconds=30, _preload_content=False)
    try:
        until(lambda: server.open_watches == 1, timeout=10.0, what="the watch open")
        assert server.drop_watches() == 1
        assert resp.read() == b""  # the stream ends (no events: there are no nodes)
    finally:
        resp.close()
    until(lambda: server.open_watches == 0, timeout=10.0, what="no watch open")


def test_watch_timeout_seconds_is_honoured(
    core: client.CoreV1Api, server: ThreadedAPIServer
) -> None:
    resp = core.list_node(watch=True, timeout_seconds=1, _preload_content=False)
    try:
        assert resp.read() == b""
    finally:
        resp.close()
    # The server counts a request once its handler returned, which may be just after the
    # client saw the end of the stream.
    until(
        lambda: server.counters.count(verb="watch", resource="nodes", code=200) == 1,
        timeout=10,
        what="the watch counted once",
        interval=0.01,
        detail=lambda: repr(server.counters.snapshot()),
    )
