"""The Alertmanager webhook: ``POST /alerts`` on the controller, recording every alert in the
journal before it answers 2xx.

Alertmanager retries a notification only on a 5xx answer. So: 401/413/415/400/408 only for
requests no retry can fix (auth, size, type or encoding, malformed payload, a body that did not
arrive); 503 when the journal cannot commit within ``--journal.commit-timeout`` (locked, disk
full, frozen, closed, the file deleted or replaced: exporter.controller.journal_health), so
Alertmanager tries again; 500 for anything unexpected; 200 only once ``Journal.record`` returned,
i.e. the delivery is on disk. Every answer is JSON. Client mistakes are counted by reason and
logged at most once a minute (exporter.serve.ClientErrors), never once per request.

Built and installed by exporter.controller.wiring, which opens the journal and hands it over
(``Webhook.serve``). After a delivery that brought new or resolved alerts the receiver trips the
schedule it was given (exporter.controller.coordination); the executor, given the same schedule,
runs a pass and reads the journal. The webhook knows nothing of the executor.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import ssl
import time

from aiohttp import hdrs, web
from aiohttp.web_protocol import RequestPayloadError

from exporter.controller.coordination import Lead, Schedule
from exporter.controller.journal import CLOSED, JournalError, RecordResult
from exporter.controller.journal_health import JournalHealth
from exporter.controller.settings import TOKEN_ENV, WebhookSettings
from exporter.metrics import http
from exporter.metrics.webhook import WebhookMetrics
from exporter.model.names import shown
from exporter.model.payload import PayloadError, decode_payload
from exporter.serve import CLIENT_ERRORS, SERVER_SETTINGS, close_if_unread, error_response

log = logging.getLogger(__name__)

PATH = "/alerts"
#: The Content-Encodings of a body the webhook reads (aiohttp decodes them); no header is identity.
CONTENT_ENCODINGS = frozenset({"identity", "gzip", "deflate"})
_READ_CHUNK = 64 * 1024


class WebhookConfigError(Exception):
    """The webhook cannot start: no token, an unreadable token file, bad TLS files."""


def load_token(settings: WebhookSettings) -> bytes:
    """The bearer token, from the file or the environment (surrounding whitespace removed)."""
    if settings.token_file:
        try:
            with open(settings.token_file, "rb") as f:
                token = f.read().strip()
        except OSError as exc:
            raise WebhookConfigError(
                f"cannot read --webhook.token-file {settings.token_file}: {exc.strerror}"
            ) from None
        if not token:
            raise WebhookConfigError(f"--webhook.token-file {settings.token_file} is empty")
        return token
    if settings.token:
        return settings.token.encode()
    raise WebhookConfigError(
        f"the webhook needs a bearer token: set --webhook.token-file or {TOKEN_ENV}"
    )


def tls_context(settings: WebhookSettings) -> ssl.SSLContext | None:
    """A server TLS context (TLS 1.2 or newer) for the controller's listener, or None."""
    if not settings.tls:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
    except (OSError, ssl.SSLError) as exc:
        raise WebhookConfigError(
            f"cannot load --webhook.tls-cert-file {settings.tls_cert_file} / "
            f"--webhook.tls-key-file {settings.tls_key_file}: {exc}"
        ) from None
    return context


def _error(status: int, message: str, **headers: str) -> web.Response:
    return error_response(status, message, **headers)


def _refuse(
    request: web.Request, reason: str, status: int, message: str, **headers: str
) -> web.Response:
    """A client mistake: counted by reason, logged at most once a minute, answered in JSON."""
    request.app[CLIENT_ERRORS].observe(reason, message, request.remote)
    answer = _error(status, message, **headers)
    close_if_unread(request, answer)
    return answer


def _authorized(request: web.Request, expected: bytes) -> web.Response | None:
    """None if the request carries the right bearer token (``expected``: its SHA-256 digest),
    else the 401 to answer."""
    header = request.headers.get(hdrs.AUTHORIZATION, "")
    scheme, _, credentials = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        return _refuse(
            request,
            http.UNAUTHORIZED,
            401,
            "missing bearer token",
            **{hdrs.WWW_AUTHENTICATE: "Bearer"},
        )
    given = credentials.strip().encode("utf-8", "surrogateescape")
    # compared as digests: equal lengths, so the time taken tells nothing about the token
    if not hmac.compare_digest(hashlib.sha256(given).digest(), expected):
        return _refuse(
            request,
            http.UNAUTHORIZED,
            401,
            "invalid bearer token",
            **{hdrs.WWW_AUTHENTICATE: 'Bearer error="invalid_token"'},
        )
    return None


class _TooLarge(Exception):
    pass


async def _read_body(request: web.Request, limit: int) -> bytes:
    """The body (decoded from its Content-Encoding); _TooLarge once it grows past ``limit`` (a
    chunked or compressed body has no length up front)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_chunked(_READ_CHUNK):
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _cannot_read(request: web.Request, status: int, reason: str, message: str) -> web.Response:
    """The body cannot be read to its end: answered, and the connection closed after the answer
    (what is left of the body is not read)."""
    request.content.feed_eof()
    return _refuse(request, reason, status, message, **{hdrs.CONNECTION: "close"})


class Webhook:
    """``POST /alerts``: each delivery recorded in the journal (once it is open: ``serve``)
    before it is answered; a delivery that brought new or resolved alerts trips ``schedule``
    (the executor's next pass); a follower (``lead``) refuses deliveries."""

    def __init__(
        self,
        settings: WebhookSettings,
        token: bytes,
        metrics: WebhookMetrics,
        schedule: Schedule,
        lead: Lead,
    ) -> None:
        self._settings = settings
        self._expected = hashlib.sha256(token).digest()  # once, not per request
        self.metrics = metrics
        self._schedule = schedule
        self._lead = lead
        self._health: JournalHealth | None = None

    def serve(self, health: JournalHealth | None) -> None:
        """Record deliveries in ``health``'s journal from now on (None: answer 503)."""
        self._health = health

    async def receive(self, request: web.Request) -> web.Response:
        """The route's handler: any method, answered in JSON and counted."""
        started = time.perf_counter()
        try:
            response = await self._receive(request)
        except Exception:
            log.exception("webhook request failed")
            response = _error(500, "internal error; see the controller's log")
        self.metrics.observe_request(response.status, time.perf_counter() - started)
        return response

    async def _receive(self, request: web.Request) -> web.Response:
        if request.method != hdrs.METH_POST:
            return _refuse(
                request,
                http.METHOD_NOT_ALLOWED,
                405,
                f"use POST {PATH}",
                **{hdrs.ALLOW: hdrs.METH_POST},
            )
        refused = _authorized(request, self._expected)
        if refused is not None:
            return refused
        if self._lead.follower:
            # Closing the connection makes Alertmanager's retry pick a replica again.
            return _error(
                503, "not the leader; retry (another replica leads)", **{hdrs.CONNECTION: "close"}
            )
        limit = self._settings.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            return _refuse(request, http.TOO_LARGE, 413, f"the body is larger than {limit} bytes")
        if request.content_type != "application/json":
            return _refuse(
                request,
                http.UNSUPPORTED_MEDIA_TYPE,
                415,
                f"Content-Type must be application/json, got {shown(request.content_type, 64)}",
            )
        encoding = request.headers.get(hdrs.CONTENT_ENCODING, "identity").strip().lower()
        if encoding not in CONTENT_ENCODINGS:
            return _refuse(
                request,
                http.BAD_ENCODING,
                415,
                f"Content-Encoding {shown(encoding, 64)!r} is not supported: send the body as "
                "identity, gzip or deflate",
            )
        try:
            async with asyncio.timeout(request.app[SERVER_SETTINGS].read_timeout):
                raw = await _read_body(request, limit)
        except _TooLarge:
            return _cannot_read(
                request, 413, http.TOO_LARGE, f"the body is larger than {limit} bytes"
            )
        except TimeoutError:
            return _cannot_read(
                request,
                408,
                http.BODY_TIMEOUT,
                "the body did not arrive in time (--web.read-timeout)",
            )
        except web.HTTPException:
            raise
        except RequestPayloadError as exc:  # a body that is not in its encoding, a broken chunk
            reason = http.BAD_HTTP if encoding == "identity" else http.BAD_ENCODING
            cause = exc.__cause__ or exc
            return _cannot_read(
                request,
                400,
                reason,
                f"the body cannot be read ({encoding}): {shown(str(cause), 200)}",
            )
        try:
            payload = decode_payload(raw)
        except PayloadError as exc:
            return _refuse(request, http.MALFORMED_PAYLOAD, 400, exc.message)
        try:
            if self._health is None:
                raise JournalError("the journal is not open", CLOSED)
            result = await self._health.record(payload, received_at=time.time())
        except JournalError as exc:
            log.warning("cannot record alerts", extra={"reason": exc.reason, "error": str(exc)})
            return _error(503, f"cannot record the alerts, retry later: {exc}")
        self._recorded(result)
        log.info(
            "alerts recorded",
            extra={
                "receiver": shown(payload.receiver),
                "group_key": shown(payload.group_key, 200),
                "alerts": len(payload.alerts),
                "new": result.new,
                "duplicates": result.duplicates,
                "resolved": result.resolved,
                "truncated": result.truncated,
            },
        )
        return web.json_response(
            {
                "status": "recorded",
                "alerts": len(payload.alerts),
                "new": result.new,
                "duplicates": result.duplicates,
                "resolved": result.resolved,
                "truncated": result.truncated,
            }
        )

    def _recorded(self, result: RecordResult) -> None:
        self.metrics.observe_record(
            new_firing=result.new_firing,
            resolved=result.resolved,
            duplicates=result.duplicates,
            truncated=result.truncated,
        )
        if result.new or result.resolved:
            self._schedule.trip()
