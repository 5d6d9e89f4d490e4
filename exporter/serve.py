"""Run an aiohttp application until SIGINT or SIGTERM, then shut it down cleanly."""

from __future__ import annotations

import asyncio
import logging
import signal
import ssl

from aiohttp import web

log = logging.getLogger(__name__)


async def serve(
    app: web.Application,
    host: str,
    port: int,
    stop: asyncio.Event | None = None,
    *,
    ssl_context: ssl.SSLContext | None = None,
) -> None:
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
        await site.start()
        log.info("listening", extra={"address": f"{host}:{port}"})
        await stop.wait()
        log.info("shutting down")
    finally:
        await runner.cleanup()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
