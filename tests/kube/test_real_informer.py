"""The informer against a real kube-apiserver 1.20: the first list from the watch cache, the watch
with bookmarks, every change applied, and the relist after 410 Expired once history is gone.

What 1.20 does with bookmarks (observed): it sends one about 2 s before a watch's timeoutSeconds
ends, and otherwise about once a minute, and only when the resource's version has moved past
the watch's (writes to other objects of the kind). With a short watch timeout one arrives
within seconds, which is what these tests use; the product's 5-10 min watches get them at the
end and every minute."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from exporter.kube.api import KubeAPI
from exporter.kube.config import kubeconfig_configuration
from exporter.kube.convert import lease_info, node_info
from exporter.kube.informer import Informer, InformerTiming
from exporter.kube.resources import LEASES, NODES
from exporter.metrics.kube_requests import KubeRequestMetrics
from exporter.model.kube import NodeInfo
from nodesync_sim.real.kube_apiserver import ADMIN, LocalKubeAPIServer
from tests.kube.conftest import Recorder, running, sample
from tests.support.kubeapi import KubeCleanup
from tests.support.realkube import (
    MERGE_PATCH,
    connect,
    connections_to,
    eventually,
    query,
    requests,
)

pytestmark = [pytest.mark.kubeapi, pytest.mark.timeout(90)]

CASE = "nodesync.test/case"
EVENTS = "nodesync_informer_watch_events_total"
RELISTS = "nodesync_informer_relists_total"
ERRORS = "nodesync_kube_request_errors_total"
WATCHES = "nodesync_kube_watches_total"


def _node(name: str, case: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {CASE: case}}}


def _label(server: LocalKubeAPIServer, name: str, value: str) -> str:
    """Set a label on a Node; its new resourceVersion."""
    patch = {"metadata": {"labels": {"nodesync.test/step": value}}}
    node = server.ok("PATCH", f"/api/v1/nodes/{name}", patch, content_type=MERGE_PATCH)
    return str(node["metadata"]["resourceVersion"])


def _server_versions(server: LocalKubeAPIServer, case: str) -> dict[str, str]:
    """The server's Nodes of this test, name -> resourceVersion (a consistent read)."""
    listed = server.ok("GET", f"/api/v1/nodes?labelSelector={CASE}={case}")
    return {n["metadata"]["name"]: n["metadata"]["resourceVersion"] for n in listed["items"]}


def _versions(informer: Informer[NodeInfo]) -> dict[str, str]:
    return {name: node.resource_version for name, node in informer.store.items()}


def _replay(events: Recorder, start: dict[str, str]) -> dict[str, str]:
    """Apply the handler calls in order to ``start``; each must fit the state it finds (an ADDED
    of an unknown name, a MODIFIED or DELETED of a known one with the version last told)."""
    state = dict(start)
    for type_, old, new in events.events:
        if type_ == "ADDED":
            assert old is None
            assert new.name not in state, f"ADDED {new.name} twice"
            state[new.name] = new.resource_version
        elif type_ == "MODIFIED":
            assert state.get(new.name) == old.resource_version, f"MODIFIED {new.name} out of order"
            assert new.resource_version != old.resource_version
            state[new.name] = new.resource_version
        else:
            assert type_ == "DELETED"
            assert new is None
            assert state.pop(old.name) == old.resource_version, f"DELETED {old.name} unknown"
    return state


async def test_list_from_the_cache_then_a_burst_of_changes_ends_equal_to_the_server(
    kubeapi: LocalKubeAPIServer,
    kubeapi_cleanup: KubeCleanup,
    registry: CollectorRegistry,
    metrics: KubeRequestMetrics,
) -> None:
    case = f"inf-{secrets.token_hex(4)}"
    names = [f"{case}-{i:02d}" for i in range(13)]
    for name in names:
        kubeapi_cleanup.delete_later(f"/api/v1/nodes/{name}")
    for name in names[:3]:
        kubeapi.ok("POST", "/api/v1/nodes", _node(name, case))
    events = Recorder()
    async with await connect(kubeapi, observer=metrics) as api:
        informer = Informer(api, NODES, node_info, label_selector=f"{CASE}={case}")
        informer.add_handler(events)
        async with running(informer):
            listed_rv = informer.resource_version
            # A list from the watch cache may be a moment behind etcd: the three Nodes come
            # with it or, right after, from the watch.
            initial = _server_versions(kubeapi, case)
            await eventually(lambda: _versions(informer) == initial, "the first three Nodes")
            listed = _versions(informer)
            assert sorted(events.names()) == [("ADDED", n) for n in names[:3]]
            events.clear()

            def burst() -> None:  # from another thread: the informer keeps up meanwhile
                for name in names[3:]:
                    kubeapi.ok("POST", "/api/v1/nodes", _node(name, case))
                for i, name in enumerate([*names[:5], names[0]]):
                    _label(kubeapi, name, str(i))
                for name in (names[1], *names[9:]):
                    kubeapi.ok("DELETE", f"/api/v1/nodes/{name}")

            await asyncio.to_thread(burst)
            expected = _server_versions(kubeapi, case)
            assert sorted(expected) == sorted({*names} - {names[1], *names[9:]})
            await eventually(
                lambda: _versions(informer) == expected, "the store to equal the server"
            )

    # Every change reached the handlers once, in an order that fits, and nothing else did.
    assert _replay(events, listed) == expected
    assert [t for t, _, _ in events.events].count("ADDED") == 10
    assert [t for t, _, _ in events.events].count("MODIFIED") == 6
    assert [t for t, _, _ in events.events].count("DELETED") == 5
    for kind, count in (("ADDED", 10), ("MODIFIED", 6), ("DELETED", 5), ("ERROR", 0)):
        assert sample(registry, EVENTS, resource="nodes", type=kind) == count
    assert sample(registry, RELISTS, resource="nodes") == 0

    # The first list was served from the watch cache (resourceVersion=0), and the watch
    # resumed from the list's version with bookmarks allowed.
    (first_list,) = requests(kubeapi, verb="list", uri_contains=case, product=True)
    assert query(first_list)["resourceVersion"] == "0"
    assert query(first_list)["labelSelector"] == f"{CASE}={case}"
    watch = kubeapi.wait_for_audit(
        lambda e: (
            e["verb"] == "watch" and case in e["requestURI"] and e["stage"] == "ResponseStarted"
        )
    )
    assert query(watch)["resourceVersion"] == listed_rv
    assert query(watch)["allowWatchBookmarks"] == "true"
    assert 300 <= int(query(watch)["timeoutSeconds"]) <= 600


class WatchRecorder(KubeAPI):
    """The real client, keeping the resourceVersion of every watch the server answered."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.watched: list[str] = []

    @asynccontextmanager
    async def watch(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async with super().watch(*args, **kwargs) as events:
            self.watched.append(kwargs["resource_version"])
            yield events


async def test_bookmarks_move_the_version_past_writes_to_other_objects(
    kubeapi: LocalKubeAPIServer,
    kubeapi_namespace: str,
    registry: CollectorRegistry,
    metrics: KubeRequestMetrics,
) -> None:
    namespace = kubeapi_namespace
    collection = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
    # Watches of 3-6 s: 1.20 sends the bookmark about 2 s before each one ends.
    timing = InformerTiming(watch_timeout_seconds=3.0)
    written: list[int] = []
    stop = asyncio.Event()

    async def write_other_leases() -> None:
        # Other Leases of the namespace, none of them this watch's, written all along: 1.20
        # bookmarks only what changed after a watch started.
        while not stop.is_set():
            name = f"other-{len(written)}"
            lease = await asyncio.to_thread(
                kubeapi.ok, "POST", collection, {"metadata": {"name": name}}
            )
            written.append(int(lease["metadata"]["resourceVersion"]))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)

    configuration = await kubeconfig_configuration(str(kubeapi.kubeconfig(ADMIN)))
    async with WatchRecorder(configuration, observer=metrics) as api:
        informer = Informer(
            api,
            LEASES,
            lease_info,
            namespace=namespace,
            field_selector="metadata.name=not-there",
            timing=timing,
        )
        async with running(informer):
            listed = int(informer.resource_version or "0")
            writer = asyncio.create_task(write_other_leases())
            try:
                await eventually(lambda: written, "the first write")
                first = written[0]
                assert first > listed
                await eventually(
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
                await eventually(
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


class GatedAPI(KubeAPI):
    """The real client, with a gate in front of lists and watches: while it is closed, the
    informer's next list or watch waits, so a test can change the server in that gap."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gate = asyncio.Event()
        self.gate.set()
        self.waiting = 0

    async def _pass(self) -> None:
        self.waiting += 1
        try:
            await self.gate.wait()
        finally:
            self.waiting -= 1

    async def list(self, *args: Any, **kwargs: Any) -> Any:
        await self._pass()
        return await super().list(*args, **kwargs)

    @asynccontextmanager
    async def watch(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        await self._pass()
        async with super().watch(*args, **kwargs) as events:
            yield events


async def test_expired_history_relists_and_hands_the_gap_to_the_handlers(
    private_kubeapi: LocalKubeAPIServer, registry: CollectorRegistry, metrics: KubeRequestMetrics
) -> None:
    server = private_kubeapi
    case = "relist"
    a, b, c, d, e, f = (f"{case}-{x}" for x in "abcdef")
    for name in (a, b, c, d):
        server.ok("POST", "/api/v1/nodes", _node(name, case))
    events = Recorder()
    configuration = await kubeconfig_configuration(str(server.kubeconfig(ADMIN)))
    async with GatedAPI(configuration, observer=metrics) as api:
        informer = Informer(api, NODES, node_info, label_selector=f"{CASE}={case}")
        informer.add_handler(events)
        async with running(informer):
            _label(server, a, "seen")  # a watch event: the informer is past its list's version
            await eventually(lambda: ("MODIFIED", a) in events.names(), "the watch event")
            before = _versions(informer)
            # A write the informer does not watch: the server's version moves past the
            # informer's, so that once the history is gone its version is too old (without
            # it, a restarted watch cache starts exactly at the informer's version).
            server.ok("POST", "/api/v1/nodes", _node(f"{case}-other", "other"))

            # Compact etcd and restart the server: every version the informer knows is gone.
            api.gate.clear()
            await asyncio.to_thread(server.expire_history)
            await eventually(lambda: api.waiting == 1, "the informer to try again", within=30)
            events.clear()
            _label(server, b, "gap")
            server.ok("DELETE", f"/api/v1/nodes/{c}")
            server.ok("POST", "/api/v1/nodes", _node(e, case))
            expected = _server_versions(server, case)
            api.gate.set()

            await eventually(lambda: _versions(informer) == expected, "the relist", within=15)
            assert sorted(events.names()) == [("ADDED", e), ("DELETED", c), ("MODIFIED", b)]
            # After the relist it watches from the new list's version: the next change is the
            # next event, and nothing of the gap comes again.
            server.ok("POST", "/api/v1/nodes", _node(f, case))
            await eventually(lambda: f in informer.store, "the change after the relist")
            assert sorted(events.names()[:3]) == [("ADDED", e), ("DELETED", c), ("MODIFIED", b)]
            assert events.names()[3:] == [("ADDED", f)]
            assert _replay(events, before) == _server_versions(server, case)

    assert sample(registry, RELISTS, resource="nodes") == 1
    assert sample(registry, EVENTS, resource="nodes", type="ERROR") == 1
    assert sample(registry, ERRORS, resource="nodes", verb="watch", code="410") == 1
    # Two lists: the first from the watch cache, the relist a consistent read (never older
    # than what the informer had seen).
    lists = requests(server, verb="list", resource="nodes", uri_contains=case, product=True)
    assert [query(x).get("resourceVersion", "") for x in lists] == ["0", ""]


async def test_a_stopped_informer_closes_its_watch_connection_at_once(
    kubeapi: LocalKubeAPIServer,
    kubeapi_namespace: str,
    registry: CollectorRegistry,
    metrics: KubeRequestMetrics,
) -> None:
    # As at shutdown: the informer is cancelled mid-watch, the client closed, and the event loop
    # ends. A graceful TLS close of the watch's connection waits for the server's answer in the
    # background, outside the connection pool (which aborts what it holds when the client
    # closes), and leaves the socket open if the loop ends first (ResourceWarning: unclosed
    # transport). The connection must be gone once the cancelled informer has ended.
    async with await connect(kubeapi, observer=metrics) as api:
        informer = Informer(api, LEASES, lease_info, namespace=kubeapi_namespace)
        async with running(informer):
            await eventually(lambda: sample(registry, WATCHES, resource="leases") == 1, "watch")
            assert connections_to(kubeapi) == ["ESTABLISHED"]
        assert connections_to(kubeapi) == []
