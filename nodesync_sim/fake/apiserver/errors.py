"""Kubernetes `Status` error bodies, shaped like the real API server's (k8s.io/apimachinery errors).

Handlers and the store raise `APIError`; the app turns it into a JSON response with the same
code, reason, message and details a real server sends, so clients match on code/reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from nodesync_sim.fake.apiserver.resources import ResourceType

JSONObject = dict[str, Any]


class APIError(Exception):
    """An error answered as a `Status` object with HTTP status `code`."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: JSONObject | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self) -> JSONObject:
        body: JSONObject = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def _details(rt: ResourceType, name: str, **extra: Any) -> JSONObject:
    details: JSONObject = {"name": name}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = rt.plural
    details.update(extra)
    return details


def success_status(rt: ResourceType, name: str, uid: str) -> JSONObject:
    """The body a DELETE answers for kinds that do not return the deleted object."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": _details(rt, name, uid=uid),
    }


def not_found(rt: ResourceType, name: str) -> APIError:
    return APIError(404, "NotFound", f'{rt.qualified} "{name}" not found', _details(rt, name))


def already_exists(rt: ResourceType, name: str) -> APIError:
    return APIError(
        409, "AlreadyExists", f'{rt.qualified} "{name}" already exists', _details(rt, name)
    )


def conflict(rt: ResourceType, name: str, why: str) -> APIError:
    return APIError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {rt.qualified} "{name}": {why}',
        _details(rt, name),
    )


STALE_OBJECT = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def stale(rt: ResourceType, name: str) -> APIError:
    return conflict(rt, name, STALE_OBJECT)


def expired(message: str) -> APIError:
    return APIError(410, "Expired", message)


def bad_request(message: str) -> APIError:
    return APIError(400, "BadRequest", message)


@dataclass(frozen=True, slots=True)
class FieldCause:
    """One field error of a 422 Invalid: where, why (``FieldValueInvalid``, ...), and the
    message after the field path (``Invalid value: 0: must be greater than 0``)."""

    field: str
    reason: str
    message: str


def invalid_value(field: str, value: Any, detail: str) -> FieldCause:
    """A ``field.Invalid`` error, the value printed as the real server prints it."""
    if value is None:
        shown = "null"
    elif isinstance(value, bool):
        shown = "true" if value else "false"
    elif isinstance(value, int | float):
        shown = str(value)
    else:
        shown = json.dumps(value)
    return FieldCause(field, "FieldValueInvalid", f"Invalid value: {shown}: {detail}")


def invalid_fields(rt: ResourceType, name: str, causes: list[FieldCause]) -> APIError:
    """422 Invalid for field errors, as the real server words it: ``Lease.coordination.k8s.io
    "n1" is invalid: spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0``
    (several errors are listed in brackets)."""
    texts = [f"{c.field}: {c.message}" for c in causes]
    summary = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    qualified_kind = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
    return APIError(
        422,
        "Invalid",
        f'{qualified_kind} "{name}" is invalid: {summary}',
        {
            "name": name,
            **({"group": rt.group} if rt.group else {}),
            "kind": rt.kind,
            "causes": [
                {"reason": c.reason, "message": c.message, "field": c.field} for c in causes
            ],
        },
    )


def invalid(rt: ResourceType, name: str, field: str, cause_reason: str, detail: str) -> APIError:
    """422 Invalid for one field error, e.g. a missing name."""
    return invalid_fields(rt, name, [FieldCause(field, cause_reason, detail)])


def unprocessable(message: str) -> APIError:
    """422 for a patch that cannot be applied."""
    return APIError(422, "Invalid", message)


def unauthorized() -> APIError:
    return APIError(401, "Unauthorized", "Unauthorized")


def forbidden(
    user: str,
    verb: str,
    rt: ResourceType | None,
    resource: str,
    subresource: str,
    namespace: str,
    name: str,
) -> APIError:
    full = f"{resource}/{subresource}" if subresource else resource
    group = rt.group if rt is not None else ""
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    subject = f'{rt.qualified if rt else resource} "{name}"' if name else full
    message = (
        f'{subject} is forbidden: User "{user}" cannot {verb} resource "{full}" '
        f'in API group "{group}" {scope}'
    )
    details: JSONObject = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    details["kind"] = resource
    return APIError(403, "Forbidden", message, details)


def namespace_forbidden(namespace: str, why: str) -> APIError:
    return APIError(
        403,
        "Forbidden",
        f'namespaces "{namespace}" is forbidden: {why}',
        {"name": namespace, "kind": "namespaces"},
    )


def too_many_requests(
    message: str, retry_after: int | None, causes: list[JSONObject] | None = None
) -> APIError:
    details: JSONObject = {}
    if causes:
        details["causes"] = causes
    headers: dict[str, str] = {}
    if retry_after is not None:
        details["retryAfterSeconds"] = retry_after
        headers["Retry-After"] = str(retry_after)
    return APIError(429, "TooManyRequests", message, details or None, headers)


def internal(message: str) -> APIError:
    return APIError(
        500,
        "InternalError",
        f"Internal error occurred: {message}",
        {"causes": [{"message": message}]},
    )


def method_not_allowed(method: str) -> APIError:
    return APIError(
        405,
        "MethodNotAllowed",
        f"the server does not allow this method on the requested resource ({method})",
    )


def not_found_path() -> APIError:
    return APIError(404, "NotFound", "the server could not find the requested resource")


_PATCH_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")


def unsupported_media_type(content_type: str, accepted: tuple[str, ...] = _PATCH_TYPES) -> APIError:
    return APIError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format ({content_type}) - accepted media "
        f"types include: {', '.join(accepted)}",
    )


def too_large_resource_version(requested: int, current: int) -> APIError:
    return APIError(
        504,
        "Timeout",
        f"Timeout: Too large resource version: {requested}, current: {current}",
        {
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ],
            "retryAfterSeconds": 1,
        },
    )
