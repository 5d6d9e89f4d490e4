"""Serving a small aiohttp app from a benchmark's child process until SIGINT or SIGTERM.

The floors (bench.storm_floor, bench.controller_floor) and stand-ins (bench.kubelet_healthz)
are served the way the controller serves its app (exporter.serve): an AppRunner and a TCPSite.
"listening" on stdout once the socket is bound, for the parent to wait on.
"""

from __future__ import annotations

import asyncio
import signal

from aiohttp import web
from aiohttp.log import access_logger


async def serve_until_signalled(
    app: web.Application, host: str, port: int, *, access_log: bool = True
) -> None:
    runner = web.AppRunner(
        app, handle_signals=False, access_log=access_logger if access_log else None
    )
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await web.TCPSite(runner, host, port).start()
        print("listening", flush=True)
        await stop.wait()
    finally:
        await runner.cleanup()
