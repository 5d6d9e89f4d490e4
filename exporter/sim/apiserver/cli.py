"""`nodesync sim apiserver`: serve the test API server until interrupted.

Writes a kubeconfig for it and prints the path, so `KUBECONFIG=<path> nodesync ...` talks to it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import signal
import tempfile
from pathlib import Path

from exporter.sim.apiserver.server import APIServer


def _listen_address(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected host:port, got {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--web.listen-address",
        dest="listen_address",
        type=_listen_address,
        default=("127.0.0.1", 6443),
        help="host:port to serve the Kubernetes API on (plain HTTP; default 127.0.0.1:6443)",
    )
    parser.add_argument(
        "--token",
        default=os.environ.get("NODESYNC_SIM_TOKEN", ""),
        help="bearer token clients must send (default: $NODESYNC_SIM_TOKEN or a random one)",
    )
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        default=None,
        help="where to write a kubeconfig for this server (default: a new temporary file)",
    )
    parser.add_argument(
        "--bookmark-interval",
        type=float,
        default=60.0,
        help="seconds between watch bookmarks (default 60)",
    )
    parser.add_argument(
        "--history-limit",
        type=int,
        default=20_000,
        help="changes kept for watches from older resourceVersions (default 20000)",
    )


async def run(args: argparse.Namespace) -> int:
    host, port = args.listen_address
    server = APIServer(
        host=host,
        port=port,
        token=args.token or secrets.token_urlsafe(24),
        history_limit=args.history_limit,
        bookmark_interval=args.bookmark_interval,
    )
    path: Path = args.kubeconfig or Path(tempfile.mkdtemp(prefix="nodesync-sim-")) / "kubeconfig"
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
