"""The floors of bench.controller_sync: what a bare Python process costs for the controller's two
jobs, measured in the same run.

- ``list``: start, list every Node and every node Lease from the API server (one request each,
  as the controller's first lists, concurrently), decode the JSON, print how long that took
  and exit: the floor of the controller's start-until-synced (it cannot list faster than a
  process that does nothing else), and with its peak RSS, what holding the two lists decoded
  costs; with ``--watch``, then keep every object decoded by name and watch both kinds from
  their lists' resourceVersions, each event decoded and put in place, until SIGTERM: a bare
  list+watch, whose CPU while the Leases are renewed is the floor of the controller's;
- ``serve``: serve a file's bytes as ``GET /metrics`` with a bare aiohttp handler: the floor of
  a scrape of the same exposition (nothing rendered, nothing joined).

    .venv/bin/python -m bench.controller_floor list --kubeconfig PATH [--watch]
    .venv/bin/python -m bench.controller_floor serve --port PORT --body FILE
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from bench.harness.serving import serve_until_signalled
from nodesync_sim.yamlfile import load_file

NODES = "/api/v1/nodes"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


def _server_and_token(kubeconfig: Path) -> tuple[str, str]:
    config = load_file(kubeconfig)
    assert isinstance(config, dict)
    server = str(config["clusters"][0]["cluster"]["server"])
    token = str(config["users"][0]["user"]["token"])
    return server, token


async def list_both(kubeconfig: Path, watch: bool = False) -> dict[str, float]:
    server, token = _server_and_token(kubeconfig)
    started = time.perf_counter()
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http:

        async def one(path: str) -> tuple[dict[str, Any], str]:
            async with http.get(server + path, params={"resourceVersion": "0"}) as response:
                body = json.loads(await response.read())
            items = {item["metadata"]["name"]: item for item in body["items"]}
            return items, str(body["metadata"]["resourceVersion"])

        (nodes, nodes_rv), (leases, leases_rv) = await asyncio.gather(one(NODES), one(LEASES))
        answer = {
            "nodes": len(nodes),
            "leases": len(leases),
            "seconds": time.perf_counter() - started,
            "peak_rss_bytes": _peak_rss_bytes(),
        }
        if watch:
            print(json.dumps(answer), flush=True)
            events = await _watch_until_signalled(
                http, [(server + NODES, nodes_rv, nodes), (server + LEASES, leases_rv, leases)]
            )
            answer = {**answer, "events": events, "peak_rss_bytes": _peak_rss_bytes()}
    return answer


async def _watch_until_signalled(
    http: aiohttp.ClientSession, watches: list[tuple[str, str, dict[str, Any]]]
) -> int:
    """Watch each list's URL from its resourceVersion, every event decoded and its object put in
    (or taken out of) the list's items, until SIGTERM or SIGINT: how many events came."""
    events = 0

    async def follow(url: str, rv: str, items: dict[str, Any]) -> None:
        nonlocal events
        while True:
            params = {"watch": "true", "resourceVersion": rv, "allowWatchBookmarks": "true"}
            timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
            async with http.get(url, params=params, timeout=timeout) as response:
                async for line in response.content:
                    event = json.loads(line)
                    obj = event["object"]
                    rv = obj["metadata"]["resourceVersion"]
                    if event["type"] in ("ADDED", "MODIFIED"):
                        items[obj["metadata"]["name"]] = obj
                    elif event["type"] == "DELETED":
                        items.pop(obj["metadata"]["name"], None)
                    else:
                        continue  # a bookmark
                    events += 1

    async def report() -> None:
        """The count so far once a second while it changes, so that a caller can wait for it."""
        shown = 0
        while True:
            await asyncio.sleep(1.0)
            if events != shown:
                shown = events
                print(json.dumps({"events": shown}), flush=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    tasks = [asyncio.create_task(follow(*w)) for w in watches]
    tasks.append(asyncio.create_task(report()))
    await stop.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return events


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
    listing.add_argument(
        "--watch", action="store_true", help="then hold and watch both kinds until SIGTERM"
    )
    serving = commands.add_parser("serve", help="serve a file as /metrics")
    serving.add_argument("--port", type=int, required=True)
    serving.add_argument("--body", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "list":
        print(json.dumps(asyncio.run(list_both(args.kubeconfig, args.watch))), flush=True)
    else:
        asyncio.run(serve(args.port, args.body.read_bytes()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
