"""The floor of the agent's memory: a bare interpreter with grpcio, aiohttp and prometheus_client.

What any Python agent of this shape holds at least, with none of nodesync's code: it serves
prometheus_client's default registry on ``GET /metrics`` (aiohttp), keeps a gRPC channel to the
runtime's socket and, every ``--period``, makes the state calls of the agent's sync cycle
(Status, ListPodSandbox, ListContainers, ImageFsInfo) and, once at the start, its stats call
(ListContainerStats), all as bytes: no protobuf, no conversion; it keeps the latest replies, as
the agent keeps its state, and holds a subscription to containerd's events. No API server:
the agent's API view is the agent's own cost. bench.agent_node_objects starts it beside the
agent, in the same run, and reads its resident set the same way:

    .venv/bin/python -m bench.agent_floor --port PORT --cri-endpoint unix:///run/containerd/...

To tell apart what the agent's CPU goes to, the floor can make its calls more like the agent's:
``--call-timeout`` (the agent's ``--cri.timeout``), ``--agent-channel-options`` (the agent's
channel options), ``--subscribe-filters`` (the agent's filtered subscription) and
``--hold-gil-ms`` (busy Python work after each reply, as the agent converts it). The channel
options and the filters import nodesync's CRI modules, so the floor's memory is then no longer
the floor's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

import grpc.aio
import prometheus_client
from aiohttp import web

from bench.harness.serving import serve_until_signalled

RUNTIME = "/runtime.v1.RuntimeService/"
STATE_CALLS = (
    RUNTIME + "Status",
    RUNTIME + "ListPodSandbox",
    RUNTIME + "ListContainers",
    "/runtime.v1.ImageService/ImageFsInfo",
)
STATS_CALL = RUNTIME + "ListContainerStats"
SUBSCRIBE = "/containerd.services.events.v1.Events/Subscribe"


async def metrics(_: web.Request) -> web.Response:
    return web.Response(
        body=prometheus_client.generate_latest(), content_type="text/plain", charset="utf-8"
    )


@dataclass(frozen=True)
class Calls:
    """How the floor makes its calls: bare by default, or in some ways as the agent does."""

    timeout: float = 10.0
    agent_channel_options: bool = False
    subscribe_filters: bool = False
    hold_gil_ms: float = 0.0

    def channel_options(self) -> list[tuple[str, Any]] | None:
        if not self.agent_channel_options:
            return None
        from exporter.cri.client import CHANNEL_OPTIONS

        return list(CHANNEL_OPTIONS)

    def subscribe_request(self) -> bytes:
        if not self.subscribe_filters:
            return b""
        from exporter.cri.events import filters
        from exporter.cri.pb import events_pb2

        return events_pb2.SubscribeRequest(filters=filters()).SerializeToString()

    def hold_gil(self) -> None:
        """Busy work in the interpreter, the GIL held throughout."""
        end = time.perf_counter() + self.hold_gil_ms / 1000
        while time.perf_counter() < end:
            pass


class Runtime:
    """The channel, the latest reply of each call (bytes), the events received."""

    def __init__(self, endpoint: str, calls: Calls) -> None:
        self.calls = calls
        self.channel = grpc.aio.insecure_channel(endpoint, options=calls.channel_options())
        self.replies: dict[str, bytes] = {}
        self.events = 0

    async def call(self, path: str) -> None:
        self.replies[path] = await self.channel.unary_unary(path, None, None)(
            b"", timeout=self.calls.timeout
        )
        if self.calls.hold_gil_ms:
            self.calls.hold_gil()

    async def cycle(self) -> None:
        await asyncio.gather(*(self.call(path) for path in STATE_CALLS))

    async def follow(self) -> None:
        with contextlib.suppress(grpc.aio.AioRpcError):
            request = self.calls.subscribe_request()
            async for _ in self.channel.unary_stream(SUBSCRIBE, None, None)(request):
                self.events += 1

    async def run(self, period: float) -> None:
        while True:
            await asyncio.sleep(period)
            with contextlib.suppress(grpc.aio.AioRpcError):
                await self.cycle()


async def serve(host: str, port: int, endpoint: str, period: float, calls: Calls) -> None:
    runtime = Runtime(endpoint, calls)
    await runtime.cycle()
    await runtime.call(STATS_CALL)
    tasks = [asyncio.create_task(runtime.follow()), asyncio.create_task(runtime.run(period))]
    app = web.Application()
    app.router.add_get("/metrics", metrics)
    try:
        await serve_until_signalled(app, host, port, access_log=False)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await runtime.channel.close(None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cri-endpoint", required=True)
    parser.add_argument("--period", type=float, default=10.0, help="seconds between cycles")
    parser.add_argument(
        "--call-timeout", type=float, default=10.0, help="each call's deadline, in seconds"
    )
    parser.add_argument(
        "--agent-channel-options", action="store_true", help="the agent's channel options"
    )
    parser.add_argument(
        "--subscribe-filters", action="store_true", help="the agent's filters on the events"
    )
    parser.add_argument(
        "--hold-gil-ms",
        type=float,
        default=0.0,
        help="milliseconds of busy Python work after each reply",
    )
    args = parser.parse_args(argv)
    calls = Calls(
        args.call_timeout, args.agent_channel_options, args.subscribe_filters, args.hold_gil_ms
    )
    asyncio.run(serve(args.host, args.port, args.cri_endpoint, args.period, calls))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
