"""The HTTP server's instruments (both roles serve /metrics, the controller also the webhook):
the requests and connections it refused for what a client did, by a bounded ``reason``, and the
requests being handled."""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge

BAD_HTTP: Final = "bad_http"  # not HTTP the server can parse: request line, headers, chunks
NOT_FOUND: Final = "not_found"
METHOD_NOT_ALLOWED: Final = "method_not_allowed"
TOO_LARGE: Final = "too_large"  # a body over the limit
UNSUPPORTED_MEDIA_TYPE: Final = "unsupported_media_type"  # Content-Type
BAD_ENCODING: Final = "bad_encoding"  # a Content-Encoding unknown, or a body not in it
UNAUTHORIZED: Final = "unauthorized"
MALFORMED_PAYLOAD: Final = "malformed_payload"  # not JSON, or not a valid webhook payload
BODY_TIMEOUT: Final = "body_timeout"  # the body did not arrive within --web.read-timeout
TOO_MANY_CONNECTIONS: Final = "too_many_connections"  # over --web.max-connections
OTHER: Final = "other"  # any other 4xx

#: Every value of the ``reason`` label, each present from the start.
CLIENT_ERROR_REASONS: Final = (
    BAD_HTTP,
    NOT_FOUND,
    METHOD_NOT_ALLOWED,
    TOO_LARGE,
    UNSUPPORTED_MEDIA_TYPE,
    BAD_ENCODING,
    UNAUTHORIZED,
    MALFORMED_PAYLOAD,
    BODY_TIMEOUT,
    TOO_MANY_CONNECTIONS,
    OTHER,
)

_BY_STATUS: Final = {
    400: BAD_HTTP,
    401: UNAUTHORIZED,
    404: NOT_FOUND,
    405: METHOD_NOT_ALLOWED,
    408: BODY_TIMEOUT,
    413: TOO_LARGE,
    415: UNSUPPORTED_MEDIA_TYPE,
    431: BAD_HTTP,
}


def reason_of_status(status: int) -> str:
    """The reason of a 4xx the framework answered by itself."""
    return _BY_STATUS.get(status, OTHER)


class ClientErrorMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self._refused = Counter(
            "nodesync_http_client_errors_total",
            "Requests and connections the HTTP server refused for what the client did, by reason.",
            labelnames=["reason"],
            registry=registry,
        )
        for reason in CLIENT_ERROR_REASONS:
            self._refused.labels(reason=reason)
        self.in_flight = Gauge(
            "nodesync_http_requests_in_flight",
            "Requests being handled: their head was read, their answer not yet sent.",
            registry=registry,
        )

    def observe(self, reason: str) -> None:
        self._refused.labels(reason=reason if reason in CLIENT_ERROR_REASONS else OTHER).inc()
