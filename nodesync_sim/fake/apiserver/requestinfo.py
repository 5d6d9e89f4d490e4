"""Parse a request path into what it addresses, as the real server's RequestInfoFactory does.

`/api/v1/namespaces/default/pods/p1/status` -> group "", version "v1", namespace "default",
resource "pods", name "p1", subresource "status", and a Kubernetes verb (get, list, watch,
create, update, patch, delete, deletecollection) from the method and the `watch` parameter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

_TRUE = frozenset({"1", "t", "T", "true", "TRUE", "True"})


def is_true(value: str | None) -> bool:
    return value is not None and value in _TRUE


@dataclass(frozen=True, slots=True)
class RequestInfo:
    is_resource_request: bool
    path: str
    verb: str
    group: str = ""
    version: str = ""
    namespace: str = ""
    resource: str = ""
    name: str = ""
    subresource: str = ""

    @property
    def resource_label(self) -> str:
        """ "pods", "pods/eviction", or the path for non-resource requests (for counters)."""
        if not self.is_resource_request:
            return self.path
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


_METHOD_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "GET": "get", "HEAD": "get"}


def parse(method: str, path: str, query: Mapping[str, str]) -> RequestInfo:
    parts = [p for p in path.split("/") if p]
    plain_verb = method.lower()
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return RequestInfo(False, path, plain_verb)
    if not rest:
        return RequestInfo(False, path, plain_verb, group, version)
    watch_path = False
    if rest[0] == "watch":
        watch_path = True
        rest = rest[1:]
    namespace = ""
    if rest and rest[0] == "namespaces" and len(rest) > 2:
        namespace, rest = rest[1], rest[2:]
    if not rest:
        return RequestInfo(False, path, plain_verb, group, version)
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if len(rest) > 3:
        return RequestInfo(False, path, plain_verb, group, version)
    if resource == "namespaces" and name and not namespace:
        namespace = name  # the namespace object itself is addressed in its own namespace
    if method == "DELETE":
        verb = "delete" if name else "deletecollection"
    elif method in ("GET", "HEAD"):
        watching = watch_path or is_true(query.get("watch"))
        verb = "watch" if watching else ("get" if name else "list")
    else:
        verb = _METHOD_VERBS.get(method, plain_verb)
    return RequestInfo(True, path, verb, group, version, namespace, resource, name, subresource)
