"""What the real server refuses in a body before it stores it: a kind or apiVersion that is not
the URL's (400), and, as 422 Invalid with one cause per field:

- names that are not DNS subdomains (DNS labels for Namespaces), field ``metadata.name``;
- Leases (coordination.k8s.io/v1): ``spec.renewTime`` and ``spec.acquireTime`` must be
  MicroTimes, RFC 3339 with six fractional digits (``2024-01-01T00:00:00.000000Z``);
  ``spec.leaseDurationSeconds`` must be greater than 0 and ``spec.leaseTransitions`` not
  negative, when set (a real server refuses a time of another precision while decoding the
  body; here it is a field error like the others);
- core/v1 Events: ``involvedObject.namespace``, when set, must be the Event's namespace;
- custom resources: ``spec`` and ``status``, when present, must be objects (no other schema).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from exporter.model.rfc3339 import parse_time
from nodesync_sim.fake.apiserver import errors
from nodesync_sim.fake.apiserver.errors import FieldCause, invalid_value
from nodesync_sim.fake.apiserver.objects import JSONObject
from nodesync_sim.fake.apiserver.resources import NAMESPACES, ResourceType

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_MICRO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})$")
MICRO_TIME_LAYOUT = "2006-01-02T15:04:05.000000Z07:00"


def validate_name(rt: ResourceType, name: str) -> None:
    """A DNS subdomain (253 characters), or a DNS label (63) for a Namespace."""
    pattern, limit = (_LABEL, 63) if rt is NAMESPACES else (_SUBDOMAIN, 253)
    if len(name) > limit or not pattern.match(name):
        raise errors.invalid(
            rt,
            name,
            "metadata.name",
            "FieldValueInvalid",
            f'Invalid value: "{name}": a lowercase RFC 1123 name must consist of lower case '
            "alphanumeric characters, '-' or '.'",
        )


def check_type(rt: ResourceType, body: JSONObject) -> None:
    """The body's apiVersion and kind, when given, must be the URL's."""
    kind = body.get("kind")
    api_version = body.get("apiVersion")
    if api_version and api_version != rt.api_version:
        raise errors.bad_request(
            f"the API version in the data ({api_version}) does not match the expected "
            f"API version ({rt.api_version})"
        )
    if kind and kind != rt.kind:
        raise errors.bad_request(
            f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
        )


def _is_micro_time(value: Any) -> bool:
    return (
        isinstance(value, str) and bool(_MICRO_TIME.match(value)) and parse_time(value) is not None
    )


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _lease_causes(obj: JSONObject) -> list[FieldCause]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return []
    causes = []
    for key in ("acquireTime", "renewTime"):
        value = spec.get(key)
        if value is not None and not _is_micro_time(value):
            causes.append(
                invalid_value(
                    f"spec.{key}",
                    value,
                    f"must be an RFC 3339 time with microseconds ({MICRO_TIME_LAYOUT})",
                )
            )
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and not (_is_integer(duration) and duration > 0):
        causes.append(
            invalid_value("spec.leaseDurationSeconds", duration, "must be greater than 0")
        )
    transitions = spec.get("leaseTransitions")
    if transitions is not None and not (_is_integer(transitions) and transitions >= 0):
        causes.append(
            invalid_value(
                "spec.leaseTransitions", transitions, "must be greater than or equal to 0"
            )
        )
    return causes


def _event_causes(obj: JSONObject) -> list[FieldCause]:
    involved = obj.get("involvedObject")
    namespace = obj["metadata"].get("namespace", "")
    if not isinstance(involved, dict):
        return []
    theirs = involved.get("namespace")
    if theirs and theirs != namespace:
        return [invalid_value("involvedObject.namespace", theirs, "does not match event.namespace")]
    return []


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _custom_causes(obj: JSONObject) -> list[FieldCause]:
    """A custom resource's schema here: spec and status, when present, are objects."""
    causes = []
    for key in ("spec", "status"):
        if key in obj and not isinstance(obj[key], dict):
            kind = _json_type(obj[key])
            causes.append(
                invalid_value(key, kind, f'{key} in body must be of type object: "{kind}"')
            )
    return causes


_CAUSES: dict[str, Callable[[JSONObject], list[FieldCause]]] = {
    "leases": _lease_causes,
    "events": _event_causes,
}


def validate_object(rt: ResourceType, obj: JSONObject) -> None:
    """422 Invalid when the object about to be stored breaks a rule of its kind."""
    check = _custom_causes if rt.custom else _CAUSES.get(rt.plural)
    causes = check(obj) if check is not None else []
    if causes:
        raise errors.invalid_fields(rt, str(obj["metadata"].get("name", "")), causes)
