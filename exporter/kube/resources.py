"""The API endpoints nodesync reads and writes, described once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from exporter.kube.errors import CODE_UNREACHABLE, InvalidName
from exporter.model.names import is_dns1123_label, is_dns1123_subdomain, shown


@dataclass(frozen=True, slots=True)
class Resource:
    """One resource type of the API: where it lives and whether it is namespaced.

    ``plural`` doubles as the ``resource`` label of the request metrics.
    """

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """The REST path: the collection (across namespaces when ``namespace`` is None), or
        one object when ``name`` is given. InvalidName (nothing is sent) for a namespace that is
        not a DNS-1123 label or a name that is not a DNS-1123 subdomain: the names of every
        resource here are, and anything else (``..``, ``n/status``) would change the path."""
        if namespace and not is_dns1123_label(namespace):
            raise InvalidName(
                CODE_UNREACHABLE, "InvalidName", f"not a namespace name: {shown(namespace)!r}"
            )
        if name and not is_dns1123_subdomain(name):
            raise InvalidName(
                CODE_UNREACHABLE, "InvalidName", f"not a {self.kind} name: {shown(name)!r}"
            )
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced:
            if namespace:
                base += f"/namespaces/{quote(namespace, safe='')}"
            elif name:
                raise ValueError(f"{self.plural} are namespaced: a namespace is required")
        base += f"/{self.plural}"
        if name:
            base += f"/{quote(name, safe='')}"
        return base

    def key(self, namespace: str | None, name: str) -> str:
        """The store key: "namespace/name", or "name" for cluster-scoped objects."""
        return f"{namespace}/{name}" if self.namespaced else name

    def key_of(self, obj: dict[str, Any]) -> str | None:
        """The store key of a JSON object, or None when it has no usable name."""
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            return None
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            return None
        if not self.namespaced:
            return name
        namespace = meta.get("namespace")
        if not isinstance(namespace, str) or not namespace:
            return None
        return f"{namespace}/{name}"


NODES = Resource(group="", version="v1", plural="nodes", kind="Node", namespaced=False)
PODS = Resource(group="", version="v1", plural="pods", kind="Pod", namespaced=True)
EVENTS = Resource(group="", version="v1", plural="events", kind="Event", namespaced=True)
NAMESPACES = Resource(
    group="", version="v1", plural="namespaces", kind="Namespace", namespaced=False
)
LEASES = Resource(
    group="coordination.k8s.io", version="v1", plural="leases", kind="Lease", namespaced=True
)
PODDISRUPTIONBUDGETS = Resource(
    group="policy",
    version="v1",
    plural="poddisruptionbudgets",
    kind="PodDisruptionBudget",
    namespaced=True,
)
