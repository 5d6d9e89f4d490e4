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
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib

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


class Runtime:
    """The channel, the latest reply of each call (bytes), the events received."""

    def __init__(self, endpoint: str) -> None:
        self.channel = grpc.aio.insecure_channel(endpoint)
        self.replies: dict[str, bytes] = {}
        self.events = 0

    async def call(self, path: str) -> None:
        self.replies[path] = await self.channel.unary_unary(path, None, None)(b"", timeout=10)

    async def cycle(self) -> None:
        await asyncio.gather(*(self.call(path) for path in STATE_CALLS))

    async def follow(self) -> None:
        with contextlib.suppress(grpc.aio.AioRpcError):
            async for _ in self.channel.unary_stream(SUBSCRIBE, None, None)(b""):
                self.events += 1

    async def run(self, period: float) -> None:
        while True:
            await asyncio.sleep(period)
            with contextlib.suppress(grpc.aio.AioRpcError):
                await self.cycle()


async def serve(host: str, port: int, endpoint: str, period: float) -> None:
    runtime = Runtime(endpoint)
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
    args = parser.parse_args(argv)
    asyncio.run(serve(args.host, args.port, args.cri_endpoint, args.period))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
