"""The floor of bench.storm: a bare aiohttp handler for Alertmanager's webhook.

One route, ``POST /alerts``: read the body, parse it as JSON, answer 200. No token check, no
validation, no journal: what any Python webhook receiver on aiohttp costs at least. bench.storm
starts it as a child process and posts it the same payloads as the controller, in the same run:

    .venv/bin/python -m bench.storm_floor --port PORT
"""

from __future__ import annotations

import argparse
import asyncio
import json

from aiohttp import web

from bench.harness.serving import serve_until_signalled


async def alerts(request: web.Request) -> web.Response:
    body = await request.read()
    json.loads(body)
    return web.json_response({"status": "ok"})


async def serve(host: str, port: int) -> None:
    app = web.Application()
    app.router.add_post("/alerts", alerts)
    await serve_until_signalled(app, host, port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    asyncio.run(serve(args.host, args.port))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
