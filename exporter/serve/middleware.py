"""Every request of a hardened application: counted in flight, the framework's own error answers
(404, 405, ...) in JSON and counted, and once the server stops, each answer closes its
connection (:func:`harden`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from exporter.metrics.http import reason_of_status
from exporter.serve.clients import ClientErrors, InFlight
from exporter.serve.keys import CLIENT_ERRORS, IN_FLIGHT, SERVER_SETTINGS
from exporter.settings.server import ServerSettings


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
