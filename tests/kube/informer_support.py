"""What the informer's suites (test_informer.py, test_informer_faults.py) share: Nodes labelled
with the test's case (the real server is shared: each informer selects its own), the server's
and the informer's versions of them, a check that the handlers' calls fit, and clients that let
a test see or hold the informer's lists and watches."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from exporter.kube.api import KubeAPI
from exporter.kube.informer import Informer
from exporter.metrics.kube_requests import KubeRequestMetrics
from exporter.model.kube import NodeInfo
from tests.kube.cluster import Cluster
from tests.kube.conftest import Recorder
from tests.support.wait import until_async

CASE = "nodesync.test/case"
ERRORS = "nodesync_kube_request_errors_total"
EVENTS = "nodesync_informer_watch_events_total"
RELISTS = "nodesync_informer_relists_total"
WATCHES = "nodesync_kube_watches_total"


def labelled_node(cluster: Cluster, name: str, case: str, **labels: str) -> str:
    """A Node labelled with ``case``; its name."""
    body = {"metadata": {"name": name, "labels": {CASE: case, **labels}}}
    cluster.create(cluster.path("nodes"), body)
    return name


def label(cluster: Cluster, name: str, value: str) -> str:
    """Set a label on a Node; its new resourceVersion."""
    patch = {"metadata": {"labels": {"nodesync.test/step": value}}}
    return str(cluster.patch(cluster.path("nodes", name), patch)["metadata"]["resourceVersion"])


def cluster_versions(cluster: Cluster, case: str) -> dict[str, str]:
    """The server's Nodes of this case, name -> resourceVersion (a consistent read)."""
    listed = cluster.get(f"{cluster.path('nodes')}?labelSelector={CASE}={case}")
    return {n["metadata"]["name"]: n["metadata"]["resourceVersion"] for n in listed["items"]}


def versions(informer: Informer[NodeInfo]) -> dict[str, str]:
    return {name: node.resource_version for name, node in informer.store.items()}


def replay(events: Recorder, start: dict[str, str]) -> dict[str, str]:
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


async def settle(
    condition: Callable[[], Any],
    what: str,
    within: float = 10.0,
    detail: Callable[[], str] | None = None,
) -> None:
    """Wait in the event loop until ``condition()`` is truthy (tests.support.wait)."""
    await until_async(condition, timeout=within, what=what, detail=detail)
