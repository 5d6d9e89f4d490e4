"""The informer against both API servers (contract suite, tests/kube/cluster.py): the first list
(from the real server's watch cache), the watch with bookmarks, every change handed to the
handlers once and in an order that fits, selectors, the relist after 410 Expired once the
history is gone, a revoked token, and a stopped informer's watch connection closed at once.
Failures only the test server can make: test_informer_faults.py.

What 1.20 does with bookmarks (observed): it sends one about 2 s before a watch's timeoutSeconds
ends, and otherwise about once a minute, and only when the resource's version has moved past
the watch's (writes to other objects of the kind). With a short watch timeout one arrives
within seconds, which is what these tests use; the product's 5-10 min watches get them at the
end and every minute. The test server sends one every 0.1 s (tests/kube/conftest.py)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from exporter.kube.api import KubeAPI
from exporter.kube.convert import lease_info, node_info, pod_info
from exporter.kube.errors import Unauthorized
from exporter.kube.informer import Informer, InformerTiming
from exporter.kube.resources import LEASES, NODES, PODS
from exporter.metrics.kube_requests import KubeRequestMetrics
from exporter.model.kube import LeaseInfo, NodeInfo, PodInfo
from tests.kube.cluster import FAKE, REAL, Cluster
from tests.kube.conftest import FAST, Recorder, running, sample
from tests.kube.informer_support import (
    CASE,
    ERRORS,
    EVENTS,
    RELISTS,
    WATCHES,
    GatedAPI,
    Timeline,
    WatchRecorder,
    cluster_versions,
    label,
    labelled_node,
    replay,
    settle,
    versions,
)
from tests.support.wait import until_async

pytestmark = pytest.mark.timeout(90)

LIST_COUNT = "nodesync_kube_request_duration_seconds_count"


def node_informer(api: KubeAPI, case: str, **kwargs: Any) -> Informer[NodeInfo]:
    timing = kwargs.pop("timing", FAST)
    selector = f"{CASE}={case}"
    return Informer(api, NODES, node_info, label_selector=selector, timing=timing, **kwargs)


# ---------------------------------------------------------------- list and watch


async def test_list_then_watch_sees_added_modified_deleted(
    cluster: Cluster, registry: CollectorRegistry, metrics: KubeRequestMetrics
) -> None:
    case = cluster.unique("inf")
    n1, n2, n3 = (f"{case}-{i}" for i in (1, 2, 3))
    labelled_node(cluster, n1, case)
    labelled_node(cluster, n2, case)
    events = Recorder()
    async with await cluster.client(observer=metrics) as api:
        informer = node_informer(api, case)
        informer.add_handler(events)
        assert (informer.synced, informer.up, informer.last_success) == (False, False, None)
        async with running(informer):
            # A list from the real server's watch cache may be a moment behind etcd: the
            # Nodes come with it or, right after, from the watch.
            await settle(lambda: sorted(informer.store) == [n1, n2], "the first two Nodes")
            assert sorted(events.names()) == [("ADDED", n1), ("ADDED", n2)]
            assert informer.up
            assert informer.last_success is not None
            events.clear()

            label(cluster, n1, "a")
            cluster.delete(cluster.path("nodes", n2))
            labelled_node(cluster, n3, case)
            await settle(lambda: len(events.events) == 3, "three watch events")

    assert events.names() == [("MODIFIED", n1), ("DELETED", n2), ("ADDED", n3)]
    (_, old, new), (_, gone, none), _ = events.events
    assert (old.labels.get("nodesync.test/step"), new.labels["nodesync.test/step"]) == (None, "a")
    assert (gone.name, none) == (n2, None)
    assert versions(informer) == cluster_versions(cluster, case)
    assert int(informer.resource_version or "0") >= int(informer.store[n3].resource_version)
    for kind in ("MODIFIED", "DELETED", "ADDED"):
        assert sample(registry, EVENTS, resource="nodes", type=kind) == 1
    assert sample(registry, LIST_COUNT, resource="nodes", verb="list") == 1


async def test_a_burst_of_changes_ends_equal_to_the_server_and_the_list_is_from_the_cache(
    cluster: Cluster, registry: CollectorRegistry, metrics: KubeRequestMetrics
) -> None:
    case = cluster.unique("inf")
    names = [f"{case}-{i:02d}" for i in range(13)]
    for name in names[:3]:
        labelled_node(cluster, name, case)
    events = Recorder()
    async with await cluster.client(observer=metrics) as api:
        informer = Informer(api, NODES, node_info, label_selector=f"{CASE}={case}")
        informer.add_handler(events)
        async with running(informer):
            listed_rv = informer.resource_version
            initial = cluster_versions(cluster, case)
            await settle(lambda: versions(informer) == initial, "the first three Nodes")
            listed = versions(informer)
            assert sorted(events.names()) == [("ADDED", n) for n in names[:3]]
            events.clear()

            def burst() -> None:  # from another thread: the informer keeps up meanwhile
                for name in names[3:]:
                    labelled_node(cluster, name, case)
                for i, name in enumerate([*names[:5], names[0]]):
                    label(cluster, name, str(i))
                for name in (names[1], *names[9:]):
                    cluster.delete(cluster.path("nodes", name))

            await asyncio.to_thread(burst)
            expected = cluster_versions(cluster, case)
            assert sorted(expected) == sorted({*names} - {names[1], *names[9:]})
            await settle(lambda: versions(informer) == expected, "the store to equal the server")

    # Every change reached the handlers once, in an order that fits, and nothing else did.
    assert replay(events, listed) == expected
    for kind, count in (("ADDED", 10), ("MODIFIED", 6), ("DELETED", 5), ("ERROR", 0)):
        assert [t for t, _, _ in events.events].count(kind) == count
        assert sample(registry, EVENTS, resource="nodes", type=kind) == count
    assert sample(registry, RELISTS, resource="nodes") == 0

    # The first list was served from the watch cache (resourceVersion=0), and the watch
    # resumed from the list's version with bookmarks allowed (seen once it ended).
    def selected(verb: str) -> list[dict[str, str]]:
        found = cluster.requests(verb=verb, resource="nodes")
        return [r.query for r in found if r.query.get("labelSelector") == f"{CASE}={case}"]

    await until_async(lambda: selected("watch"), timeout=10, what="the watch, ended")
    (first_list,) = selected("list")
    assert first_list["resourceVersion"] == "0"
    watch = selected("watch")[0]
    assert watch["resourceVersion"] == listed_rv
    assert watch["allowWatchBookmarks"] == "true"
    assert 300 <= int(watch["timeoutSeconds"]) <= 600


async def test_handler_added_after_sync_gets_the_store_and_a_failing_handler_is_contained(
    cluster: Cluster,
) -> None:
    case = cluster.unique("inf")
    n1, n2 = labelled_node(cluster, f"{case}-1", case), f"{case}-2"

    def broken(type_: str, old: Any, new: Any) -> None:
        raise RuntimeError("handler bug")

    async with await cluster.client() as api:
        informer = node_informer(api, case)
        informer.add_handler(broken)
        async with running(informer):
            await settle(lambda: list(informer.store) == [n1], "n1")
            late = Recorder()
            informer.add_handler(late)
            assert late.names() == [("ADDED", n1)]
            labelled_node(cluster, n2, case)
            await settle(lambda: late.names() == [("ADDED", n1), ("ADDED", n2)], "n2")
            assert sorted(informer.store) == [n1, n2]


# ---------------------------------------------------------------- bookmarks and relists


async def test_bookmarks_move_the_version_past_writes_to_other_objects(
    cluster: Cluster, registry: CollectorRegistry, metrics: KubeRequestMetrics
) -> None:
    collection = cluster.path("leases", namespace=cluster.namespace)
    # Watches of 3-6 s: 1.20 sends the bookmark about 2 s before each one ends (the test
    # server sends them all along: its watches may be shorter, for a next watch sooner).
    timing = InformerTiming(watch_timeout_seconds={FAKE: 1.0, REAL: 3.0}[cluster.kind])
    written: list[int] = []
    stop = asyncio.Event()

    async def write_other_leases() -> None:
        # Other Leases of the namespace, none of them this watch's, written all along: 1.20
        # bookmarks only what changed after a watch started.
        while not stop.is_set():
            body = {"metadata": {"name": f"other-{len(written)}"}}
            lease = await asyncio.to_thread(cluster.create, collection, body)
            written.append(int(lease["metadata"]["resourceVersion"]))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)

    async with WatchRecorder(await cluster.configuration(), observer=metrics) as api:
        informer = Informer(
            api,
            LEASES,
            lease_info,
            namespace=cluster.namespace,
            field_selector="metadata.name=not-there",
            timing=timing,
        )
        async with running(informer):
            listed = int(informer.resource_version or "0")
            writer = asyncio.create_task(write_other_leases())
            try:
                await settle(lambda: written, "the first write")
                first = written[0]
                assert first > listed
                await settle(
                    lambda: int(informer.resource_version or "0") >= first,
                    "a bookmark past the other Leases' writes",
                    within=20,
                )
                assert informer.store == {}
                assert sample(registry, EVENTS, resource="leases", type="BOOKMARK") >= 1
                assert sample(registry, EVENTS, resource="leases", type="ADDED") == 0

                # The next watch resumes from the bookmark's version, not from the list's.
                # (Waiting for the server's answer to it, not just for the request: the test
                # then ends with that watch open, never in the middle of its TLS handshake,
                # which a cancellation would leave unclosed when the loop ends.)
                await settle(
                    lambda: any(int(rv) >= first for rv in api.watched[1:]),
                    "a watch from the bookmark's version",
                    within=20,
                )
                assert api.watched[0] == str(listed)
            finally:
                stop.set()
                await writer
            assert informer.store == {}
    assert sample(registry, RELISTS, resource="leases") == 0


async def test_expired_history_relists_and_hands_the_gap_to_the_handlers(
    own_cluster: Cluster, registry: CollectorRegistry, metrics: KubeRequestMetrics
) -> None:
    cluster = own_cluster
    case = "relist"
    a, b, c, d, e, f = (f"{case}-{x}" for x in "abcdef")
    for name in (a, b, c, d):
        labelled_node(cluster, name, case)
    events = Recorder()
    async with GatedAPI(await cluster.configuration(), observer=metrics) as api:
        # Watches of 5-10 min, as the product's: a bookmark (1.20 sends one each minute) would
        # move the informer past the write below, which it must not know when the history goes.
        informer = Informer(api, NODES, node_info, label_selector=f"{CASE}={case}")
        informer.add_handler(events)
        async with running(informer):
            label(cluster, a, "seen")  # a watch event: the informer is past its list's version
            await settle(lambda: ("MODIFIED", a) in events.names(), "the watch event")
            before = versions(informer)
            # A write the informer does not watch: the server's version moves past the
            # informer's, so that once the history is gone its version is too old (without
            # it, a restarted watch cache starts exactly at the informer's version).
            labelled_node(cluster, f"{case}-other", "other")

            # Forget the history: every version the informer knows is gone.
            api.gate.clear()
            await cluster.expire_history()
            await settle(lambda: api.waiting == 1, "the informer to try again", within=30)
            events.clear()
            label(cluster, b, "gap")
            cluster.delete(cluster.path("nodes", c))
            labelled_node(cluster, e, case)
            expected = cluster_versions(cluster, case)
            api.gate.set()

            await settle(lambda: versions(informer) == expected, "the relist", within=15)
            assert sorted(events.names()) == [("ADDED", e), ("DELETED", c), ("MODIFIED", b)]
            # After the relist it watches from the new list's version: the next change is the
            # next event, and nothing of the gap comes again.
            labelled_node(cluster, f, case)
            await settle(lambda: f in informer.store, "the change after the relist")
            assert sorted(events.names()[:3]) == [("ADDED", e), ("DELETED", c), ("MODIFIED", b)]
            assert events.names()[3:] == [("ADDED", f)]
            assert replay(events, before) == cluster_versions(cluster, case)

    assert sample(registry, RELISTS, resource="nodes") == 1
    assert sample(registry, EVENTS, resource="nodes", type="ERROR") == 1
    assert sample(registry, ERRORS, resource="nodes", verb="watch", code="410") == 1
    # Two lists: the first from the watch cache, the relist a consistent read (never older
    # than what the informer had seen).
    lists = [
        r.query
        for r in cluster.requests(verb="list", resource="nodes")
        if r.query.get("labelSelector") == f"{CASE}={case}"
    ]
    assert [x.get("resourceVersion", "") for x in lists] == ["0", ""]


# ---------------------------------------------------------------- selectors


async def test_field_selector_on_node_name(cluster: Cluster) -> None:
    here, there = cluster.unique("node"), cluster.unique("node")
    other = cluster.unique("ns")
    cluster.create(cluster.path("namespaces"), {"metadata": {"name": other}})

    def pod(name: str, node: str, namespace: str = cluster.namespace) -> None:
        body = {
            "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
        }
        cluster.create(cluster.path("pods", namespace=namespace), body)

    pod("a1", here)
    pod("b1", there)
    events = Recorder()
    async with await cluster.client() as api:
        informer: Informer[PodInfo] = Informer(
            api, PODS, pod_info, field_selector=f"spec.nodeName={here}", timing=FAST
        )
        informer.add_handler(events)
        async with running(informer):
            await settle(lambda: list(informer.store) == [f"{cluster.namespace}/a1"], "a1")
            events.clear()
            pod("b2", there)
            pod("a2", here, other)
            cluster.delete(cluster.path("pods", "a1", cluster.namespace))
            await settle(lambda: len(events.events) == 3, "a2 added, a1 deleted")
    # A pod's deletion is written first (deletionTimestamp, grace 0), then done.
    assert events.names() == [("ADDED", "a2"), ("MODIFIED", "a1"), ("DELETED", "a1")]
    assert list(informer.store) == [f"{other}/a2"]
    assert informer.store[f"{other}/a2"].node_name == here


async def test_field_selector_on_name_follows_one_lease(cluster: Cluster) -> None:
    namespace = cluster.namespace
    for name in ("node-a", "node-b"):
        body = {"metadata": {"name": name}, "spec": {"renewTime": "2024-05-01T10:00:00.000000Z"}}
        cluster.create(cluster.path("leases", namespace=namespace), body)
    async with await cluster.client() as api:
        informer: Informer[LeaseInfo] = Informer(
            api,
            LEASES,
            lease_info,
            namespace=namespace,
            field_selector="metadata.name=node-a",
            timing=FAST,
        )
        key = f"{namespace}/node-a"
        async with running(informer):
            await settle(lambda: list(informer.store) == [key], "node-a's Lease")
            for name in ("node-b", "node-a"):
                renewed = {"spec": {"renewTime": "2024-05-01T10:00:10.500000Z"}}
                cluster.patch(cluster.path("leases", name, namespace), renewed)
            await settle(lambda: informer.store[key].renew_time == 1714557610.5, "the renewal")
    assert list(informer.store) == [key]


# ---------------------------------------------------------------- the client's side


async def test_unauthorized_informer_stays_down_and_counts(
    cluster: Cluster, metrics: KubeRequestMetrics, registry: CollectorRegistry
) -> None:
    configuration = await cluster.configuration()
    configuration.api_key = {"authorization": "Bearer revoked"}
    async with KubeAPI(configuration, observer=metrics) as api:
        informer = node_informer(api, "unauthorized")
        async with running(informer, synced=False):
            await settle(
                lambda: sample(registry, ERRORS, resource="nodes", verb="list", code="401") >= 2,
                "retried with backoff",
            )
            assert isinstance(informer.last_error, Unauthorized)
            assert (informer.up, informer.synced) == (False, False)


async def test_a_stopped_informer_closes_its_watch_connection_at_once(
    cluster: Cluster, registry: CollectorRegistry, metrics: KubeRequestMetrics
) -> None:
    # As at shutdown: the informer is cancelled mid-watch, the client closed, and the event loop
    # ends. A graceful TLS close of the watch's connection waits for the server's answer in the
    # background, outside the connection pool (which aborts what it holds when the client
    # closes), and leaves the socket open if the loop ends first (ResourceWarning: unclosed
    # transport). The connection must be gone once the cancelled informer has ended.
    async with await cluster.client(observer=metrics) as api:
        informer = Informer(api, LEASES, lease_info, namespace=cluster.namespace)
        async with running(informer):
            await settle(lambda: sample(registry, WATCHES, resource="leases") == 1, "the watch")
            assert cluster.connections() == ["ESTABLISHED"]
        assert cluster.connections() == []


class LateRandom(random.Random):
    """Always draws the top of a range: the longest jitter."""

    def uniform(self, a: float, b: float) -> float:
        return b


async def test_initial_jitter_delays_the_first_list(
    cluster: Cluster, metrics: KubeRequestMetrics, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("exporter.kube.informer.random.Random", LateRandom)
    timeline = Timeline(metrics)
    async with await cluster.client() as api:
        informer = node_informer(api, "jitter", initial_jitter_seconds=0.5, observer=timeline)
        started = time.monotonic()
        async with running(informer):
            first = timeline.requests[0]
    assert first[1] == "list"
    assert first[0] - started >= 0.5


async def test_an_unexpected_error_is_retried_not_fatal(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = cluster.unique("inf")
    n1 = labelled_node(cluster, f"{case}-1", case)
    async with await cluster.client() as api:
        real_list = api.list
        calls = 0

        async def flaky_list(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise RuntimeError("a bug")
            return await real_list(*args, **kwargs)

        monkeypatch.setattr(api, "list", flaky_list)
        informer = node_informer(api, case)
        async with running(informer):
            await settle(lambda: list(informer.store) == [n1], "n1")
            assert informer.up
    assert calls == 2
    assert informer.last_error is not None
    assert informer.last_error.reason == "RuntimeError"
