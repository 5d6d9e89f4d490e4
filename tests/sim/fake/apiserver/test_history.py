"""How long the test API server keeps its change history: like a real server, it forgets changes
older than its window (`history_seconds`), so a watch, an exact list or a continue token from an
old resourceVersion gets 410 Expired instead of a replay, even when few changes happened."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from nodesync_sim.fake.apiserver import Store, ThreadedAPIServer
from nodesync_sim.fake.apiserver.resources import NODES
from tests.sim.fake.apiserver.helpers import node

WINDOW = 60.0


@dataclass
class FakeMonotonic:
    """The clock the age of changes is measured by; the test moves it."""

    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def ticks() -> FakeMonotonic:
    return FakeMonotonic()


@pytest.fixture
def aged(ticks: FakeMonotonic) -> Iterator[ThreadedAPIServer]:
    store = Store(history_seconds=WINDOW, monotonic=ticks)
    with ThreadedAPIServer(store=store) as srv:
        yield srv


@pytest.fixture
def core_aged(aged: ThreadedAPIServer) -> Iterator[client.CoreV1Api]:
    with client.ApiClient(aged.configuration()) as api:
        yield client.CoreV1Api(api)


def raw_watch(core: client.CoreV1Api, resource_version: str) -> tuple[int, list[dict[str, Any]]]:
    """(HTTP status, every event line) of a node watch the server ends after a second."""
    resp = core.list_node(
        watch=True, resource_version=resource_version, timeout_seconds=1, _preload_content=False
    )
    try:
        return resp.status, [json.loads(line) for line in resp.read().splitlines() if line]
    finally:
        resp.close()


def test_a_watch_from_a_version_older_than_the_window_gets_one_410_event(
    core_aged: client.CoreV1Api, ticks: FakeMonotonic
) -> None:
    old = core_aged.list_node().metadata.resource_version
    core_aged.create_node(node("n1"))
    ticks.now += WINDOW + 1  # n1's creation is older than the window now
    status, lines = raw_watch(core_aged, old)
    assert status == 200
    assert [line["type"] for line in lines] == ["ERROR"]
    assert (lines[0]["object"]["code"], lines[0]["object"]["reason"]) == (410, "Expired")


def test_changes_inside_the_window_are_replayed(
    core_aged: client.CoreV1Api, ticks: FakeMonotonic
) -> None:
    old = core_aged.list_node().metadata.resource_version
    core_aged.create_node(node("n1"))
    ticks.now += WINDOW - 1
    status, lines = raw_watch(core_aged, old)
    assert status == 200
    assert [(line["type"], line["object"]["metadata"]["name"]) for line in lines] == [
        ("ADDED", "n1")
    ]


def test_a_version_with_nothing_after_it_stays_valid_however_old(
    core_aged: client.CoreV1Api, aged: ThreadedAPIServer, ticks: FakeMonotonic
) -> None:
    core_aged.create_node(node("n1"))
    latest = core_aged.list_node().metadata.resource_version
    ticks.now += 10 * WINDOW
    status, lines = raw_watch(core_aged, latest)
    assert (status, lines) == (200, [])
    assert aged.store.oldest_resource_version == int(latest)
    core_aged.create_node(node("n2"))
    status, lines = raw_watch(core_aged, latest)
    assert [line["object"]["metadata"]["name"] for line in lines] == ["n2"]


def test_exact_lists_and_continue_tokens_expire_with_the_window(
    core_aged: client.CoreV1Api, ticks: FakeMonotonic
) -> None:
    core_aged.create_node(node("a"))
    core_aged.create_node(node("b"))
    first = core_aged.list_node(limit=1)
    core_aged.create_node(node("c"))
    second = core_aged.list_node(limit=1, _continue=first.metadata._continue)
    assert [n.metadata.name for n in second.items] == ["b"]
    ticks.now += WINDOW + 1
    for call in (
        lambda: core_aged.list_node(limit=1, _continue=first.metadata._continue),
        lambda: core_aged.list_node(
            resource_version=first.metadata.resource_version, resource_version_match="Exact"
        ),
    ):
        with pytest.raises(ApiException) as info:
            call()
        assert info.value.status == 410
        assert json.loads(info.value.body)["reason"] == "Expired"


def test_without_a_window_old_changes_are_kept() -> None:
    ticks = FakeMonotonic()
    store = Store(history_seconds=None, monotonic=ticks)
    old = store.resource_version
    store.create("nodes", {"metadata": {"name": "n1"}})
    ticks.now += 1e6
    start = store.open_watch(NODES, "", str(old))
    changes, _, _ = store.changes_since(start.cursor)
    assert [(c.type, c.obj.name) for c in changes] == [("ADDED", "n1")]


def test_an_open_watch_that_kept_up_is_not_expired_by_age(
    core_aged: client.CoreV1Api, aged: ThreadedAPIServer, ticks: FakeMonotonic
) -> None:
    rv = core_aged.list_node().metadata.resource_version
    resp = core_aged.list_node(
        watch=True, resource_version=rv, timeout_seconds=10, _preload_content=False
    )
    try:
        core_aged.create_node(node("n1"))
        first = json.loads(resp.readline())
        ticks.now += 10 * WINDOW  # what the watch has seen is long expired
        aged.store.create("nodes", {"metadata": {"name": "n2"}})
        second = json.loads(resp.readline())
    finally:
        resp.close()
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in (first, second)] == [
        ("ADDED", "n1"),
        ("ADDED", "n2"),
    ]
