"""Async CRI v1 client over the runtime's unix socket.

Every call carries a deadline: a frozen runtime otherwise hangs a call forever. Failures are
translated into :mod:`exporter.cri.errors`; results are exporter.model dataclasses.

The lists (ListPodSandbox, ListContainers) come back sorted by id and cost what changed: an item
listed again in the same state is the very object of the previous list, and a list in which
nothing changed is the previous list's tuple itself (:mod:`exporter.cri.listing`).

Each method is bound to the channel the first time it is called, with only its own request
and reply types: the generated stubs (``api_pb2_grpc``) bind every method of both services at
once, and that alone cost the agent 1.2-1.3 MiB of resident memory (docs/performance.md), for
calls most agents never make (the cleanup's stops and removals).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import grpc
import grpc.aio
from google.protobuf.message import DecodeError, Message

from exporter.cri import convert
from exporter.cri.errors import CRIError, NotFound, error_for
from exporter.cri.listing import LIST_CONTAINERS, LIST_POD_SANDBOX, ListCall, Listing
from exporter.cri.pb import api_pb2
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
_RUNTIME = "/runtime.v1.RuntimeService/"
_IMAGES = "/runtime.v1.ImageService/"
CHANNEL_OPTIONS = [
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
        self._methods: dict[str, Any] = {}  # method path -> its call on the channel
        # The last lists' objects by (id, state): what an unchanged item converts to.
        self._sandboxes: Listing[PodSandbox] = Listing()
        self._containers: Listing[Container] = Listing()

    @property
    def endpoint(self) -> str:
        return self._endpoint

    @property
    def timeout(self) -> float:
        return self._timeout

    def _connect(self) -> grpc.aio.Channel:
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(self._endpoint, options=CHANNEL_OPTIONS)
            self._methods = {}
        return self._channel

    def _method(self, path: str, request: type[Message], reply: type[Message] | None) -> Any:
        """The unary call ``path`` on the channel, bound on its first use; a ``reply`` of None
        leaves the reply as bytes."""
        channel = self._connect()
        method = self._methods.get(path)
        if method is None:
            method = channel.unary_unary(
                path,
                request_serializer=request.SerializeToString,
                response_deserializer=None if reply is None else reply.FromString,
            )
            self._methods[path] = method
        return method

    @property
    def channel(self) -> grpc.aio.Channel:
        """The channel to the runtime's socket (opened now if need be), for the other services
        containerd serves on it (exporter.cri.events)."""
        return self._connect()

    def _list(self, call: ListCall) -> Any:
        # The reply as bytes: exporter.cri.listing parses them.
        return self._method(call.method, type(call.request()), None)

    def _runtime(self, name: str, request: type[Message], reply: type[Message]) -> Any:
        return self._method(_RUNTIME + name, request, reply)

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
        decode: Callable[[Any], T] | None = None,
    ) -> Any:
        """The call's reply, through ``decode`` if given (a reply taken as bytes: one that does
        not decode is INTERNAL, as gRPC's own deserializer says it)."""
        started = time.monotonic()
        code = "OK"
        try:
            reply = await method(
                request, timeout=self._timeout if call_timeout is None else call_timeout
            )
            return reply if decode is None else decode(reply)
        except grpc.aio.AioRpcError as err:
            code = err.code().name
            raise error_for(operation_type, code, err.details() or "") from err
        except DecodeError as err:
            code = "INTERNAL"
            raise error_for(operation_type, code, f"the reply does not decode: {err}") from err
        except asyncio.CancelledError:
            code = "CANCELLED"
            raise
        finally:
            if self._observer is not None:
                self._observer.observe(operation_type, time.monotonic() - started, code)

    # -- reads -------------------------------------------------------------------------------

    async def version(self) -> RuntimeVersion:
        reply = await self._call(
            "version",
            self._runtime("Version", api_pb2.VersionRequest, api_pb2.VersionResponse),
            api_pb2.VersionRequest(version=CRI_API_VERSION),
        )
        return convert.version(reply)

    async def status(self) -> tuple[RuntimeCondition, ...]:
        reply = await self._call(
            "status",
            self._runtime("Status", api_pb2.StatusRequest, api_pb2.StatusResponse),
            api_pb2.StatusRequest(),
        )
        return convert.conditions(reply)

    async def list_pod_sandboxes(self) -> tuple[PodSandbox, ...]:
        call, sandboxes = LIST_POD_SANDBOX, self._sandboxes
        self._sandboxes = await self._call(
            "list_podsandbox",
            self._list(call),
            call.request(),
            decode=lambda reply: sandboxes.update(call, reply, convert.pod_sandbox),
        )
        return self._sandboxes.listed

    async def pod_sandbox_status(self, pod_sandbox_id: str) -> PodSandbox:
        reply = await self._call(
            "podsandbox_status",
            self._runtime(
                "PodSandboxStatus",
                api_pb2.PodSandboxStatusRequest,
                api_pb2.PodSandboxStatusResponse,
            ),
            api_pb2.PodSandboxStatusRequest(pod_sandbox_id=pod_sandbox_id),
        )
        return convert.pod_sandbox(reply.status)

    async def list_containers(self) -> tuple[Container, ...]:
        call, containers = LIST_CONTAINERS, self._containers
        self._containers = await self._call(
            "list_containers",
            self._list(call),
            call.request(),
            decode=lambda reply: containers.update(call, reply, convert.container),
        )
        return self._containers.listed

    async def container_status(self, container_id: str, pod_sandbox_id: str = "") -> Container:
        """Status of one container, with exit code, reason, message and start/finish times.

        CRI's ContainerStatus does not name the sandbox; ``pod_sandbox_id`` is copied into the
        result when the caller knows it (from ListContainers).
        """
        reply = await self._call(
            "container_status",
            self._runtime(
                "ContainerStatus", api_pb2.ContainerStatusRequest, api_pb2.ContainerStatusResponse
            ),
            api_pb2.ContainerStatusRequest(container_id=container_id),
        )
        return convert.container_status(reply.status, pod_sandbox_id)

    async def list_container_stats(self) -> tuple[ContainerStats, ...]:
        reply = await self._call(
            "list_container_stats",
            self._runtime(
                "ListContainerStats",
                api_pb2.ListContainerStatsRequest,
                api_pb2.ListContainerStatsResponse,
            ),
            api_pb2.ListContainerStatsRequest(),
        )
        return tuple(convert.container_stats(item) for item in reply.stats)

    async def image_fs_info(self) -> tuple[FilesystemUsage, ...]:
        reply = await self._call(
            "image_fs_info",
            self._method(
                _IMAGES + "ImageFsInfo", api_pb2.ImageFsInfoRequest, api_pb2.ImageFsInfoResponse
            ),
            api_pb2.ImageFsInfoRequest(),
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
            self._runtime(
                "StopPodSandbox", api_pb2.StopPodSandboxRequest, api_pb2.StopPodSandboxResponse
            ),
            api_pb2.StopPodSandboxRequest(pod_sandbox_id=pod_sandbox_id),
            self._timeout if call_timeout is None else call_timeout,
        )

    async def remove_pod_sandbox(
        self, pod_sandbox_id: str, call_timeout: float | None = None
    ) -> None:
        """Remove a sandbox and its containers. A sandbox that is gone counts as removed."""
        await self._cleanup(
            "remove_podsandbox",
            self._runtime(
                "RemovePodSandbox",
                api_pb2.RemovePodSandboxRequest,
                api_pb2.RemovePodSandboxResponse,
            ),
            api_pb2.RemovePodSandboxRequest(pod_sandbox_id=pod_sandbox_id),
            self._timeout if call_timeout is None else call_timeout,
        )

    async def stop_container(self, container_id: str, timeout_seconds: int = 0) -> None:
        """Stop a container, killing it after ``timeout_seconds`` of grace.

        The call's deadline is the client timeout plus the grace period.
        """
        await self._cleanup(
            "stop_container",
            self._runtime(
                "StopContainer", api_pb2.StopContainerRequest, api_pb2.StopContainerResponse
            ),
            api_pb2.StopContainerRequest(container_id=container_id, timeout=timeout_seconds),
            self._timeout + max(timeout_seconds, 0),
        )

    async def remove_container(self, container_id: str, call_timeout: float | None = None) -> None:
        """Remove a container. A container that is gone counts as removed."""
        await self._cleanup(
            "remove_container",
            self._runtime(
                "RemoveContainer", api_pb2.RemoveContainerRequest, api_pb2.RemoveContainerResponse
            ),
            api_pb2.RemoveContainerRequest(container_id=container_id),
            self._timeout if call_timeout is None else call_timeout,
        )


__all__ = ["CRIClient", "CRIError", "RequestObserver"]
