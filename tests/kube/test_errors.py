"""Error translation: Status bodies, client exceptions and transport errors -> domain errors."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from kubernetes.aio.client import exceptions as aio_exceptions
from kubernetes.client import exceptions as sync_exceptions

from exporter.kube import errors
from exporter.kube.errors import (
    AlreadyExists,
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubeError,
    NotFound,
    ServerError,
    TooManyRequests,
    Unauthorized,
    Unreachable,
    from_status,
    translate,
)


def status(code: int, reason: str, message: str = "m", **details: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }
    if details:
        body["details"] = details
    return body


@pytest.mark.parametrize(
    ("code", "body", "headers", "cls", "reason", "retry_after"),
    [
        pytest.param(404, status(404, "NotFound"), None, NotFound, "NotFound", None, id="404"),
        pytest.param(409, status(409, "Conflict"), None, Conflict, "Conflict", None, id="409"),
        pytest.param(
            409, status(409, "AlreadyExists"), None, AlreadyExists, "AlreadyExists", None,
            id="409-already-exists",
        ),
        pytest.param(410, status(410, "Expired"), None, Gone, "Expired", None, id="410"),
        pytest.param(
            429, status(429, "TooManyRequests", retryAfterSeconds=3), {"Retry-After": "2"},
            TooManyRequests, "TooManyRequests", 2.0, id="429-header-wins",
        ),
        pytest.param(
            429, status(429, "TooManyRequests", retryAfterSeconds=3), None,
            TooManyRequests, "TooManyRequests", 3.0, id="429-details",
        ),
        pytest.param(
            429, status(429, "TooManyRequests"), {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"},
            TooManyRequests, "TooManyRequests", None, id="429-http-date-ignored",
        ),
        pytest.param(401, status(401, "Unauthorized"), None, Unauthorized, "Unauthorized", None,
                     id="401"),
        pytest.param(403, status(403, "Forbidden"), None, Forbidden, "Forbidden", None, id="403"),
        pytest.param(500, status(500, "InternalError"), None, ServerError, "InternalError", None,
                     id="500"),
        pytest.param(503, b"upstream connect error", {"Retry-After": "5"}, ServerError,
                     "Service Unavailable", 5.0, id="503-not-a-status"),
        pytest.param(422, status(422, "Invalid"), None, Invalid, "Invalid", None, id="422"),
        pytest.param(400, status(400, "BadRequest"), None, BadRequest, "BadRequest", None,
                     id="400"),
        pytest.param(418, status(418, "Teapot"), None, KubeError, "Teapot", None,
                     id="418-plain"),
        pytest.param(
            200, status(410, "Expired"), None, Gone, "Expired", None,
            id="watch-error-event-code-wins-over-http",
        ),
        pytest.param(
            200, json.dumps(status(410, "Gone")).encode(), None, Gone, "Gone", None,
            id="raw-json-body",
        ),
    ],
)  # fmt: skip
def test_from_status(
    code: int,
    body: Any,
    headers: dict[str, str] | None,
    cls: type[KubeError],
    reason: str,
    retry_after: float | None,
) -> None:
    err = from_status(code, body, headers, http_reason="Service Unavailable")
    assert type(err) is cls
    assert err.reason == reason
    assert err.retry_after == retry_after


def test_from_status_keeps_message_and_causes() -> None:
    body = status(
        504,
        "Timeout",
        "Timeout: Too large resource version: 9, current: 5",
        causes=[{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
        retryAfterSeconds=1,
    )
    err = from_status(504, body)
    assert isinstance(err, ServerError)
    assert (err.code, err.message, err.retry_after) == (504, body["message"], 1.0)
    assert errors.is_resource_version_too_large(err)
    assert not errors.is_resource_version_too_large(from_status(500, status(500, "x")))


@pytest.mark.parametrize(
    "module", [pytest.param(aio_exceptions, id="aio"), pytest.param(sync_exceptions, id="sync")]
)
def test_translate_api_exceptions(module: Any) -> None:
    exc = module.ApiException(status=409, reason="Conflict")
    exc.body = json.dumps(status(409, "Conflict", "the object has been modified"))
    err = translate(exc)
    assert type(err) is Conflict
    assert err.message == "the object has been modified"
    not_found = module.NotFoundException(status=404, reason="Not Found")
    assert type(translate(not_found)) is NotFound
    throttled = module.ApiException(status=429, reason="Too Many Requests")
    throttled.headers = {"Retry-After": "7"}
    assert translate(throttled).retry_after == 7.0


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        pytest.param(aiohttp.ServerDisconnectedError(), "Unreachable", id="disconnected"),
        pytest.param(aiohttp.ClientPayloadError("cut"), "Unreachable", id="payload"),
        pytest.param(ConnectionRefusedError(111, "refused"), "Unreachable", id="refused"),
        pytest.param(TimeoutError(), "Timeout", id="timeout"),
    ],
)
def test_translate_transport_errors(exc: BaseException, reason: str) -> None:
    err = translate(exc)
    assert type(err) is Unreachable
    assert (err.code, err.reason) == (0, reason)


@pytest.mark.parametrize(
    ("code", "reason", "retryable"),
    [
        (0, "Unreachable", True),
        (500, "InternalError", True),
        (503, "ServiceUnavailable", True),
        (429, "TooManyRequests", True),
        (409, "Conflict", True),
        (410, "Expired", True),
        (400, "BadRequest", False),
        (401, "Unauthorized", False),
        (403, "Forbidden", False),
        (404, "NotFound", False),
        (409, "AlreadyExists", False),
        (422, "Invalid", False),
    ],
)
def test_only_what_a_retry_can_fix_is_retryable(code: int, reason: str, retryable: bool) -> None:
    err = from_status(code, status(code, reason))
    assert err.retryable is retryable
