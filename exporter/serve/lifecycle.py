"""Serving an application: :class:`Served` starts it and its listener and stops them within the
shutdown timeout; :func:`serve` does so until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import socket
import ssl
from typing import Any

from aiohttp import web

from exporter.logs import RateLimitedLog
from exporter.serve.clients import LOG_INTERVAL
from exporter.serve.connections import Connections, connection_cap
from exporter.serve.keys import CLIENT_ERRORS, IN_FLIGHT, SERVER_SETTINGS
from exporter.serve.site import CappedSite

log = logging.getLogger(__package__)

#: After the shutdown timeout, how long aiohttp waits for idle connections to close and for
#: cancelled requests to end (twice at most).
CANCEL_WAIT = 1.0
_OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class ListenError(Exception):
    """The listener cannot be opened (the port is taken, the address is not this host's, ...):
    ``address`` as given, ``reason`` the system's words (``address already in use``)."""

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(f"{address}: {reason}")
        self.address = address
        self.reason = reason


def _reason(exc: OSError) -> str:
    """The system's words for ``exc`` (asyncio's bind error wraps them in its own)."""
    if isinstance(exc, socket.gaierror) or not exc.errno or exc.errno < 0:
        return str(exc.strerror or exc).lower()
    return os.strerror(exc.errno).lower()


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bounded_exception_handler(loop: asyncio.AbstractEventLoop) -> None:
    """asyncio's own errors, but running out of descriptors (the accept loop retries every
    second and says so each time) is logged at most once a minute."""
    limited = RateLimitedLog(logging.getLogger("asyncio"), interval=LOG_INTERVAL)

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in _OUT_OF_DESCRIPTORS:
            limited.log(
                logging.ERROR,
                "out of descriptors",
                "out of file descriptors or buffers",
                error=str(exc),
                what=str(context.get("message", "")),
            )
            return
        loop.default_exception_handler(context)

    loop.set_exception_handler(handle)


class Served:
    """An application being served on a socket: :meth:`start`, then :meth:`stop`."""

    def __init__(
        self,
        app: web.Application,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if CLIENT_ERRORS not in app:
            raise RuntimeError("serve a hardened application (exporter.serve.harden)")
        settings = app[SERVER_SETTINGS]
        # aiohttp's own wait, once the shutdown timeout passed: for cancelled requests to end
        self.runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=CANCEL_WAIT)
        self._host = host
        self._port = port
        self._settings = settings
        self._ssl_context = ssl_context
        self._site: CappedSite | None = None
        self._stopped = False

    @property
    def port(self) -> int:
        assert self._site is not None
        return self._site.port

    async def start(self) -> None:
        """Start the application (its cleanup contexts) and listen. On failure nothing is left
        running; a listener that cannot be opened is a :class:`ListenError`."""
        await self.runner.setup()
        try:
            server = self.runner.server
            assert server is not None
            protocols = Connections(
                server,
                settings=self._settings,
                max_connections=connection_cap(self._settings.max_connections),
                client_errors=self.runner.app[CLIENT_ERRORS],
            )
            self._site = CappedSite(
                self.runner,
                self._host,
                self._port,
                protocols=protocols,
                handshake_timeout=self._settings.idle_timeout,
                ssl_context=self._ssl_context,
            )
            try:
                await self._site.start()
            except OSError as exc:
                raise ListenError(_address(self._host, self._port), _reason(exc)) from exc
        except BaseException:
            await self.runner.cleanup()
            raise

    async def stop(self) -> None:
        """Stop listening; give the requests in progress the shutdown timeout to finish (their
        bodies still arrive: aiohttp reads nothing more once its own shutdown starts); then
        close every connection, cancel what is left, and stop the application."""
        if self._stopped:
            return
        self._stopped = True
        app = self.runner.app
        in_flight = app[IN_FLIGHT]
        in_flight.stopping = True
        if self._site is not None:
            await self._site.stop()  # no new connections
        try:
            async with asyncio.timeout(app[SERVER_SETTINGS].shutdown_timeout):
                await in_flight.idle()
        except TimeoutError:
            log.warning(
                "requests still in progress after --web.shutdown-timeout: cancelled",
                extra={"requests": in_flight.count},
            )
        await self.runner.cleanup()


async def serve(
    app: web.Application,
    host: str,
    port: int,
    stop: asyncio.Event | None = None,
    *,
    ssl_context: ssl.SSLContext | None = None,
) -> None:
    """Serve ``app`` (made with :func:`harden`, whose settings apply) until ``stop`` is set or
    SIGINT or SIGTERM arrives."""
    stop = stop or asyncio.Event()
    settings = app[SERVER_SETTINGS]
    loop = asyncio.get_running_loop()
    bounded_exception_handler(loop)
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    served = Served(app, host, port, ssl_context=ssl_context)
    try:
        await served.start()
        try:
            log.info("listening", extra={"address": f"{host}:{served.port}"})
            await stop.wait()
            log.info("shutting down", extra={"shutdown_timeout": settings.shutdown_timeout})
        finally:
            await served.stop()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
