"""Serve an aiohttp application until SIGINT or SIGTERM, then shut it down within a bound.

Both roles serve their application (/metrics, /healthz, /readyz; the controller's webhook) with
:func:`serve`, hardened against what clients do (docs/install.md, docs/metrics.md):

- Every error the framework answers by itself is JSON (``{"error": ...}``): 404, 405 and the
  other HTTP exceptions (:func:`harden`'s middleware), and the 400 for a request it cannot parse
  (:class:`_Handler`). These client mistakes are counted in ``nodesync_http_client_errors_total``
  by reason and logged at most once a minute per reason (:class:`ClientErrors`), never at ERROR.
- A connection that has not sent a whole request head ``--web.idle-timeout`` after it opened or
  after its last answer is closed (aiohttp's keep-alive timer covers both); a body is read for
  at most ``--web.read-timeout`` (the handlers that read one; an unread body is drained for as
  long after the answer, then the connection is closed); TLS handshakes get the idle timeout.
- At most ``--web.max-connections`` connections are open: one more is answered 503 and closed
  (:class:`_Site`). The soft limit of open files is raised to its hard limit at start, and the
  cap lowered below it if needed, so that clients cannot take the descriptors the process needs;
  should the accept loop still run out of them, asyncio's error is logged once a minute.
- On SIGTERM the listener closes, requests in progress get ``--web.shutdown-timeout`` to
  finish (their answers close their connections), then every connection is closed and what is
  left is cancelled: the process exits within about the shutdown timeout plus 2 s.
"""

from __future__ import annotations

import asyncio
import errno
import html
import json
import logging
import os
import resource
import signal
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import ContentEncodingError
from aiohttp.web_protocol import RequestHandler, RequestPayloadError
from prometheus_client import CollectorRegistry

from exporter.logs import RateLimitedLog
from exporter.metrics.http import (
    BAD_ENCODING,
    BAD_HTTP,
    TOO_MANY_CONNECTIONS,
    ClientErrorMetrics,
    reason_of_status,
)
from exporter.model.names import shown
from exporter.settings.server import ServerSettings

log = logging.getLogger(__name__)

#: Descriptors kept for the process itself (journal, API connections, CRI, logs) below the cap.
FD_RESERVE = 64
#: After the shutdown timeout, how long aiohttp waits for idle connections to close and for
#: cancelled requests to end (twice at most).
CANCEL_WAIT = 1.0
#: How often one kind of client mistake, or of accept-loop failure, is logged at most.
LOG_INTERVAL = 60.0
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


class ClientErrors:
    """Client mistakes: counted by reason, logged at WARNING at most once per reason and
    ``interval`` (the next line says how many were left out)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        interval: float = LOG_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.metrics = ClientErrorMetrics(registry)
        self._log = RateLimitedLog(log, interval=interval, clock=clock)

    def observe(self, reason: str, detail: str = "", remote: str | None = None) -> None:
        self.metrics.observe(reason)
        self._log.log(
            logging.WARNING,
            reason,
            "refused a client request",
            reason=reason,
            detail=shown(detail, 200),
            remote=remote or "",
        )


CLIENT_ERRORS = web.AppKey("client_errors", ClientErrors)


class InFlight:
    """The requests being handled (in ``nodesync_http_requests_in_flight``); once ``stopping``,
    their answers close their connections."""

    def __init__(self, metrics: ClientErrorMetrics) -> None:
        self.count = 0
        self.stopping = False
        self._gauge = metrics.in_flight
        self._idle = asyncio.Event()
        self._idle.set()

    def started(self) -> None:
        self.count += 1
        self._gauge.set(self.count)
        self._idle.clear()

    def finished(self) -> None:
        self.count -= 1
        self._gauge.set(self.count)
        if self.count == 0:
            self._idle.set()

    async def idle(self) -> None:
        await self._idle.wait()


IN_FLIGHT = web.AppKey("in_flight", InFlight)
#: The listener's settings: the timeouts handlers apply (the webhook's body read) and serve's.
SERVER_SETTINGS = web.AppKey("server_settings", ServerSettings)


def error_response(status: int, message: str, **headers: str) -> web.Response:
    """The JSON answer of every refusal: ``{"error": message}``. With ``Connection: close`` the
    connection is closed after the answer (the header alone would not close it)."""
    response = web.json_response({"error": message}, status=status, headers=headers or None)
    if headers.get("Connection", "").lower() == "close":
        response.force_close()
    return response


def close_if_unread(request: web.BaseRequest, response: web.StreamResponse) -> None:
    """An answer given before the request's body was read closes the connection after it (as
    Go's server does): the client then knows not to send its next request on a connection the
    server would drop while draining this body."""
    if not request.content.at_eof():
        response.force_close()


@web.middleware
async def _guard(request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
    """Every request: counted in flight; the framework's own error answers (404, 405, ...) in
    JSON and counted; once the server stops, each answer closes its connection."""
    in_flight = request.app[IN_FLIGHT]
    in_flight.started()
    try:
        response: web.StreamResponse = await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        if exc.status < 500:
            request.app[CLIENT_ERRORS].observe(
                reason_of_status(exc.status), f"{request.method} {request.path}", request.remote
            )
        kept = {k: v for k, v in exc.headers.items() if k.lower() not in _BODY_HEADERS}
        response = error_response(exc.status, exc.reason, **kept)
        close_if_unread(request, response)
    finally:
        in_flight.finished()
    if in_flight.stopping:
        response.force_close()
    return response


_BODY_HEADERS = frozenset({"content-type", "content-length"})


def landing_page(
    title: str, description: str, links: Sequence[tuple[str, str]], version: str
) -> Callable[[web.Request], Any]:
    """A handler for ``/``: a small HTML page naming the program and its version, with links to
    ``links`` (path, what it is), as Prometheus' exporters answer ``/`` (exporter-toolkit's
    landing page) instead of 404."""
    rows = "\n".join(
        f'<li><a href="{html.escape(path)}">{html.escape(path)}</a>: {html.escape(what)}</li>'
        for path, what in links
    )
    page = (
        '<!DOCTYPE html>\n<html lang="en">\n<head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title></head>\n<body>\n"
        f"<h1>{html.escape(title)}</h1>\n<p>{html.escape(description)}</p>\n"
        f"<ul>\n{rows}\n</ul>\n<p>Version {html.escape(version)}</p>\n</body>\n</html>\n"
    ).encode()

    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=page, content_type="text/html", charset="utf-8")

    return handler


def harden(
    app: web.Application, registry: CollectorRegistry, settings: ServerSettings | None = None
) -> None:
    """JSON for the framework's own error answers (404, 405, ...), counted in ``registry``; the
    application is served with ``settings`` (its handlers read them as
    ``app[SERVER_SETTINGS]``). Call it when the application is made; its handlers report their
    own refusals with ``app[CLIENT_ERRORS].observe``."""
    app[CLIENT_ERRORS] = ClientErrors(registry)
    app[SERVER_SETTINGS] = settings or ServerSettings()
    app[IN_FLIGHT] = InFlight(app[CLIENT_ERRORS].metrics)
    app.middlewares.append(_guard)


class _Handler(RequestHandler):
    """aiohttp's HTTP/1 protocol; a request it cannot parse (bad request line, headers, chunks,
    a header over the size limits, an undecodable Content-Encoding) is answered in JSON, counted
    and logged at most once a minute, not at ERROR with a traceback for each."""

    __slots__ = ("_client_errors",)

    def __init__(self, manager: web.Server, *, client_errors: ClientErrors, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._client_errors = client_errors

    def handle_error(
        self,
        request: Any,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status >= 500:
            return super().handle_error(request, status, exc, message)  # a bug: its traceback
        reason = BAD_ENCODING if isinstance(exc, ContentEncodingError) else BAD_HTTP
        self._client_errors.observe(reason, message or str(exc or ""), request.remote)
        if request.writer.output_size > 0:
            raise ConnectionError("an answer was sent already")
        response = error_response(status, f"bad request: {shown(message or '', 200)}")
        response.force_close()
        return response

    def log_exception(self, *args: Any, **kwargs: Any) -> None:
        # A body that cannot be read (a broken gzip, a bad chunk) was answered by its handler;
        # aiohttp then fails again to drain it: the client's mistake, counted already.
        exc = kwargs.get("exc_info")
        if isinstance(exc, RequestPayloadError):
            log.debug("dropped a request body that cannot be read", exc_info=exc)
            return
        super().log_exception(*args, **kwargs)


class _Refused(asyncio.Protocol):
    """A connection over the cap: answered 503 (clients retry) and closed at once."""

    _BODY = json.dumps({"error": "too many connections; retry"}).encode()
    ANSWER = (
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(_BODY)).encode() + b"\r\nConnection: close\r\n\r\n" + _BODY
    )

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(self.ANSWER)
        transport.close()


class _Site(web.BaseSite):
    """A TCP listener whose connections are :class:`_Handler` protocols, at most
    ``max_connections`` at once (aiohttp has no such limit)."""

    __slots__ = ("_client_errors", "_host", "_max_connections", "_port", "_settings")

    def __init__(
        self,
        runner: web.AppRunner,
        host: str,
        port: int,
        *,
        settings: ServerSettings,
        max_connections: int,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._host = host
        self._port = port
        self._settings = settings
        self._max_connections = max_connections
        self._client_errors = runner.app[CLIENT_ERRORS]

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{self._host}:{self.port}"

    @property
    def port(self) -> int:
        """The port bound (the one asked for until started)."""
        if self._server is not None and self._server.sockets:  # type: ignore[attr-defined]
            return int(self._server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]
        return self._port

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._protocol,
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            ssl_handshake_timeout=self._settings.idle_timeout if self._ssl_context else None,
        )

    def _protocol(self) -> asyncio.Protocol:
        server = self._runner.server
        assert server is not None
        if len(server.connections) >= self._max_connections:
            self._client_errors.observe(TOO_MANY_CONNECTIONS, f"{self._max_connections} open")
            return _Refused()
        return _Handler(
            server,
            loop=asyncio.get_running_loop(),
            client_errors=self._client_errors,
            keepalive_timeout=self._settings.idle_timeout,
            lingering_time=self._settings.read_timeout,
        )


def connection_cap(wanted: int) -> int:
    """``wanted``, or fewer so that the open-file limit keeps ``FD_RESERVE`` descriptors for the
    process: the soft limit is raised to the hard limit first (as Go programs do)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, wanted + FD_RESERVE)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-file limit", extra={"error": str(exc)})
    if soft == resource.RLIM_INFINITY or wanted + FD_RESERVE <= soft:
        return wanted
    capped = max(1, soft - FD_RESERVE)
    log.warning(
        "fewer connections than --web.max-connections: the open-file limit is lower",
        extra={"max_connections": capped, "open_file_limit": soft},
    )
    return capped


def _bounded_exception_handler(loop: asyncio.AbstractEventLoop) -> None:
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
        self._site: _Site | None = None
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
            self._site = _Site(
                self.runner,
                self._host,
                self._port,
                settings=self._settings,
                max_connections=connection_cap(self._settings.max_connections),
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
    _bounded_exception_handler(loop)
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
