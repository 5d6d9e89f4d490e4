"""What the real server refuses in a body before it stores it: a kind or apiVersion that is not
the URL's (400), and invalid names (422 Invalid, field ``metadata.name``)."""

from __future__ import annotations

import re

from nodesync_sim.apiserver import errors
from nodesync_sim.apiserver.objects import JSONObject
from nodesync_sim.apiserver.resources import NAMESPACES, ResourceType

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


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
