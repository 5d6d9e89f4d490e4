"""KubeWriter's Node writes, as the controller's service account, against both API servers
(contract suite, tests/kube/cluster.py): reads, cordon, taints and annotations with their
idempotency, the 409 of a stale resourceVersion, deletion with a uid precondition, dry runs and
the write budget. Which requests the writer made comes from the server's audit log; on the real
kube-apiserver 1.20 the controller has the shipped RBAC (deploy/base/controller-rbac.yaml and
deploy/components/delete-nodes). Evictions and Events: test_writer_eviction.py."""

from __future__ import annotations

from typing import Any

import pytest

from exporter.kube.api import KubeAPI
from exporter.kube.errors import Conflict
from exporter.kube.writer import AsyncRateLimiter, KubeWriter, event_name
from exporter.model.kube import TAINT_NODESYNC, Taint
from exporter.model.ratelimit import TokenBucket
from tests.kube.cluster import Cluster
from tests.kube.writer_support import (
    FakeClock,
    Recording,
    after_read,
    node_path,
    pod,
    pod_path,
    spec,
)

pytestmark = pytest.mark.timeout(90)

ROLLBACK = Taint(TAINT_NODESYNC, "NoSchedule")
OURS = {"key": TAINT_NODESYNC, "effect": "NoSchedule"}
GET = ("get", 200)
PATCHED = ("patch", 200)


def calls(cluster: Cluster, resource: str, name: str, **kw: Any) -> list[tuple[str, int]]:
    """The product's requests on one object: (verb, status), in order."""
    return [(r.verb, r.code) for r in cluster.requests(resource=resource, name=name, **kw)]


# ---------------------------------------------------------------- reads


async def test_get_node_and_list_pods_on_node(
    cluster: Cluster, controller_api: KubeAPI, node: str
) -> None:
    cluster.patch(node_path(cluster, node), {"spec": {"unschedulable": True}})
    pod(cluster, "here", node)
    pod(cluster, "there", cluster.unique("other-node"))
    writer = KubeWriter(controller_api)
    info = await writer.reads.get_node(node)
    assert info is not None
    assert (info.name, info.unschedulable) == (node, True)
    assert await writer.reads.get_node(cluster.unique("missing")) is None
    pods = await writer.reads.list_pods_on_node(node)
    assert [(p.name, p.phase, p.ready) for p in pods] == [("here", "Running", True)]
    await cluster.expect(lambda: calls(cluster, "nodes", node), [GET])


# ---------------------------------------------------------------- cordon, taints, annotations


async def test_cordon_and_uncordon_write_once_and_then_change_nothing(
    cluster: Cluster, controller_api: KubeAPI, node: str
) -> None:
    writer = KubeWriter(controller_api)
    first = await writer.cordon(node)
    assert (first.changed, first.dry_run) == (True, False)
    assert spec(cluster, node)["unschedulable"] is True
    second = await writer.cordon(node)
    assert (second.changed, "already" in second.detail) == (False, True)
    assert (await writer.uncordon(node)).changed
    assert "unschedulable" not in spec(cluster, node)
    assert not (await writer.uncordon(node)).changed
    # Four calls, four reads, and only the two that changed something wrote.
    await cluster.expect(
        lambda: calls(cluster, "nodes", node), [GET, PATCHED, GET, GET, PATCHED, GET]
    )


async def test_add_taint_keeps_other_taints_and_is_idempotent(
    cluster: Cluster, controller_api: KubeAPI, node: str
) -> None:
    other = {
        "key": "example.com/maintenance",
        "effect": "NoExecute",
        "timeAdded": "2026-01-01T00:00:00Z",
    }
    # A real server gave the Node its not-ready taint: it stays too.
    before = [*spec(cluster, node).get("taints", []), other]
    cluster.patch(node_path(cluster, node), {"spec": {"taints": before}})
    writer = KubeWriter(controller_api)

    assert (await writer.add_taint(node, ROLLBACK)).changed
    assert spec(cluster, node)["taints"] == [*before, OURS]
    assert not (await writer.add_taint(node, ROLLBACK)).changed
    # Same key and effect, another value: updated in place.
    assert (await writer.add_taint(node, Taint(TAINT_NODESYNC, "NoSchedule", "wave-1"))).changed
    assert spec(cluster, node)["taints"][-1] == {**OURS, "value": "wave-1"}

    assert (await writer.remove_taint(node, TAINT_NODESYNC)).changed
    assert spec(cluster, node)["taints"] == before
    assert not (await writer.remove_taint(node, TAINT_NODESYNC)).changed
    await cluster.expect(
        lambda: [c for c in calls(cluster, "nodes", node) if c != GET], [PATCHED] * 3
    )


async def test_removing_the_last_taint_leaves_none(
    cluster: Cluster, controller_api: KubeAPI, node: str
) -> None:
    cluster.patch(node_path(cluster, node), {"spec": {"taints": [OURS]}})
    assert (await KubeWriter(controller_api).remove_taint(node, TAINT_NODESYNC)).changed
    assert not spec(cluster, node).get("taints")


async def test_a_taint_write_that_lost_a_race_gets_409_reads_again_and_keeps_the_other_change(
    cluster: Cluster, node: str, controller_api: KubeAPI
) -> None:
    other = {"key": "example.com/maintenance", "effect": "NoExecute"}
    path = node_path(cluster, node)
    before = spec(cluster, node).get("taints", [])

    def someone_else_taints(reads: int) -> None:
        if reads == 1:  # between the writer's first read and its write
            cluster.patch(path, {"spec": {"taints": [*before, other]}})

    async with await after_read(cluster, someone_else_taints) as racing:
        result = await KubeWriter(racing).add_taint(node, ROLLBACK)
        assert not (await KubeWriter(racing).add_taint(node, ROLLBACK)).changed
    assert result.changed, result
    assert spec(cluster, node)["taints"] == [*before, other, OURS]
    writes = [("patch", 409), PATCHED]
    await cluster.expect(lambda: [c for c in calls(cluster, "nodes", node) if c != GET], writes)

    def someone_else_labels(reads: int) -> None:
        if reads == 1:
            cluster.patch(path, {"metadata": {"labels": {"example.com/touched": "yes"}}})

    async with await after_read(cluster, someone_else_labels) as racing:
        result = await KubeWriter(racing).remove_taint(node, TAINT_NODESYNC)
        assert result.changed, result
        assert not (await KubeWriter(racing).remove_taint(node, TAINT_NODESYNC)).changed
    live = cluster.get(path)
    assert live["spec"]["taints"] == [*before, other]
    assert live["metadata"]["labels"]["example.com/touched"] == "yes"
    await cluster.expect(lambda: [c for c in calls(cluster, "nodes", node) if c != GET], writes * 2)


async def test_a_taint_write_gives_up_when_the_node_keeps_changing(
    cluster: Cluster, node: str, controller_api: KubeAPI
) -> None:
    def always_changes(reads: int) -> None:
        cluster.patch(node_path(cluster, node), {"metadata": {"labels": {"n": str(reads)}}})

    before = spec(cluster, node).get("taints")
    async with await after_read(cluster, always_changes) as racing:
        with pytest.raises(Conflict, match="kept changing"):
            await KubeWriter(racing).add_taint(node, ROLLBACK)
    await cluster.expect(
        lambda: [c for c in calls(cluster, "nodes", node) if c != GET], [("patch", 409)] * 5
    )
    assert spec(cluster, node).get("taints") == before


async def test_annotate_node_sets_and_removes(
    cluster: Cluster, controller_api: KubeAPI, node: str
) -> None:
    cluster.patch(node_path(cluster, node), {"metadata": {"annotations": {"keep": "me"}}})
    writer = KubeWriter(controller_api)
    assert (await writer.annotate_node(node, {"a": "1", "b": "2"})).changed
    assert not (await writer.annotate_node(node, {"a": "1", "gone": None})).changed
    assert (await writer.annotate_node(node, {"a": None, "b": "3"})).changed
    annotations = cluster.get(node_path(cluster, node))["metadata"]["annotations"]
    assert annotations == {"keep": "me", "b": "3"}
    await cluster.expect(lambda: calls(cluster, "nodes", node), [GET, PATCHED, GET, GET, PATCHED])


async def test_writes_on_a_missing_node_change_nothing(
    cluster: Cluster, controller_api: KubeAPI
) -> None:
    missing = cluster.unique("missing")
    writer = KubeWriter(controller_api)
    results = [
        await writer.cordon(missing),
        await writer.uncordon(missing),
        await writer.add_taint(missing, ROLLBACK),
        await writer.remove_taint(missing, TAINT_NODESYNC),
        await writer.annotate_node(missing, {"a": "1"}),
        await writer.delete_node(missing),
    ]
    assert [r.changed for r in results] == [False] * 6
    assert all("not found" in r.detail for r in results)
    await cluster.expect(lambda: calls(cluster, "nodes", missing), [("get", 404)] * 6)


# ---------------------------------------------------------------- delete


async def test_delete_node_is_idempotent(
    cluster: Cluster, controller_api: KubeAPI, node: str
) -> None:
    uid = cluster.get(node_path(cluster, node))["metadata"]["uid"]
    writer = KubeWriter(controller_api)
    assert (await writer.delete_node(node, uid)).changed
    assert cluster.try_get(node_path(cluster, node)) is None
    again = await writer.delete_node(node, uid)
    assert (again.changed, "not found" in again.detail) == (False, True)
    await cluster.expect(
        lambda: calls(cluster, "nodes", node), [GET, ("delete", 200), ("get", 404)]
    )


async def test_delete_node_refuses_another_object_with_the_same_name(
    cluster: Cluster, controller_api: KubeAPI, node: str
) -> None:
    uid = cluster.get(node_path(cluster, node))["metadata"]["uid"]
    result = await KubeWriter(controller_api).delete_node(node, "not-" + uid)
    assert (result.changed, "another object" in result.detail) == (False, True), result
    assert cluster.try_get(node_path(cluster, node)) is not None
    await cluster.expect(lambda: calls(cluster, "nodes", node), [GET])


async def test_delete_node_precondition_holds_when_the_node_is_replaced_mid_way(
    cluster: Cluster, controller_api: KubeAPI, node: str
) -> None:
    path = node_path(cluster, node)
    uid = cluster.get(path)["metadata"]["uid"]
    replaced: list[str] = []

    def joins_again(reads: int) -> None:  # the node is deleted and joins again, with a new uid
        if reads == 1:
            cluster.delete(path)
            created = cluster.create(cluster.path("nodes"), {"metadata": {"name": node}})
            replaced.append(created["metadata"]["uid"])

    async with await after_read(cluster, joins_again) as racing:
        result = await KubeWriter(racing).delete_node(node, uid=uid)
    assert (result.changed, "replaced" in result.detail) == (False, True), result
    assert cluster.get(path)["metadata"]["uid"] == replaced[0]  # the node that joined again
    await cluster.expect(lambda: calls(cluster, "nodes", node), [GET, ("delete", 409)])

    # The precondition went with the request: the writer deletes the one it read.
    configuration = await cluster.configuration()
    async with Recording(configuration) as sent:
        done = await KubeWriter(sent).delete_node(node, uid=replaced[0])
    assert done.changed, done
    ((_, _, body),) = [x for x in sent.sent if x[0] == "DELETE"]
    assert body["preconditions"] == {"uid": replaced[0]}
    assert cluster.try_get(path) is None


# ---------------------------------------------------------------- dry run


async def test_dry_run_reads_but_writes_nothing(
    cluster: Cluster, controller_api: KubeAPI, node: str
) -> None:
    uid = cluster.get(node_path(cluster, node))["metadata"]["uid"]
    created = pod(cluster, "web", node)
    versions = (
        cluster.get(node_path(cluster, node))["metadata"]["resourceVersion"],
        cluster.get(pod_path(cluster, "web"))["metadata"]["resourceVersion"],
    )
    writer = KubeWriter(controller_api, dry_run=True)
    results = [
        await writer.cordon(node),
        await writer.add_taint(node, ROLLBACK),
        await writer.annotate_node(node, {"a": "1"}),
        await writer.delete_node(node, uid),
        await writer.events.record_event(
            kind="Node", namespace="", name=node, uid=uid, reason="R", message="m", key="k"
        ),
    ]
    assert all(r.changed and r.dry_run for r in results), results
    assert all(r.detail.startswith("dry run: would ") for r in results)
    eviction = await writer.evictions.evict(cluster.namespace, "web", created["metadata"]["uid"])
    assert (eviction.outcome, eviction.attempts, eviction.dry_run) == ("evicted", 0, True)
    # Each write but the event read the live object; nothing was sent that writes, and
    # nothing changed.
    await cluster.expect(lambda: calls(cluster, "nodes", node), [GET] * 4)
    await cluster.expect(
        lambda: calls(cluster, "pods", "web", subresource=None, namespace=cluster.namespace),
        [GET],
    )
    assert cluster.requests(resource="events", name=event_name(node, "k")) == []
    assert versions == (
        cluster.get(node_path(cluster, node))["metadata"]["resourceVersion"],
        cluster.get(pod_path(cluster, "web"))["metadata"]["resourceVersion"],
    )
    # A dry run still reports what is already so.
    assert not (await writer.uncordon(node)).changed


# ---------------------------------------------------------------- the write budget


async def test_the_write_budget_holds(cluster: Cluster, controller_api: KubeAPI, node: str) -> None:
    clock = FakeClock()
    limiter = AsyncRateLimiter(TokenBucket(2.0, 3, clock), clock=clock, sleep=clock.sleep)
    writer = KubeWriter(controller_api, limiter=limiter)
    n = 9
    for i in range(n):
        assert (await writer.annotate_node(node, {"n": str(i)})).changed
    assert clock.now >= (n - 3) / 2.0 - 1e-9
    # Writes that are not needed take no token.
    before = limiter.tokens()
    assert not (await writer.annotate_node(node, {"n": str(n - 1)})).changed
    assert not (await writer.cordon(cluster.unique("missing"))).changed
    assert limiter.tokens() == before
    await cluster.expect(
        lambda: [c for c in calls(cluster, "nodes", node) if c != GET], [PATCHED] * n
    )
