"""The `kubernetes.aio` client against the server running in the test's own event loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes.aio import client as aio_client
from kubernetes.aio import watch as aio_watch

from nodesync_sim.fake.apiserver import APIServer


@pytest.fixture
async def server() -> AsyncIterator[APIServer]:
    async with APIServer(bookmark_interval=0.2) as srv:
        yield srv


@pytest.fixture
async def core(server: APIServer) -> AsyncIterator[aio_client.CoreV1Api]:
    async with aio_client.ApiClient(server.aio_configuration()) as api:
        yield aio_client.CoreV1Api(api)


async def test_list_and_create(core: aio_client.CoreV1Api, server: APIServer) -> None:
    await core.create_node(aio_client.V1Node(metadata=aio_client.V1ObjectMeta(name="n1")))
    nodes = await core.list_node()
    assert [n.metadata.name for n in nodes.items] == ["n1"]
    assert server.store.get("nodes", "n1")["metadata"]["uid"] == nodes.items[0].metadata.uid


async def test_watch_reconnects_after_the_server_drops_it(
    core: aio_client.CoreV1Api, server: APIServer
) -> None:
    server.store.create("nodes", {"metadata": {"name": "n1"}})
    seen: asyncio.Queue[tuple[str, str]] = asyncio.Queue()

    async def consume() -> None:
        async with aio_watch.Watch() as w:
            event: dict[str, Any]
            async for event in w.stream(core.list_node):
                await seen.put((event["type"], event["object"].metadata.name))

    task = asyncio.create_task(consume())
    try:
        assert await asyncio.wait_for(seen.get(), 10) == ("ADDED", "n1")
        assert server.drop_watches() == 1
        server.store.create("nodes", {"metadata": {"name": "n2"}})
        # The client re-watches from the last resourceVersion it saw: n2 arrives, n1 not again.
        assert await asyncio.wait_for(seen.get(), 10) == ("ADDED", "n2")
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert seen.empty()


async def test_aio_watch_bookmarks_and_timeout(core: aio_client.CoreV1Api) -> None:
    types: list[str] = []
    async with aio_watch.Watch() as w:
        async for event in w.stream(core.list_node, allow_watch_bookmarks=True, timeout_seconds=1):
            types.append(event["type"])
    assert types
    assert set(types) == {"BOOKMARK"}
