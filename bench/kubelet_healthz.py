"""A stand-in for kubelet's healthz endpoint, in its own process: ``GET /healthz`` answers
``ok`` over keep-alive connections, as kubelet does on 127.0.0.1:10248. The agent benchmarks
point the agent's kubelet probe at it, so that a probe costs what it costs on a node (one
request on a kept connection) rather than a refused connection to a port nobody serves."""

from __future__ import annotations

import argparse
import asyncio

from aiohttp import web

from bench.harness.serving import serve_until_signalled


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def serve(host: str, port: int) -> None:
    app = web.Application()
    app.router.add_get("/healthz", healthz)
    await serve_until_signalled(app, host, port, access_log=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    asyncio.run(serve(args.host, args.port))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
