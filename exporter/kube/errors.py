"""Domain errors of the Kubernetes API boundary.

exporter.kube translates every failed API call into one of these, raised ``from`` the original
error, so nothing outside the package sees kubernetes or aiohttp types. The class is chosen
from the HTTP status code and the Status ``reason`` only, never from message text.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import msgspec

from exporter.kube.objects import Status

#: The ``code`` of errors that never reached an HTTP answer (connection refused, timeout).
CODE_UNREACHABLE = 0


class KubeError(Exception):
    """An API call failed.

    ``code`` is the HTTP status (0 when the server was not reached), ``reason`` the Status
    reason (``"NotFound"``, ``"Expired"`` ...), ``retry_after`` the seconds the server asked to
    wait (Retry-After header or details.retryAfterSeconds), ``causes`` the Status causes' reasons.
    """

    def __init__(
        self,
        code: int,
        reason: str,
        message: str = "",
        *,
        retry_after: float | None = None,
        causes: tuple[str, ...] = (),
    ) -> None:
        self.code = code
        self.reason = reason
        self.message = message
        self.retry_after = retry_after
        self.causes = causes
        detail = f": {message}" if message else ""
        super().__init__(f"{code} {reason}{detail}")

    @property
    def retryable(self) -> bool:
        """Whether asking again, unchanged, may succeed: the server was not reached, failed,
        throttled, or lost a race (409 Conflict, 410 Expired). A request the server refused
        for what it is (400, 401, 403, 404, 422, AlreadyExists) fails the same way again."""
        return True


class _Final(KubeError):
    @property
    def retryable(self) -> bool:
        return False


class BadRequest(_Final):
    """400: the request is malformed for this server (e.g. a kind it does not serve)."""


class Invalid(_Final):
    """422: the object fails the server's validation."""


class NotFound(_Final):
    """404: the object (or the resource type) does not exist."""


class Conflict(KubeError):
    """409: a stale resourceVersion (reason Conflict) or an existing name (AlreadyExists)."""


class AlreadyExists(Conflict):
    """409 with reason AlreadyExists."""

    @property
    def retryable(self) -> bool:
        return False


class Gone(KubeError):
    """410 Expired: the resourceVersion is too old; list again."""


class TooManyRequests(KubeError):
    """429: throttled (or an eviction blocked by a PodDisruptionBudget); see ``retry_after``."""


class Unauthorized(_Final):
    """401: no or an unknown credential."""


class Forbidden(_Final):
    """403: the credential may not do this."""


class ServerError(KubeError):
    """5xx: the server failed; retrying later may succeed."""


class Unreachable(KubeError):
    """No HTTP answer: connection refused or reset, DNS, TLS, or a timeout. ``code`` is 0."""


class InvalidResponse(KubeError):
    """A 2xx answer whose body is not the JSON the API promises."""


class InvalidName(_Final):
    """A request was not sent: the object's name or namespace is not a name the API server
    could hold (``..``, ``a/status``, over-long), so no path is built from it. ``code`` is 0."""


_BY_CODE: dict[int, type[KubeError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}

#: The cause reason a server gives when asked for a resourceVersion it has not reached yet.
CAUSE_RESOURCE_VERSION_TOO_LARGE = "ResourceVersionTooLarge"


def error_class(code: int, reason: str) -> type[KubeError]:
    """The most specific error class for an HTTP status and Status reason."""
    if code == 409 and reason == "AlreadyExists":
        return AlreadyExists
    if code >= 500:
        return ServerError
    if code == CODE_UNREACHABLE:
        return Unreachable
    return _BY_CODE.get(code, KubeError)


def _retry_after_header(headers: Mapping[str, str] | None) -> float | None:
    if not headers:
        return None
    value = headers.get("Retry-After")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None  # an HTTP date: rare from API servers; fall back to our own backoff
    return seconds if seconds >= 0 else None


_NO_STATUS = Status()
_STATUS = msgspec.json.Decoder(Status)


def _status(body: bytes | str | Mapping[str, Any] | None) -> Status:
    """The Status a body holds; an empty one for a body that is not a Status."""
    try:
        if isinstance(body, bytes | str):
            return _STATUS.decode(body) if body else _NO_STATUS
        if isinstance(body, Mapping):
            return msgspec.convert(dict(body), Status)
    except msgspec.DecodeError:  # a ValidationError is one too
        pass
    return _NO_STATUS


def from_status(
    code: int,
    body: bytes | str | Mapping[str, Any] | None,
    headers: Mapping[str, str] | None = None,
    *,
    http_reason: str = "",
) -> KubeError:
    """The error for a non-2xx answer: ``body`` is the Status object (raw or parsed), if any.

    The Status' own ``code`` and ``reason`` win over the HTTP line (a watch ERROR event is
    carried by an HTTP 200); a body that is not a Status leaves the HTTP status in charge.
    """
    status = _status(body)
    if status.code is not None and status.code > 0:
        code = status.code
    reason = status.reason or http_reason or "Unknown"
    retry_after = _retry_after_header(headers)
    causes: tuple[str, ...] = ()
    if status.details is not None:
        seconds = status.details.retry_after_seconds
        if retry_after is None and seconds is not None:
            retry_after = float(seconds)
        causes = tuple(c.reason for c in status.details.causes or () if c.reason)
    message = status.message or ""
    return error_class(code, reason)(code, reason, message, retry_after=retry_after, causes=causes)


def unreachable(exc: BaseException) -> Unreachable:
    """The error for a request that got no HTTP answer (raise it ``from exc``)."""
    reason = "Timeout" if isinstance(exc, TimeoutError) else "Unreachable"
    return Unreachable(CODE_UNREACHABLE, reason, str(exc) or type(exc).__name__)


def is_resource_version_too_large(err: KubeError) -> bool:
    """A read asked for a resourceVersion newer than the server has: relist from scratch."""
    return CAUSE_RESOURCE_VERSION_TOO_LARGE in err.causes


def translate(exc: BaseException) -> KubeError:
    """The domain error for an exception of the kubernetes client or the transport.

    Raise the result ``from exc``. Anything unknown becomes a plain KubeError with code 0.
    """
    if isinstance(exc, KubeError):
        return exc
    # Imported here so this module stays cheap to import for code that only matches errors.
    import aiohttp

    if _is_client_package_error(exc):
        api: Any = exc
        status = api.status if isinstance(api.status, int) else 0
        if status == 0:
            return KubeError(CODE_UNREACHABLE, "ClientError", str(api.reason or exc))
        headers = api.headers if isinstance(api.headers, Mapping) else None
        return from_status(status, api.body, headers, http_reason=str(api.reason or ""))
    if isinstance(exc, aiohttp.ClientError | TimeoutError | OSError):
        return unreachable(exc)
    return KubeError(CODE_UNREACHABLE, type(exc).__name__, str(exc))


def _is_client_package_error(exc: BaseException) -> bool:
    """Whether ``exc`` is an ApiException of the kubernetes client package (sync or aio),
    without importing it (~18 MiB): an exception of a module never imported is none of its."""
    for module in ("kubernetes.client.exceptions", "kubernetes.aio.client.exceptions"):
        loaded = sys.modules.get(module)
        if loaded is not None and isinstance(exc, loaded.ApiException):
            return True
    return False
