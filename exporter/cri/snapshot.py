"""One consistent read of the runtime per sync cycle, at about the cost of the list calls.

The list calls run concurrently. ContainerStatus (the only source of exit code and reason) is
asked only for exited containers not seen before: an exited container's record is final, so it
is cached by id until the container disappears. One exception: a status saying exit code 137
without OOMKilled may be read before containerd handled the container's OOM event
(:func:`exporter.model.runtime.oom_reason_may_follow`). Such a status is asked again on every
read for up to :data:`OOM_REASON_GRACE_SECONDS`, and until it is final the container is listed
with ``settled=False`` (as is one whose status could not be read yet), so that terminations are
not counted with a reason that is about to change. A steady node costs no conversion:
unchanged sandboxes and containers are the objects of the previous read (exporter.cri.client),
and when none changed, the snapshot's ``sandboxes`` and ``containers`` are the previous
snapshot's tuples themselves, so that its consumers can tell "unchanged" by identity. Such a
read does nothing but the calls: no status lookups, no join (unless an exited container's status
could not be read yet, or is not final yet: that is asked again on every read until it is).

The containers' resource usage (ListContainerStats, ~100x the cost of the state calls at 110
pods) is a read of its own, :meth:`RuntimeReader.read_stats`, which the agent makes on its own
period.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Final, TypeVar

from exporter.cri.client import CRIClient
from exporter.cri.errors import CRIError
from exporter.model.runtime import (
    Container,
    ContainerState,
    PodSandbox,
    RuntimeSnapshot,
    RuntimeStats,
    RuntimeVersion,
    oom_reason_may_follow,
)

T = TypeVar("T")

_STATUS_CONCURRENCY = 8

#: How long an exited container's record may wait for the runtime to make it final: a status
#: still to be read, or an exit 137 whose OOMKilled may follow. containerd handles an OOM event
#: milliseconds after the exit; a SIGKILL from anyone else only has its count delayed by this.
OOM_REASON_GRACE_SECONDS: Final = 10.0


class RuntimeReader:
    """Reads a :class:`RuntimeSnapshot`; keep one per runtime so its caches work."""

    def __init__(self, client: CRIClient, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._clock = clock
        self._version: RuntimeVersion | None = None  # kept from the first successful call
        self._exited: dict[str, Container] = {}  # final records of exited containers
        # Exited containers whose record is not final yet -> when this reader first saw them.
        self._unsettled_since: dict[str, float] = {}
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
        """Replace exited containers by their (cached) ContainerStatus; prune the caches."""
        listed = list(containers)
        current = {c.id for c in listed}
        for cache in (self._exited, self._unsettled_since):
            for gone in set(cache) - current:
                del cache[gone]

        todo = [c for c in listed if c.state is ContainerState.EXITED and c.id not in self._exited]
        shown: dict[str, Container] = {}
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
                return status if status.state is ContainerState.EXITED else None

            now = self._clock()
            found = await asyncio.gather(*(fetch(c) for c in todo))
            for listed_container, status in zip(todo, found, strict=True):
                shown[listed_container.id] = self._settle(listed_container, status, now)

        self._settled = all(c.id in self._exited for c in todo)
        return [
            self._exited.get(c.id) or shown.get(c.id, c) if c.state is ContainerState.EXITED else c
            for c in listed
        ]

    def _settle(self, listed: Container, status: Container | None, now: float) -> Container:
        """What to show for an exited container not cached yet; caches its final record."""
        if status is not None and not oom_reason_may_follow(status):
            self._unsettled_since.pop(listed.id, None)
            self._exited[listed.id] = status
            return status
        waited = now - self._unsettled_since.setdefault(listed.id, now)
        if waited < OOM_REASON_GRACE_SECONDS:
            return dataclasses.replace(status or listed, settled=False)
        if status is not None:  # the reason did not change in time: final as it is
            self._exited[listed.id] = status
            return status
        return listed  # still unreadable: shown as listed, asked again next read


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
