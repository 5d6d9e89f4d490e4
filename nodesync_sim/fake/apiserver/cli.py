"""`nodesync sim apiserver`: serve the test API server until interrupted.

Writes a kubeconfig for it and prints the path, so `KUBECONFIG=<path> nodesync ...` talks to it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import secrets
import signal
import tempfile
from pathlib import Path

from nodesync_sim.fake.apiserver.server import APIServer


async def run(args: argparse.Namespace) -> int:
    host, port = args.web_listen_address
    server = APIServer(
        host=host,
        port=port,
        token=args.token or secrets.token_urlsafe(24),
        history_limit=args.history_limit,
        history_seconds=args.history_age,
        bookmark_interval=args.bookmark_interval,
    )
    if args.kubeconfig:
        path = Path(args.kubeconfig)
    else:
        path = Path(tempfile.mkdtemp(prefix="nodesync-sim-")) / "kubeconfig"
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        async with server:
            server.write_kubeconfig(path)
            print(f"serving the Kubernetes API on {server.url}", flush=True)
            print(f"kubeconfig: {path}", flush=True)
            await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)
    return 0
