"""Optional CRI calls a runtime does not implement, and error translation, against a tiny
in-process CRI server (a grpc.aio server on a unix socket using the generated servicers)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import grpc.aio
import pytest

from exporter.cri.client import CRIClient
from exporter.cri.errors import CRIError, RuntimeUnavailable, Unimplemented
from exporter.cri.events import subscribe
from exporter.cri.pb import api_pb2, api_pb2_grpc
from exporter.cri.snapshot import RuntimeReader
from exporter.model.runtime import ContainerState
from tests.cri.observer import RecordingObserver

LABELS = {
    "io.kubernetes.pod.name": "web-0",
    "io.kubernetes.pod.namespace": "shop",
    "io.kubernetes.pod.uid": "uid-1",
}


class MinimalRuntime(api_pb2_grpc.RuntimeServiceServicer):  # type: ignore[misc]
    """Answers the state calls; stats are UNIMPLEMENTED, like an older or minimal runtime."""

    def __init__(self) -> None:
        self.fail_list_containers: grpc.StatusCode | None = None

    async def Version(self, request: Any, context: Any) -> Any:
        return api_pb2.VersionResponse(
            version="0.1.0", runtime_name="mini", runtime_version="0.0.1", runtime_api_version="v1"
        )

    async def Status(self, request: Any, context: Any) -> Any:
        return api_pb2.StatusResponse(
            status=api_pb2.RuntimeStatus(
                conditions=[api_pb2.RuntimeCondition(type="RuntimeReady", status=True)]
            )
        )

    async def ListPodSandbox(self, request: Any, context: Any) -> Any:
        return api_pb2.ListPodSandboxResponse(
            items=[
                api_pb2.PodSandbox(
                    id="s1",
                    metadata=api_pb2.PodSandboxMetadata(
                        name="web-0", uid="uid-1", namespace="shop"
                    ),
                    state=api_pb2.SANDBOX_READY,
                    created_at=1_000_000_000,
                    labels=LABELS,
                )
            ]
        )

    async def ListContainers(self, request: Any, context: Any) -> Any:
        if self.fail_list_containers is not None:
            await context.abort(self.fail_list_containers, "injected failure")
        return api_pb2.ListContainersResponse(
            containers=[
                api_pb2.Container(
                    id="c1",
                    pod_sandbox_id="s1",
                    metadata=api_pb2.ContainerMetadata(name="app"),
                    state=api_pb2.CONTAINER_RUNNING,
                    created_at=2_000_000_000,
                    labels=LABELS,
                )
            ]
        )

    async def ListContainerStats(self, request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "ListContainerStats not implemented")


class MinimalImages(api_pb2_grpc.ImageServiceServicer):  # type: ignore[misc]
    async def ImageFsInfo(self, request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "ImageFsInfo not implemented")


@pytest.fixture
def short_dir() -> Iterator[str]:
    # Unix socket paths are limited to 108 bytes; pytest's tmp_path can be longer.
    directory = tempfile.mkdtemp(prefix="ns-", dir="/tmp")
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
async def runtime(short_dir: str) -> AsyncIterator[tuple[str, MinimalRuntime]]:
    servicer = MinimalRuntime()
    server = grpc.aio.server()
    api_pb2_grpc.add_RuntimeServiceServicer_to_server(servicer, server)
    api_pb2_grpc.add_ImageServiceServicer_to_server(MinimalImages(), server)
    endpoint = f"unix://{short_dir}/cri.sock"
    server.add_insecure_port(endpoint)
    await server.start()
    try:
        yield endpoint, servicer
    finally:
        await server.stop(None)


@pytest.fixture
async def client(
    runtime: tuple[str, MinimalRuntime],
) -> AsyncIterator[tuple[CRIClient, RecordingObserver]]:
    observer = RecordingObserver()
    cri = CRIClient(runtime[0], timeout=2.0, observer=observer)
    try:
        yield cri, observer
    finally:
        await cri.close()


async def test_unimplemented_call_raises_unimplemented_from_the_grpc_error(
    client: tuple[CRIClient, RecordingObserver],
) -> None:
    cri, observer = client
    with pytest.raises(Unimplemented) as caught:
        await cri.list_container_stats()
    assert caught.value.code == "UNIMPLEMENTED"
    assert caught.value.operation_type == "list_container_stats"
    assert isinstance(caught.value.__cause__, grpc.RpcError)
    assert observer.codes("list_container_stats") == ["UNIMPLEMENTED"]


async def test_reader_returns_snapshot_without_unimplemented_parts(
    client: tuple[CRIClient, RecordingObserver],
) -> None:
    cri, observer = client
    reader = RuntimeReader(cri)
    snapshot = await reader.read()

    assert snapshot.image_filesystems == ()
    assert snapshot.version is not None
    assert snapshot.version.runtime_name == "mini"
    assert [c.type for c in snapshot.conditions] == ["RuntimeReady"]
    assert [s.id for s in snapshot.sandboxes] == ["s1"]
    (container,) = snapshot.containers
    assert container.state is ContainerState.RUNNING
    assert (container.pod_uid, container.pod_namespace, container.pod_name) == (
        "uid-1",
        "shop",
        "web-0",
    )
    assert observer.codes("list_container_stats") == []  # not a part of the state
    assert observer.codes("image_fs_info") == ["UNIMPLEMENTED"]
    assert observer.codes("list_containers") == ["OK"]
    with pytest.raises(Unimplemented):
        await reader.read_stats()
    assert observer.codes("list_container_stats") == ["UNIMPLEMENTED"]


async def test_reader_raises_when_a_required_list_fails(
    runtime: tuple[str, MinimalRuntime], client: tuple[CRIClient, RecordingObserver]
) -> None:
    cri, observer = client
    runtime[1].fail_list_containers = grpc.StatusCode.INTERNAL
    with pytest.raises(CRIError) as caught:
        await RuntimeReader(cri).read()
    assert type(caught.value) is CRIError
    assert (caught.value.operation_type, caught.value.code) == ("list_containers", "INTERNAL")
    assert observer.codes("list_containers") == ["INTERNAL"]


async def test_version_is_asked_once(client: tuple[CRIClient, RecordingObserver]) -> None:
    cri, observer = client
    reader = RuntimeReader(cri)
    first = await reader.read()
    second = await reader.read()
    assert first.version == second.version
    assert observer.count("version") == 1
    assert observer.count("status") == 2


async def test_socket_without_server_is_runtime_unavailable(short_dir: str) -> None:
    observer = RecordingObserver()
    cri = CRIClient(f"unix://{short_dir}/absent.sock", timeout=2.0, observer=observer)
    try:
        with pytest.raises(RuntimeUnavailable) as caught:
            await cri.status()
    finally:
        await cri.close()
    assert caught.value.code == "UNAVAILABLE"
    assert observer.codes("status") == ["UNAVAILABLE"]


def test_client_can_be_built_before_the_event_loop_runs(short_dir: str) -> None:
    cri = CRIClient(f"unix://{short_dir}/absent.sock", timeout=1.0)

    async def call() -> None:
        try:
            await cri.status()
        finally:
            await cri.close()

    with pytest.raises(RuntimeUnavailable):
        asyncio.run(call())


async def _garbage(request: bytes, context: Any) -> bytes:
    return b"\x0a\x05\xff"  # field 1, five bytes long, one sent


@pytest.fixture
async def garbling_runtime(short_dir: str) -> AsyncIterator[str]:
    """A runtime whose list replies do not decode."""
    server = grpc.aio.server()
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(
            _garbage, request_deserializer=None, response_serializer=None
        )
        for name in ("ListPodSandbox", "ListContainers")
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("runtime.v1.RuntimeService", handlers),)
    )
    endpoint = f"unix://{short_dir}/garbling.sock"
    server.add_insecure_port(endpoint)
    await server.start()
    try:
        yield endpoint
    finally:
        await server.stop(None)


@pytest.mark.parametrize(
    ("operation_type", "list_call"),
    [
        pytest.param("list_podsandbox", CRIClient.list_pod_sandboxes, id="sandboxes"),
        pytest.param("list_containers", CRIClient.list_containers, id="containers"),
    ],
)
async def test_a_list_reply_that_does_not_decode_is_an_internal_error(
    garbling_runtime: str, operation_type: str, list_call: Any
) -> None:
    observer = RecordingObserver()
    cri = CRIClient(garbling_runtime, timeout=2.0, observer=observer)
    try:
        with pytest.raises(CRIError) as caught:
            await list_call(cri)
    finally:
        await cri.close()
    assert (caught.value.operation_type, caught.value.code) == (operation_type, "INTERNAL")
    assert "does not decode" in str(caught.value)
    assert observer.codes(operation_type) == ["INTERNAL"]


async def test_events_a_runtime_does_not_serve_are_unimplemented(
    client: tuple[CRIClient, RecordingObserver],
) -> None:
    cri, _ = client
    events = subscribe(cri)
    with pytest.raises(Unimplemented) as raised:
        await anext(events)
    assert raised.value.operation_type == "events_subscribe"
