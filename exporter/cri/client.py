"""Async CRI v1 client over the runtime's unix socket.

Every call carries a deadline: a frozen runtime otherwise hangs a call forever. Failures are
translated into :mod:`exporter.cri.errors`; results are exporter.model dataclasses.

The lists (ListPodSandbox, ListContainers) come back sorted by id, and a sandbox or container
listed again in the same state is the very object of the previous list: CRI changes nothing
of a listed object but its state (labels, annotations, metadata, image and times are fixed at
creation), so converting 220 messages again on every sync cycle would cost more than the
calls themselves (~3.5 ms against ~3 ms at 110 pods). When no item changed, the list is the
previous list's tuple itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

import grpc
import grpc.aio

from exporter.cri import convert
from exporter.cri.errors import CRIError, NotFound, error_for
from exporter.cri.pb import api_pb2, api_pb2_grpc
from exporter.model.runtime import (
    Container,
    ContainerStats,
    FilesystemUsage,
    PodSandbox,
    RuntimeCondition,
    RuntimeVersion,
)

T = TypeVar("T")

CRI_API_VERSION = "v1"
_MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # as kubelet
_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
    # Reconnect quickly once a restarted runtime listens again.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


class RequestObserver(Protocol):
    """Told about every CRI request once it finished (successfully or not).

    ``operation_type`` uses kubelet's names (``list_podsandbox``, ``container_status`` ...),
    ``grpc_code`` is the status code name (``"OK"``, ``"DEADLINE_EXCEEDED"`` ...).
    """

    def observe(self, operation_type: str, duration_seconds: float, grpc_code: str) -> None: ...


class CRIClient:
    """One long-lived channel to the runtime; safe to keep across runtime restarts.

    The channel is opened on the first call, so the client may be built before the event
    loop runs; it is bound to the loop of that first call.
    """

    def __init__(
        self, endpoint: str, timeout: float = 2.0, observer: RequestObserver | None = None
    ) -> None:
        self._endpoint = endpoint
        self._timeout = timeout
        self._observer = observer
        self._channel: grpc.aio.Channel | None = None
        self._runtime_stub: Any = None
        self._image_stub: Any = None
        # The last lists' objects by (id, state): what an unchanged item converts to.
        self._sandboxes: _Listing[PodSandbox] = _Listing()
        self._containers: _Listing[Container] = _Listing()

    @property
    def endpoint(self) -> str:
        return self._endpoint

    @property
    def timeout(self) -> float:
        return self._timeout

    def _connect(self) -> grpc.aio.Channel:
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(self._endpoint, options=_CHANNEL_OPTIONS)
            self._runtime_stub = api_pb2_grpc.RuntimeServiceStub(self._channel)
            self._image_stub = api_pb2_grpc.ImageServiceStub(self._channel)
        return self._channel

    @property
    def _runtime(self) -> Any:
        self._connect()
        return self._runtime_stub

    @property
    def _images(self) -> Any:
        self._connect()
        return self._image_stub

    async def close(self) -> None:
        """Close the channel; a later call opens a new one."""
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close(grace=None)

    async def __aenter__(self) -> CRIClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(
        self,
        operation_type: str,
        method: Callable[..., Any],
        request: Any,
        call_timeout: float | None = None,
    ) -> Any:
        started = time.monotonic()
        code = "OK"
        try:
            return await method(
                request, timeout=self._timeout if call_timeout is None else call_timeout
            )
        except grpc.aio.AioRpcError as err:
            code = err.code().name
            raise error_for(operation_type, code, err.details() or "") from err
        except asyncio.CancelledError:
            code = "CANCELLED"
            raise
        finally:
            if self._observer is not None:
                self._observer.observe(operation_type, time.monotonic() - started, code)

    # -- reads -------------------------------------------------------------------------------

    async def version(self) -> RuntimeVersion:
        reply = await self._call(
            "version", self._runtime.Version, api_pb2.VersionRequest(version=CRI_API_VERSION)
        )
        return convert.version(reply)

    async def status(self) -> tuple[RuntimeCondition, ...]:
        reply = await self._call("status", self._runtime.Status, api_pb2.StatusRequest())
        return convert.conditions(reply)

    async def list_pod_sandboxes(self) -> tuple[PodSandbox, ...]:
        reply = await self._call(
            "list_podsandbox", self._runtime.ListPodSandbox, api_pb2.ListPodSandboxRequest()
        )
        self._sandboxes = _converted(reply.items, self._sandboxes, convert.pod_sandbox)
        return self._sandboxes.listed

    async def pod_sandbox_status(self, pod_sandbox_id: str) -> PodSandbox:
        reply = await self._call(
            "podsandbox_status",
            self._runtime.PodSandboxStatus,
            api_pb2.PodSandboxStatusRequest(pod_sandbox_id=pod_sandbox_id),
        )
        return convert.pod_sandbox(reply.status)

    async def list_containers(self) -> tuple[Container, ...]:
        reply = await self._call(
            "list_containers", self._runtime.ListContainers, api_pb2.ListContainersRequest()
        )
        self._containers = _converted(reply.containers, self._containers, convert.container)
        return self._containers.listed

    async def container_status(self, container_id: str, pod_sandbox_id: str = "") -> Container:
        """Status of one container, with exit code, reason, message and start/finish times.

        CRI's ContainerStatus does not name the sandbox; ``pod_sandbox_id`` is copied into the
        result when the caller knows it (from ListContainers).
        """
        reply = await self._call(
            "container_status",
            self._runtime.ContainerStatus,
            api_pb2.ContainerStatusRequest(container_id=container_id),
        )
        return convert.container_status(reply.status, pod_sandbox_id)

    async def list_container_stats(self) -> tuple[ContainerStats, ...]:
        reply = await self._call(
            "list_container_stats",
            self._runtime.ListContainerStats,
            api_pb2.ListContainerStatsRequest(),
        )
        return tuple(convert.container_stats(item) for item in reply.stats)

    async def image_fs_info(self) -> tuple[FilesystemUsage, ...]:
        reply = await self._call(
            "image_fs_info", self._images.ImageFsInfo, api_pb2.ImageFsInfoRequest()
        )
        return tuple(convert.filesystem_usage(item) for item in reply.image_filesystems)

    # -- idempotent cleanup: NOT_FOUND means the job is already done --------------------------

    async def _cleanup(
        self, operation_type: str, method: Callable[..., Any], request: Any, call_timeout: float
    ) -> None:
        try:
            await self._call(operation_type, method, request, call_timeout)
        except NotFound:
            return

    async def stop_pod_sandbox(
        self, pod_sandbox_id: str, call_timeout: float | None = None
    ) -> None:
        """Stop a sandbox and kill its containers. A sandbox that is gone counts as stopped."""
        await self._cleanup(
            "stop_podsandbox",
            self._runtime.StopPodSandbox,
            api_pb2.StopPodSandboxRequest(pod_sandbox_id=pod_sandbox_id),
            self._timeout if call_timeout is None else call_timeout,
        )

    async def remove_pod_sandbox(
        self, pod_sandbox_id: str, call_timeout: float | None = None
    ) -> None:
        """Remove a sandbox and its containers. A sandbox that is gone counts as removed."""
        await self._cleanup(
            "remove_podsandbox",
            self._runtime.RemovePodSandbox,
            api_pb2.RemovePodSandboxRequest(pod_sandbox_id=pod_sandbox_id),
            self._timeout if call_timeout is None else call_timeout,
        )

    async def stop_container(self, container_id: str, timeout_seconds: int = 0) -> None:
        """Stop a container, killing it after ``timeout_seconds`` of grace.

        The call's deadline is the client timeout plus the grace period.
        """
        await self._cleanup(
            "stop_container",
            self._runtime.StopContainer,
            api_pb2.StopContainerRequest(container_id=container_id, timeout=timeout_seconds),
            self._timeout + max(timeout_seconds, 0),
        )

    async def remove_container(self, container_id: str, call_timeout: float | None = None) -> None:
        """Remove a container. A container that is gone counts as removed."""
        await self._cleanup(
            "remove_container",
            self._runtime.RemoveContainer,
            api_pb2.RemoveContainerRequest(container_id=container_id),
            self._timeout if call_timeout is None else call_timeout,
        )


__all__ = ["CRIClient", "CRIError", "RequestObserver"]


class _Listing(Generic[T]):
    """The objects of the last list, by (id, state), and that list sorted by id."""

    __slots__ = ("by_key", "listed")

    def __init__(
        self, by_key: dict[tuple[str, int], T] | None = None, listed: tuple[T, ...] = ()
    ) -> None:
        self.by_key: dict[tuple[str, int], T] = by_key or {}
        self.listed = listed


def _converted(
    items: Sequence[Any], previous: _Listing[T], make: Callable[[Any], T]
) -> _Listing[T]:
    """The listed messages as objects sorted by id, reusing those of ``previous`` whose id and
    state are unchanged (the memo holds only what this list holds). When every message is
    unchanged, ``previous`` itself: its tuple, not a copy, so that callers can tell by identity.
    """
    keys = [(item.id, item.state) for item in items]
    known = previous.by_key
    if len(keys) == len(known) and all(key in known for key in keys):  # ids are unique
        return previous
    memo: dict[tuple[str, int], T] = {}
    for item, key in zip(items, keys, strict=True):
        memo[key] = known.get(key) or make(item)
    return _Listing(memo, tuple(memo[key] for key in sorted(memo)))
