"""RuntimeReader over a stand-in client that lists the very same tuples, as CRIClient does
while nothing changes: what an unchanged listing skips, and what it must not."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, cast

from exporter.cri.client import CRIClient
from exporter.cri.errors import RuntimeTimeout
from exporter.cri.snapshot import RuntimeReader
from exporter.model.runtime import (
    Container,
    ContainerState,
    PodSandbox,
    RuntimeVersion,
    SandboxState,
)

SANDBOX = PodSandbox("s1", "web", "default", "u1", 0, SandboxState.READY, created_at=10.0)
EXITED = Container("c1", "s1", "app", 0, ContainerState.EXITED, created_at=11.0)


@dataclass
class ListingClient:
    """Lists one sandbox and one exited container, always the same objects; ContainerStatus
    fails while ``status_fails`` is set."""

    status_fails: bool = True
    status_calls: int = 0
    sandboxes: tuple[PodSandbox, ...] = (SANDBOX,)
    containers: tuple[Container, ...] = (EXITED,)

    async def version(self) -> RuntimeVersion:
        return RuntimeVersion("containerd", "1.7", "v1")

    async def status(self) -> tuple[()]:
        return ()

    async def list_pod_sandboxes(self) -> tuple[PodSandbox, ...]:
        return self.sandboxes

    async def list_containers(self) -> tuple[Container, ...]:
        return self.containers

    async def image_fs_info(self) -> tuple[()]:
        return ()

    async def container_status(self, container_id: str, pod_sandbox_id: str = "") -> Container:
        self.status_calls += 1
        if self.status_fails:
            raise RuntimeTimeout("container_status", "DEADLINE_EXCEEDED", "deadline exceeded")
        return dataclasses.replace(EXITED, exit_code=1, reason="Error")


def _reader(client: ListingClient) -> RuntimeReader:
    return RuntimeReader(cast(CRIClient, cast(Any, client)))


async def test_an_unread_exit_status_is_asked_again_though_the_listing_is_unchanged() -> None:
    client = ListingClient()
    reader = _reader(client)
    first = await reader.read()
    assert client.status_calls == 1
    assert first.containers[0].exit_code is None  # not known yet

    client.status_fails = False
    second = await reader.read()  # the same tuples listed: the status is still asked
    assert client.status_calls == 2
    (container,) = second.containers
    assert (container.exit_code, container.reason) == (1, "Error")
    assert container.pod_uid == "u1"  # joined with its sandbox
    assert second.containers is not first.containers

    third = await reader.read()  # settled: nothing asked, nothing rebuilt
    assert client.status_calls == 2
    assert third.containers is second.containers
    assert third.sandboxes is second.sandboxes


async def test_a_new_listing_is_resolved_and_joined_again() -> None:
    client = ListingClient(status_fails=False)
    reader = _reader(client)
    first = await reader.read()
    renamed = dataclasses.replace(SANDBOX, name="web-2")
    client.sandboxes = (renamed,)
    second = await reader.read()
    assert second.sandboxes == (renamed,)
    assert second.containers[0].pod_name == "web-2"  # the container follows its sandbox
    assert second.containers is not first.containers
    assert client.status_calls == 1  # the exited container's status stays cached
