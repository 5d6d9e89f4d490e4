"""The informer against failures only the test API server can make on demand: injected 500s and
429s, a compaction without a restart, a restart on the same port in the test's loop, an object
whose fields do not have the API's types (a real server validates them on write), and a
thousand Nodes written at once under the store's lock. The informer's contract with both
servers: test_informer.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from exporter.kube.api import KubeAPI
from exporter.kube.convert import lease_info, node_info
from exporter.kube.errors import ServerError, Unreachable
from exporter.kube.informer import Informer
from exporter.kube.resources import LEASES, NODES
from exporter.metrics.kube_requests import KubeRequestMetrics
from exporter.model.kube import NodeInfo
from nodesync_sim.fake.apiserver import APIServer
from tests.kube.cluster import FAKE, Cluster
from tests.kube.conftest import FAST, Recorder, running, sample
from tests.kube.informer_support import ERRORS, EVENTS, RELISTS, WATCHES, Timeline, settle

# Every scenario here needs the test server's fault injection or store (see the docstring).
pytestmark = pytest.mark.parametrize("cluster", [FAKE], indirect=True)


def node_informer(api: KubeAPI, **kwargs: Any) -> Informer[NodeInfo]:
    return Informer(api, NODES, node_info, timing=kwargs.pop("timing", FAST), **kwargs)


def add_node(server: APIServer, name: str, **labels: str) -> None:
    server.store.create("nodes", {"metadata": {"name": name, "labels": labels}})


@asynccontextmanager
async def watching_nodes(
    cluster: Cluster, metrics: KubeRequestMetrics
) -> AsyncIterator[tuple[Informer[NodeInfo], Recorder]]:
    """A node informer running against the server, its events recorded from the end of its
    first list on."""
    events = Recorder()
    async with await cluster.client(observer=metrics) as api:
        informer = node_informer(api)
        informer.add_handler(events)
        async with running(informer):
            events.clear()
            yield informer, events


async def test_after_a_compaction_bookmarks_let_it_resume_without_a_relist(
    cluster: Cluster, registry: CollectorRegistry, metrics: KubeRequestMetrics
) -> None:
    # A lease informer for one name sees no events while other objects change; bookmarks
    # carry the server's current version, so after a compaction it resumes without a relist.
    server = cluster.fake
    async with await cluster.client(observer=metrics) as api:
        informer = Informer(
            api,
            LEASES,
            lease_info,
            namespace=cluster.namespace,
            field_selector="metadata.name=node-a",
            timing=FAST,
        )
        async with running(informer):
            for i in range(3):
                add_node(server, f"n{i}")
            current = server.store.resource_version
            await settle(
                lambda: int(informer.resource_version or "0") >= current, "a bookmark past them"
            )
            server.compact()
            watches = sample(registry, WATCHES, resource="leases")
            server.drop_watches()
            await settle(lambda: sample(registry, WATCHES, resource="leases") > watches, "rewatch")
            server.store.create(
                "leases",
                {"metadata": {"name": "node-a"}, "spec": {"holderIdentity": "node-a"}},
                namespace=cluster.namespace,
            )
            await settle(lambda: f"{cluster.namespace}/node-a" in informer.store, "the lease")
    assert sample(registry, RELISTS, resource="leases") == 0
    assert sample(registry, ERRORS, resource="leases", verb="watch", code="410") == 0


async def test_a_compaction_while_watching_relists_and_reports_the_difference(
    cluster: Cluster, registry: CollectorRegistry, metrics: KubeRequestMetrics
) -> None:
    server = cluster.fake
    for name in ("n1", "n2", "n3"):
        add_node(server, name)
    async with watching_nodes(cluster, metrics) as (informer, events):
        # Without yielding to the loop: the open watch cannot see these before the
        # compaction, so the informer gets 410 Expired and must learn them from a new list.
        server.store.delete("nodes", "n2")
        server.store.patch("nodes", "n1", {"metadata": {"labels": {"zone": "b"}}})
        add_node(server, "n4")
        server.compact()

        await settle(lambda: sorted(informer.store) == ["n1", "n3", "n4"], "the relist")
        assert events.names() == [("DELETED", "n2"), ("MODIFIED", "n1"), ("ADDED", "n4")]
        assert informer.store["n1"].labels == {"zone": "b"}
        assert sample(registry, RELISTS, resource="nodes") == 1
        assert sample(registry, ERRORS, resource="nodes", verb="watch", code="410") == 1
        assert sample(registry, EVENTS, resource="nodes", type="ERROR") == 1

        # and it watches again from the new list's version
        events.clear()
        add_node(server, "n5")
        await settle(lambda: events.names() == [("ADDED", "n5")], "n5 after the relist")
    count = "nodesync_kube_request_duration_seconds_count"
    assert sample(registry, count, resource="nodes", verb="list") == 2


async def test_server_errors_mark_it_down_until_the_server_recovers(
    cluster: Cluster, registry: CollectorRegistry, metrics: KubeRequestMetrics
) -> None:
    server = cluster.fake
    add_node(server, "n1")
    async with watching_nodes(cluster, metrics) as (informer, events):
        server.faults.fail_next(10_000, 500, verb="watch")
        server.drop_watches()
        await settle(lambda: not informer.up, "down")
        assert isinstance(informer.last_error, ServerError)
        add_node(server, "n2")  # while the watch keeps failing

        server.faults.clear()
        await settle(lambda: informer.up, "up again")
        add_node(server, "n3")
        await settle(lambda: len(events.events) == 2, "the changes made while down and after")
    assert events.names() == [("ADDED", "n2"), ("ADDED", "n3")]
    failed = server.counters.count(verb="watch", resource="nodes", code=500)
    assert failed >= 1
    assert sample(registry, ERRORS, resource="nodes", verb="watch", code="500") == failed
    assert sample(registry, RELISTS, resource="nodes") == 0, "resumed, not relisted"


async def test_too_many_requests_waits_for_retry_after(
    cluster: Cluster, metrics: KubeRequestMetrics, registry: CollectorRegistry
) -> None:
    cluster.fake.faults.fail_next(1, 429, verb="list", retry_after=1)
    timeline = Timeline(metrics)
    async with await cluster.client() as api:
        informer = node_informer(api, observer=timeline)  # backoff alone: a retry in ~0.02 s
        async with running(informer):
            lists = [(t, code) for t, verb, code in timeline.requests if verb == "list"]
    assert [code for _, code in lists] == ["429", "200"]
    assert lists[1][0] - lists[0][0] >= 1.0
    assert sample(registry, ERRORS, resource="nodes", verb="list", code="429") == 1


async def test_server_restarted_on_the_same_port(
    cluster: Cluster, metrics: KubeRequestMetrics, registry: CollectorRegistry
) -> None:
    server = cluster.fake
    add_node(server, "n1")
    async with watching_nodes(cluster, metrics) as (informer, events):
        await server.stop()
        await settle(lambda: isinstance(informer.last_error, Unreachable), "unreachable")
        assert not informer.up
        add_node(server, "n2")  # the store outlives the process, as etcd would

        async with APIServer(port=server.port, token=server.token, store=server.store):
            await settle(lambda: informer.up, "up after the restart")
            add_node(server, "n3")
            await settle(lambda: len(events.events) == 2, "n2 and n3")
    assert events.names() == [("ADDED", "n2"), ("ADDED", "n3")]
    assert sample(registry, ERRORS, resource="nodes", verb="watch", code="unreachable") >= 1
    assert sample(registry, RELISTS, resource="nodes") == 0


async def test_a_malformed_object_is_skipped_and_counted(
    cluster: Cluster, registry: CollectorRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    """One Node whose fields do not have the API's types (the store takes it unchecked) is
    skipped, in the list and in the watch, and the log names the field; the rest is served."""
    server = cluster.fake
    add_node(server, "good1")
    server.store.create("nodes", {"metadata": {"name": "bad"}, "spec": {"unschedulable": "yes"}})
    add_node(server, "good2")
    events = Recorder()
    async with await cluster.client(observer=KubeRequestMetrics(registry)) as api:
        informer = node_informer(api)
        informer.add_handler(events)
        async with running(informer):
            assert sorted(informer.store) == ["good1", "good2"]
            skipped = "nodesync_informer_skipped_objects_total"
            assert sample(registry, skipped, resource="nodes") == 1
            assert "'bad': $.spec.unschedulable: expected `bool | null`, got `str`" in caplog.text
            events.clear()
            # A good object turning bad keeps its last good state; deleting it is still seen.
            server.store.patch("nodes", "good1", {"spec": {"taints": [{"key": 7}]}})
            server.store.patch("nodes", "good2", {"metadata": {"labels": {"zone": "c"}}})
            await settle(lambda: bool(informer.store["good2"].labels), "good2 modified")
            assert informer.store["good1"].taints == ()
            assert "'good1': $.spec.taints[0].key: expected `str`, got `int`" in caplog.text
            server.store.delete("nodes", "good1")
            server.store.delete("nodes", "bad")
            await settle(lambda: "good1" not in informer.store, "good1 deleted")
    assert events.names() == [("MODIFIED", "good2"), ("DELETED", "good1")]
    assert sample(registry, skipped, resource="nodes") == 2


async def test_many_objects_are_all_in_the_store_once_synced(cluster: Cluster) -> None:
    """How fast is bench.controller_sync's to say (docs/performance.md); here: all of them."""
    server = cluster.fake
    with server.store.lock:
        for i in range(1000):
            add_node(server, f"node-{i:04d}")
    async with await cluster.client() as api:
        informer = node_informer(api)
        async with running(informer):
            assert len(informer.store) == 1000
            names = {n.name for n in informer.store.values()}
            assert names == {f"node-{i:04d}" for i in range(1000)}
