"""Each connection of the listener: an aiohttp HTTP/1 protocol that answers a request it cannot
parse in JSON (:class:`_Handler`), or, over the cap, a 503 and a close (:class:`_Refused`); the
cap itself, lowered below the open-file limit (:func:`connection_cap`)."""

from __future__ import annotations

import asyncio
import json
import logging
import resource
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import ContentEncodingError
from aiohttp.web_protocol import RequestHandler, RequestPayloadError

from exporter.metrics.http import BAD_ENCODING, BAD_HTTP, TOO_MANY_CONNECTIONS
from exporter.model.names import shown
from exporter.serve.clients import ClientErrors
from exporter.serve.middleware import error_response
from exporter.settings.server import ServerSettings

log = logging.getLogger(__package__)

#: Descriptors kept for the process itself (journal, API connections, CRI, logs) below the cap.
FD_RESERVE = 64


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


class Connections:
    """The listener's protocol factory: a :class:`_Handler` for each connection of ``server``,
    at most ``max_connections`` at once (aiohttp has no such limit); one more is refused."""

    def __init__(
        self,
        server: web.Server,
        *,
        settings: ServerSettings,
        max_connections: int,
        client_errors: ClientErrors,
    ) -> None:
        self._server = server
        self._settings = settings
        self._max_connections = max_connections
        self._client_errors = client_errors

    def __call__(self) -> asyncio.Protocol:
        if len(self._server.connections) >= self._max_connections:
            self._client_errors.observe(TOO_MANY_CONNECTIONS, f"{self._max_connections} open")
            return _Refused()
        return _Handler(
            self._server,
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
