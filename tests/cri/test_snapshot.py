"""RuntimeReader over a stand-in client that lists the very same tuples, as CRIClient does
while nothing changes: what an unchanged listing skips, and what it must not."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from exporter.cri.client import CRIClient
from exporter.cri.errors import RuntimeTimeout
from exporter.cri.snapshot import OOM_REASON_GRACE_SECONDS, RuntimeReader
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
    fails while ``status_fails`` is set, else answers ``exit`` (exit code, reason)."""

    status_fails: bool = True
    status_calls: int = 0
    sandboxes: tuple[PodSandbox, ...] = (SANDBOX,)
    containers: tuple[Container, ...] = (EXITED,)
    exit: tuple[int, str] = (1, "Error")

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
        exit_code, reason = self.exit
        return dataclasses.replace(EXITED, exit_code=exit_code, reason=reason, finished_at=12.0)


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


def _reader(client: ListingClient, clock: Clock | None = None) -> RuntimeReader:
    return RuntimeReader(cast(CRIClient, cast(Any, client)), clock=clock or Clock())


async def test_an_unread_exit_status_is_asked_again_though_the_listing_is_unchanged() -> None:
    client = ListingClient()
    reader = _reader(client)
    first = await reader.read()
    assert client.status_calls == 1
    assert first.containers[0].exit_code is None  # not known yet
    assert not first.containers[0].settled

    client.status_fails = False
    second = await reader.read()  # the same tuples listed: the status is still asked
    assert client.status_calls == 2
    (container,) = second.containers
    assert (container.exit_code, container.reason, container.settled) == (1, "Error", True)
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


async def test_a_kill_read_before_its_oom_event_is_asked_again_until_oom_killed() -> None:
    client = ListingClient(status_fails=False, exit=(137, "Error"))
    reader = _reader(client)
    first = await reader.read()
    (killed,) = first.containers
    assert (killed.exit_code, killed.reason, killed.settled) == (137, "Error", False)

    second = await reader.read()  # the same listing: asked again all the same
    assert client.status_calls == 2
    assert not second.containers[0].settled

    client.exit = (137, "OOMKilled")  # containerd handled the OOM event
    third = await reader.read()
    (oom,) = third.containers
    assert (oom.reason, oom.settled) == ("OOMKilled", True)
    assert oom.pod_name == "web"  # joined with its sandbox
    assert client.status_calls == 3

    assert (await reader.read()).containers is third.containers  # final: cached
    assert client.status_calls == 3


async def test_a_kill_that_stays_error_is_final_after_the_grace() -> None:
    client = ListingClient(status_fails=False, exit=(137, "Error"))
    clock = Clock()
    reader = _reader(client, clock)
    assert not (await reader.read()).containers[0].settled

    clock.now += OOM_REASON_GRACE_SECONDS - 0.5
    assert not (await reader.read()).containers[0].settled

    clock.now += 0.5  # the grace is over: a SIGKILL from someone else, final as it is
    final = await reader.read()
    (killed,) = final.containers
    assert (killed.exit_code, killed.reason, killed.settled) == (137, "Error", True)
    calls = client.status_calls
    assert (await reader.read()).containers is final.containers
    assert client.status_calls == calls


async def test_an_unreadable_status_is_shown_settled_after_the_grace_and_still_asked() -> None:
    client = ListingClient()  # ContainerStatus fails
    clock = Clock()
    reader = _reader(client, clock)
    assert not (await reader.read()).containers[0].settled
    clock.now += OOM_REASON_GRACE_SECONDS
    (late,) = (await reader.read()).containers
    assert (late.exit_code, late.settled) == (None, True)  # as listed: counted as unknown
    calls = client.status_calls
    await reader.read()
    assert client.status_calls == calls + 1  # still asked: it is not known


async def test_a_kill_that_ended_otherwise_is_final_at_once() -> None:
    client = ListingClient(status_fails=False, exit=(143, "Error"))  # SIGTERM
    reader = _reader(client)
    (container,) = (await reader.read()).containers
    assert container.settled
    await reader.read()
    assert client.status_calls == 1


def test_the_metrics_doc_states_the_grace() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    seconds = f"{OOM_REASON_GRACE_SECONDS:g} s"
    assert f"for up to {seconds}" in doc
    assert f"the {seconds} are over" in doc
