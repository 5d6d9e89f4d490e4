"""The informer against the test API server: list+watch, bookmarks, 410 relists, failures."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from exporter.kube import resources
from exporter.kube.api import KubeAPI
from exporter.kube.convert import lease_info, node_info, pod_info
from exporter.kube.errors import ServerError, Unauthorized, Unreachable
from exporter.kube.informer import Informer
from exporter.metrics.kube_requests import KubeRequestMetrics
from exporter.model.kube import LEASE_NAMESPACE, LeaseInfo, NodeInfo, PodInfo
from nodesync_sim.fake.apiserver import APIServer
from tests.kube.conftest import FAST, Recorder, eventually, running, sample

ERRORS = "nodesync_kube_request_errors_total"
EVENTS = "nodesync_informer_watch_events_total"
RELISTS = "nodesync_informer_relists_total"
WATCHES = "nodesync_kube_watches_total"


def node_informer(api: KubeAPI, **kwargs: Any) -> Informer[NodeInfo]:
    return Informer(api, resources.NODES, node_info, timing=kwargs.pop("timing", FAST), **kwargs)


def add_node(server: APIServer, name: str, **labels: str) -> None:
    server.store.create("nodes", {"metadata": {"name": name, "labels": labels}})


async def test_list_then_watch_sees_added_modified_deleted(
    api: KubeAPI, server: APIServer, registry: CollectorRegistry
) -> None:
    add_node(server, "n1")
    add_node(server, "n2")
    informer = node_informer(api)
    events = Recorder()
    informer.add_handler(events)
    assert (informer.synced, informer.up, informer.last_success) == (False, False, None)
    async with running(informer):
        assert sorted(informer.store) == ["n1", "n2"]
        assert events.names() == [("ADDED", "n1"), ("ADDED", "n2")]
        assert informer.up
        assert informer.last_success is not None
        events.clear()

        server.store.patch("nodes", "n1", {"metadata": {"labels": {"zone": "a"}}})
        server.store.delete("nodes", "n2")
        add_node(server, "n3")
        await eventually(lambda: len(events.events) == 3, "three watch events")

    assert events.names() == [("MODIFIED", "n1"), ("DELETED", "n2"), ("ADDED", "n3")]
    (_, old, new), (_, gone, none), _ = events.events
    assert (dict(old.labels), dict(new.labels)) == ({}, {"zone": "a"})
    assert (gone.name, none) == ("n2", None)
    assert sorted(informer.store) == ["n1", "n3"]
    assert informer.store["n1"].labels == {"zone": "a"}
    assert informer.resource_version == str(server.store.resource_version)
    for kind in ("MODIFIED", "DELETED", "ADDED"):
        assert sample(registry, EVENTS, resource="nodes", type=kind) == 1
    assert sample(registry, "nodesync_kube_request_duration_seconds_count", resource="nodes",
                  verb="list") == 1  # fmt: skip


async def test_handler_added_after_sync_gets_the_store_and_a_failing_handler_is_contained(
    api: KubeAPI, server: APIServer
) -> None:
    add_node(server, "n1")
    informer = node_informer(api)

    def broken(type_: str, old: Any, new: Any) -> None:
        raise RuntimeError("handler bug")

    informer.add_handler(broken)
    async with running(informer):
        late = Recorder()
        informer.add_handler(late)
        assert late.names() == [("ADDED", "n1")]
        add_node(server, "n2")
        await eventually(lambda: late.names() == [("ADDED", "n1"), ("ADDED", "n2")], "n2")
        assert sorted(informer.store) == ["n1", "n2"]


async def test_bookmarks_advance_the_resource_version(
    api: KubeAPI, server: APIServer, registry: CollectorRegistry
) -> None:
    # A lease informer for one node sees no events while other objects change; bookmarks
    # carry the server's current version, so after a compaction it resumes without a relist.
    informer = Informer(
        api,
        resources.LEASES,
        lease_info,
        namespace=LEASE_NAMESPACE,
        field_selector="metadata.name=node-a",
        timing=FAST,
    )
    async with running(informer):
        listed = int(informer.resource_version or "0")
        for i in range(3):
            add_node(server, f"n{i}")
        current = server.store.resource_version
        assert current > listed
        await eventually(
            lambda: int(informer.resource_version or "0") >= current, "a bookmark past the writes"
        )
        assert sample(registry, EVENTS, resource="leases", type="BOOKMARK") >= 1
        assert informer.store == {}

        server.compact()
        watches = sample(registry, WATCHES, resource="leases")
        server.drop_watches()
        await eventually(lambda: sample(registry, WATCHES, resource="leases") > watches, "rewatch")
        server.store.create(
            "leases",
            {"metadata": {"name": "node-a"}, "spec": {"holderIdentity": "node-a"}},
            namespace=LEASE_NAMESPACE,
        )
        await eventually(lambda: "kube-node-lease/node-a" in informer.store, "the lease")
    assert sample(registry, RELISTS, resource="leases") == 0
    assert sample(registry, ERRORS, resource="leases", verb="watch", code="410") == 0


async def test_compaction_relists_and_reports_the_difference(
    api: KubeAPI, server: APIServer, registry: CollectorRegistry
) -> None:
    for name in ("n1", "n2", "n3"):
        add_node(server, name)
    informer = node_informer(api)
    events = Recorder()
    informer.add_handler(events)
    async with running(informer):
        events.clear()
        # Without yielding to the loop: the open watch cannot see these before the compaction,
        # so the informer gets 410 Expired and must learn them from a new list.
        server.store.delete("nodes", "n2")
        server.store.patch("nodes", "n1", {"metadata": {"labels": {"zone": "b"}}})
        add_node(server, "n4")
        server.compact()

        await eventually(lambda: sorted(informer.store) == ["n1", "n3", "n4"], "the relist")
        assert events.names() == [("DELETED", "n2"), ("MODIFIED", "n1"), ("ADDED", "n4")]
        assert informer.store["n1"].labels == {"zone": "b"}
        assert sample(registry, RELISTS, resource="nodes") == 1
        assert sample(registry, ERRORS, resource="nodes", verb="watch", code="410") == 1
        assert sample(registry, EVENTS, resource="nodes", type="ERROR") == 1

        # and it watches again from the new list's version
        events.clear()
        add_node(server, "n5")
        await eventually(lambda: events.names() == [("ADDED", "n5")], "n5 after the relist")
    assert sample(registry, "nodesync_kube_request_duration_seconds_count", resource="nodes",
                  verb="list") == 2  # fmt: skip


async def test_server_errors_mark_it_down_until_the_server_recovers(
    api: KubeAPI, server: APIServer, registry: CollectorRegistry
) -> None:
    add_node(server, "n1")
    informer = node_informer(api)
    events = Recorder()
    informer.add_handler(events)
    async with running(informer):
        events.clear()
        server.faults.fail_next(10_000, 500, verb="watch")
        server.drop_watches()
        await eventually(lambda: not informer.up, "down")
        assert isinstance(informer.last_error, ServerError)
        add_node(server, "n2")  # while the watch keeps failing

        server.faults.clear()
        await eventually(lambda: informer.up, "up again")
        add_node(server, "n3")
        await eventually(lambda: len(events.events) == 2, "the changes made while down and after")
    assert events.names() == [("ADDED", "n2"), ("ADDED", "n3")]
    failed = server.counters.count(verb="watch", resource="nodes", code=500)
    assert failed >= 1
    assert sample(registry, ERRORS, resource="nodes", verb="watch", code="500") == failed
    assert sample(registry, RELISTS, resource="nodes") == 0, "resumed, not relisted"


class Timeline:
    """Observer that records when each request finished, then forwards to the metrics."""

    def __init__(self, metrics: KubeRequestMetrics) -> None:
        self.metrics = metrics
        self.requests: list[tuple[float, str, str]] = []

    def observe_request(self, resource: str, verb: str, duration_seconds: float, code: str) -> None:
        self.requests.append((time.monotonic(), verb, code))
        self.metrics.observe_request(resource, verb, duration_seconds, code)

    def observe_watch_event(self, resource: str, event_type: str) -> None:
        self.metrics.observe_watch_event(resource, event_type)

    def observe_relist(self, resource: str) -> None:
        self.metrics.observe_relist(resource)

    def observe_skipped_object(self, resource: str) -> None:
        self.metrics.observe_skipped_object(resource)


async def test_too_many_requests_waits_for_retry_after(
    api: KubeAPI, server: APIServer, metrics: KubeRequestMetrics, registry: CollectorRegistry
) -> None:
    server.faults.fail_next(1, 429, verb="list", retry_after=1)
    timeline = Timeline(metrics)
    informer = node_informer(api, observer=timeline)  # backoff alone would retry in ~0.02 s
    async with running(informer):
        lists = [(t, code) for t, verb, code in timeline.requests if verb == "list"]
    assert [code for _, code in lists] == ["429", "200"]
    assert lists[1][0] - lists[0][0] >= 1.0
    assert sample(registry, ERRORS, resource="nodes", verb="list", code="429") == 1


async def test_server_restarted_on_the_same_port(
    server: APIServer, metrics: KubeRequestMetrics, registry: CollectorRegistry
) -> None:
    add_node(server, "n1")
    events = Recorder()
    async with KubeAPI(server.aio_configuration(), observer=metrics) as api:
        informer = node_informer(api)
        informer.add_handler(events)
        async with running(informer):
            events.clear()
            await server.stop()
            await eventually(lambda: isinstance(informer.last_error, Unreachable), "unreachable")
            assert not informer.up
            add_node(server, "n2")  # the store outlives the process, as etcd would

            async with APIServer(port=server.port, token=server.token, store=server.store):
                await eventually(lambda: informer.up, "up after the restart")
                add_node(server, "n3")
                await eventually(lambda: len(events.events) == 2, "n2 and n3")
    assert events.names() == [("ADDED", "n2"), ("ADDED", "n3")]
    assert sample(registry, ERRORS, resource="nodes", verb="watch", code="unreachable") >= 1
    assert sample(registry, RELISTS, resource="nodes") == 0


async def test_field_selector_on_node_name(api: KubeAPI, server: APIServer) -> None:
    def pod(name: str, node: str) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"nodeName": node, "containers": []}}

    server.store.create("pods", pod("a1", "node-a"), namespace="default")
    server.store.create("pods", pod("b1", "node-b"), namespace="default")
    informer: Informer[PodInfo] = Informer(
        api, resources.PODS, pod_info, field_selector="spec.nodeName=node-a", timing=FAST
    )
    events = Recorder()
    informer.add_handler(events)
    async with running(informer):
        assert list(informer.store) == ["default/a1"]
        events.clear()
        server.store.create("pods", pod("b2", "node-b"), namespace="default")
        server.store.create("pods", pod("a2", "node-a"), namespace="kube-system")
        server.store.delete("pods", "a1", namespace="default", grace_period_seconds=0)
        await eventually(lambda: len(events.events) == 2, "a2 added, a1 deleted")
    assert events.names() == [("ADDED", "a2"), ("DELETED", "a1")]
    assert list(informer.store) == ["kube-system/a2"]
    assert informer.store["kube-system/a2"].node_name == "node-a"


async def test_field_selector_on_name_follows_one_lease(api: KubeAPI, server: APIServer) -> None:
    for node in ("node-a", "node-b"):
        server.store.create(
            "leases",
            {"metadata": {"name": node}, "spec": {"renewTime": "2024-05-01T10:00:00.000000Z"}},
            namespace=LEASE_NAMESPACE,
        )
    informer: Informer[LeaseInfo] = Informer(
        api,
        resources.LEASES,
        lease_info,
        namespace=LEASE_NAMESPACE,
        field_selector="metadata.name=node-a",
        timing=FAST,
    )
    async with running(informer):
        assert list(informer.store) == ["kube-node-lease/node-a"]
        for node in ("node-b", "node-a"):
            server.store.patch(
                "leases",
                node,
                {"spec": {"renewTime": "2024-05-01T10:00:10.500000Z"}},
                namespace=LEASE_NAMESPACE,
            )
        key = "kube-node-lease/node-a"
        await eventually(lambda: informer.store[key].renew_time == 1714557610.5, "the renewal")
    assert list(informer.store) == [key]


async def test_unauthorized_informer_stays_down_and_counts(
    server: APIServer, metrics: KubeRequestMetrics, registry: CollectorRegistry
) -> None:
    async with KubeAPI(server.aio_configuration(token="revoked"), observer=metrics) as api:
        informer = node_informer(api)
        async with running(informer, synced=False):
            await eventually(
                lambda: sample(registry, ERRORS, resource="nodes", verb="list", code="401") >= 2,
                "retried with backoff",
            )
            assert isinstance(informer.last_error, Unauthorized)
            assert (informer.up, informer.synced) == (False, False)


async def test_a_malformed_object_is_skipped_and_counted(
    api: KubeAPI, server: APIServer, registry: CollectorRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    """One Node whose fields do not have the API's types (the store takes it unchecked) is
    skipped, in the list and in the watch, and the log names the field; the rest is served."""
    add_node(server, "good1")
    server.store.create("nodes", {"metadata": {"name": "bad"}, "spec": {"unschedulable": "yes"}})
    add_node(server, "good2")
    informer = node_informer(api)
    events = Recorder()
    informer.add_handler(events)
    async with running(informer):
        assert sorted(informer.store) == ["good1", "good2"]
        assert sample(registry, "nodesync_informer_skipped_objects_total", resource="nodes") == 1
        assert "'bad': $.spec.unschedulable: expected `bool | null`, got `str`" in caplog.text
        events.clear()
        # A good object turning bad keeps its last good state; deleting it is still seen.
        server.store.patch("nodes", "good1", {"spec": {"taints": [{"key": 7}]}})
        server.store.patch("nodes", "good2", {"metadata": {"labels": {"zone": "c"}}})
        await eventually(lambda: bool(informer.store["good2"].labels), "good2 modified")
        assert informer.store["good1"].taints == ()
        assert "'good1': $.spec.taints[0].key: expected `str`, got `int`" in caplog.text
        server.store.delete("nodes", "good1")
        server.store.delete("nodes", "bad")
        await eventually(lambda: "good1" not in informer.store, "good1 deleted")
    assert events.names() == [("MODIFIED", "good2"), ("DELETED", "good1")]
    assert sample(registry, "nodesync_informer_skipped_objects_total", resource="nodes") == 2


class LateRandom(random.Random):
    """Always draws the top of a range: the longest jitter."""

    def uniform(self, a: float, b: float) -> float:
        return b


async def test_initial_jitter_delays_the_first_list(
    api: KubeAPI, server: APIServer, metrics: KubeRequestMetrics, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("exporter.kube.informer.random.Random", LateRandom)
    timeline = Timeline(metrics)
    informer = node_informer(api, initial_jitter_seconds=0.5, observer=timeline)
    started = time.monotonic()
    async with running(informer):
        first = timeline.requests[0]
    assert first[1] == "list"
    assert first[0] - started >= 0.5


async def test_many_objects_are_all_in_the_store_once_synced(
    api: KubeAPI, server: APIServer
) -> None:
    """How fast is bench.controller_sync's to say (docs/performance.md); here: all of them."""
    with server.store.lock:
        for i in range(1000):
            add_node(server, f"node-{i:04d}")
    informer = node_informer(api)
    async with running(informer):
        assert len(informer.store) == 1000
        assert {n.name for n in informer.store.values()} == {f"node-{i:04d}" for i in range(1000)}


async def test_an_unexpected_error_is_retried_not_fatal(
    server: APIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_node(server, "n1")
    async with KubeAPI(server.aio_configuration()) as api:
        real_list = api.list
        calls = 0

        async def flaky_list(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise RuntimeError("a bug")
            return await real_list(*args, **kwargs)

        monkeypatch.setattr(api, "list", flaky_list)
        informer = node_informer(api)
        async with running(informer):
            assert list(informer.store) == ["n1"]
            assert informer.up
    assert calls == 2
    assert informer.last_error is not None
    assert informer.last_error.reason == "RuntimeError"
