"""One consistent read of the runtime per sync cycle, at about the cost of the list calls.

The list calls run concurrently. ContainerStatus (the only source of exit code and reason) is
asked only for exited containers not seen before: an exited container never changes, so its
status is cached by id until the container disappears. A steady node costs no conversion:
unchanged sandboxes and containers are the objects of the previous read (exporter.cri.client),
and when none changed, the snapshot's ``sandboxes`` and ``containers`` are the previous
snapshot's tuples themselves, so that its consumers can tell "unchanged" by identity. Such a
read does nothing but the calls: no status lookups, no join (unless an exited container's status
could not be read yet: that is asked again on every read until it is known).

The containers' resource usage (ListContainerStats, ~100x the cost of the state calls at 110
pods) is a read of its own, :meth:`RuntimeReader.read_stats`, which the agent makes on its own
period.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Iterable
from typing import TypeVar

from exporter.cri.client import CRIClient
from exporter.cri.errors import CRIError
from exporter.model.runtime import (
    Container,
    ContainerState,
    PodSandbox,
    RuntimeSnapshot,
    RuntimeStats,
    RuntimeVersion,
)

T = TypeVar("T")

_STATUS_CONCURRENCY = 8


class RuntimeReader:
    """Reads a :class:`RuntimeSnapshot`; keep one per runtime so its caches work."""

    def __init__(self, client: CRIClient) -> None:
        self._client = client
        self._version: RuntimeVersion | None = None  # kept from the first successful call
        self._exited: dict[str, Container] = {}
        # Container id -> (the container as listed or resolved, its sandbox, the two joined).
        self._joined: dict[str, tuple[Container, PodSandbox | None, Container]] = {}
        self._sandboxes: tuple[PodSandbox, ...] = ()
        self._containers: tuple[Container, ...] = ()
        # The client's last lists (the same tuples while nothing changed: exporter.cri.client)
        # and whether every exited container among them has its status cached.
        self._listed: tuple[tuple[PodSandbox, ...], tuple[Container, ...]] = ((), ())
        self._settled = False

    @property
    def cached_container_ids(self) -> frozenset[str]:
        """Ids of exited containers whose status is cached."""
        return frozenset(self._exited)

    async def read(self) -> RuntimeSnapshot:
        """Read the runtime's state (no resource usage: :meth:`read_stats`).

        Raises the CRIError of Status, ListPodSandbox or ListContainers (the runtime is down or
        unusable). Image filesystem usage and the version are optional: if they fail
        (including UNIMPLEMENTED) the snapshot simply lacks them.
        """
        taken_at = time.time()
        client = self._client
        version_call: Awaitable[RuntimeVersion] = (
            client.version() if self._version is None else _done(self._version)
        )
        conditions, sandboxes, containers, filesystems, version = await asyncio.gather(
            client.status(),
            client.list_pod_sandboxes(),
            client.list_containers(),
            client.image_fs_info(),
            version_call,
            return_exceptions=True,
        )
        if isinstance(conditions, BaseException):
            raise conditions
        if isinstance(sandboxes, BaseException):
            raise sandboxes
        if isinstance(containers, BaseException):
            raise containers
        for optional in (filesystems, version):
            if isinstance(optional, BaseException) and not isinstance(optional, CRIError):
                raise optional
        if not isinstance(version, BaseException):
            self._version = version

        unchanged = sandboxes is self._listed[0] and containers is self._listed[1]
        if not unchanged or not self._settled:
            # Something changed, or an exited container's status is still to be read.
            resolved = await self._resolve_exited(containers)
            self._sandboxes = _same_or_new(sandboxes, self._sandboxes)
            self._containers = _same_or_new(self._join(resolved, sandboxes), self._containers)
            self._listed = (sandboxes, containers)
        return RuntimeSnapshot(
            taken_at=taken_at,
            version=self._version,
            conditions=conditions,
            sandboxes=self._sandboxes,
            containers=self._containers,
            image_filesystems=filesystems if isinstance(filesystems, tuple) else (),
        )

    def _join(
        self, containers: Iterable[Container], sandboxes: Iterable[PodSandbox]
    ) -> tuple[Container, ...]:
        """Each container with its sandbox's pod identity; joined again only when either
        changed (the join cache holds what this read lists, nothing else)."""
        by_id = {sandbox.id: sandbox for sandbox in sandboxes}
        joined: dict[str, tuple[Container, PodSandbox | None, Container]] = {}
        for c in containers:
            sandbox = by_id.get(c.pod_sandbox_id)
            cached = self._joined.get(c.id)
            if cached is not None and cached[0] is c and cached[1] is sandbox:
                joined[c.id] = cached
            else:
                joined[c.id] = (c, sandbox, _join_pod(c, sandbox))
        self._joined = joined
        return tuple(entry[2] for entry in joined.values())

    async def read_stats(self) -> RuntimeStats:
        """Read every container's resource usage; raises the CRIError of ListContainerStats."""
        taken_at = time.time()
        return RuntimeStats(taken_at, await self._client.list_container_stats())

    async def _resolve_exited(self, containers: Iterable[Container]) -> list[Container]:
        """Replace exited containers by their (cached) ContainerStatus; prune the cache."""
        listed = list(containers)
        current = {c.id for c in listed}
        for gone in set(self._exited) - current:
            del self._exited[gone]

        todo = [c for c in listed if c.state is ContainerState.EXITED and c.id not in self._exited]
        if todo:
            limit = asyncio.Semaphore(_STATUS_CONCURRENCY)

            async def fetch(listed_container: Container) -> Container | None:
                async with limit:
                    try:
                        status = await self._client.container_status(
                            listed_container.id, listed_container.pod_sandbox_id
                        )
                    except CRIError:
                        # Removed meanwhile, or the runtime hiccuped: retry next cycle.
                        return None
                return status

            for found in await asyncio.gather(*(fetch(c) for c in todo)):
                if found is not None and found.state is ContainerState.EXITED:
                    self._exited[found.id] = found

        self._settled = all(c.id in self._exited for c in todo)
        return [
            self._exited.get(c.id, c) if c.state is ContainerState.EXITED else c for c in listed
        ]


async def _done(value: T) -> T:
    return value


def _same_or_new(new: tuple[T, ...], old: tuple[T, ...]) -> tuple[T, ...]:
    """``old`` itself when ``new`` holds the same objects in the same order, else ``new``."""
    if new is old:
        return old
    if len(new) == len(old) and all(a is b for a, b in zip(new, old, strict=True)):
        return old
    return new


def _join_pod(container: Container, sandbox: PodSandbox | None) -> Container:
    """Pod identity from the container's sandbox; kubelet's labels are the fallback."""
    if sandbox is None:
        return container
    return dataclasses.replace(
        container,
        pod_uid=sandbox.uid or container.pod_uid,
        pod_namespace=sandbox.namespace or container.pod_namespace,
        pod_name=sandbox.name or container.pod_name,
    )
