"""The floors of bench.controller_sync: what a bare Python process costs for the controller's two
jobs, measured in the same run.

- ``list``: start, list every Node and every node Lease from the API server (one request each,
  as the controller's first lists, concurrently), decode the JSON, print how long that took
  and exit: the floor of the controller's start-until-synced (it cannot list faster than a
  process that does nothing else), and with its peak RSS, what holding the two lists decoded
  costs;
- ``serve``: serve a file's bytes as ``GET /metrics`` with a bare aiohttp handler: the floor of
  a scrape of the same exposition (nothing rendered, nothing joined).

    .venv/bin/python -m bench.controller_floor list --kubeconfig PATH
    .venv/bin/python -m bench.controller_floor serve --port PORT --body FILE
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import aiohttp
from aiohttp import web

from bench.harness.serving import serve_until_signalled
from nodesync_sim.yamlfile import load_file

NODES = "/api/v1/nodes?resourceVersion=0"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases?resourceVersion=0"


def _server_and_token(kubeconfig: Path) -> tuple[str, str]:
    config = load_file(kubeconfig)
    assert isinstance(config, dict)
    server = str(config["clusters"][0]["cluster"]["server"])
    token = str(config["users"][0]["user"]["token"])
    return server, token


async def list_both(kubeconfig: Path) -> dict[str, float]:
    server, token = _server_and_token(kubeconfig)
    started = time.perf_counter()
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http:

        async def one(path: str) -> int:
            async with http.get(server + path) as response:
                body = json.loads(await response.read())
                return len(body["items"])

        nodes, leases = await asyncio.gather(one(NODES), one(LEASES))
    return {
        "nodes": nodes,
        "leases": leases,
        "seconds": time.perf_counter() - started,
        "peak_rss_bytes": _peak_rss_bytes(),
    }


def _peak_rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


async def serve(port: int, body: bytes) -> None:
    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    await serve_until_signalled(app, "127.0.0.1", port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    commands = parser.add_subparsers(dest="command", required=True)
    listing = commands.add_parser("list", help="list Nodes and Leases once, then exit")
    listing.add_argument("--kubeconfig", type=Path, required=True)
    serving = commands.add_parser("serve", help="serve a file as /metrics")
    serving.add_argument("--port", type=int, required=True)
    serving.add_argument("--body", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "list":
        print(json.dumps(asyncio.run(list_both(args.kubeconfig))), flush=True)
    else:
        asyncio.run(serve(args.port, args.body.read_bytes()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
