"""The resource types the test API server serves, and what is special about each.

A `ResourceType` carries everything the generic store and handlers need to know about one kind:
its REST name and group/version, whether it is namespaced, which subresources and field
selectors it supports, and the per-kind strategy flags the real API server implements in its
registry (status reset on create, generation tracking, graceful deletion, custom resource).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

JSONObject = dict[str, Any]
FieldGetter = Callable[[JSONObject], str]


def _path(*keys: str) -> FieldGetter:
    """A field-selector getter reading a nested string field ("" when absent)."""

    def get(obj: JSONObject) -> str:
        cur: Any = obj
        for key in keys:
            if not isinstance(cur, dict):
                return ""
            cur = cur.get(key)
        if cur is None:
            return ""
        if isinstance(cur, bool):
            return "true" if cur else "false"
        return str(cur)

    return get


_COMMON_FIELDS: dict[str, FieldGetter] = {
    "metadata.name": _path("metadata", "name"),
    "metadata.namespace": _path("metadata", "namespace"),
}


@dataclass(frozen=True, slots=True)
class ResourceType:
    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    extra_fields: Mapping[str, FieldGetter] = field(default_factory=dict)
    # Strategy flags (what the real registry does for this kind).
    has_status: bool = False  # status is a subresource: main writes keep status, /status keeps spec
    has_generation: bool = False  # metadata.generation starts at 1 and grows on spec changes
    reset_status_on_create: JSONObject | None = None  # status a create through the API starts with
    graceful_delete: bool = False  # pods: deletion sets deletionTimestamp and waits for the grace
    return_deleted_object: bool = False  # DELETE answers the object instead of a Status
    allow_create_on_update: bool = False
    custom: bool = False  # a custom resource (CRD): unstructured, served as apiextensions does

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """The name the real server uses in messages: "pods", "leases.coordination.k8s.io"."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    def field_getters(self) -> Mapping[str, FieldGetter]:
        return {**_COMMON_FIELDS, **self.extra_fields}


NAMESPACES = ResourceType(
    group="",
    version="v1",
    plural="namespaces",
    singular="namespace",
    kind="Namespace",
    namespaced=False,
    short_names=("ns",),
    subresources=("status",),
    extra_fields={"status.phase": _path("status", "phase")},
    has_status=True,
)

NODES = ResourceType(
    group="",
    version="v1",
    plural="nodes",
    singular="node",
    kind="Node",
    namespaced=False,
    short_names=("no",),
    subresources=("status",),
    extra_fields={"spec.unschedulable": _path("spec", "unschedulable")},
    has_status=True,
)

PODS = ResourceType(
    group="",
    version="v1",
    plural="pods",
    singular="pod",
    kind="Pod",
    namespaced=True,
    short_names=("po",),
    subresources=("status", "eviction"),
    extra_fields={
        "spec.nodeName": _path("spec", "nodeName"),
        "spec.restartPolicy": _path("spec", "restartPolicy"),
        "spec.schedulerName": _path("spec", "schedulerName"),
        "spec.serviceAccountName": _path("spec", "serviceAccountName"),
        "spec.hostNetwork": _path("spec", "hostNetwork"),
        "status.phase": _path("status", "phase"),
        "status.podIP": _path("status", "podIP"),
        "status.nominatedNodeName": _path("status", "nominatedNodeName"),
    },
    has_status=True,
    has_generation=True,
    reset_status_on_create={"phase": "Pending"},
    graceful_delete=True,
    return_deleted_object=True,
)

EVENTS = ResourceType(
    group="",
    version="v1",
    plural="events",
    singular="event",
    kind="Event",
    namespaced=True,
    short_names=("ev",),
    extra_fields={
        "involvedObject.kind": _path("involvedObject", "kind"),
        "involvedObject.namespace": _path("involvedObject", "namespace"),
        "involvedObject.name": _path("involvedObject", "name"),
        "involvedObject.uid": _path("involvedObject", "uid"),
        "involvedObject.apiVersion": _path("involvedObject", "apiVersion"),
        "involvedObject.resourceVersion": _path("involvedObject", "resourceVersion"),
        "involvedObject.fieldPath": _path("involvedObject", "fieldPath"),
        "reason": _path("reason"),
        "reportingComponent": _path("reportingComponent"),
        "source": _path("source", "component"),
        "type": _path("type"),
    },
    allow_create_on_update=True,
)

LEASES = ResourceType(
    group="coordination.k8s.io",
    version="v1",
    plural="leases",
    singular="lease",
    kind="Lease",
    namespaced=True,
)

PODDISRUPTIONBUDGETS = ResourceType(
    group="policy",
    version="v1",
    plural="poddisruptionbudgets",
    singular="poddisruptionbudget",
    kind="PodDisruptionBudget",
    namespaced=True,
    short_names=("pdb",),
    subresources=("status",),
    has_status=True,
    has_generation=True,
    reset_status_on_create={
        "disruptionsAllowed": 0,
        "currentHealthy": 0,
        "desiredHealthy": 0,
        "expectedPods": 0,
    },
)

#: nodesync's record of a rollback: a cluster-scoped custom resource with a status subresource
#: (served as the CRD nodesync ships would be; see `strategy` for what that changes).
NODEROLLBACKS = ResourceType(
    group="nodesync.io",
    version="v1alpha1",
    plural="noderollbacks",
    singular="noderollback",
    kind="NodeRollback",
    namespaced=False,
    short_names=("nrb",),
    subresources=("status",),
    has_status=True,
    has_generation=True,
    custom=True,
)

ALL: tuple[ResourceType, ...] = (
    NAMESPACES,
    NODES,
    PODS,
    EVENTS,
    LEASES,
    PODDISRUPTIONBUDGETS,
    NODEROLLBACKS,
)

BY_PLURAL: Mapping[str, ResourceType] = {rt.plural: rt for rt in ALL}

# (group, version) -> resource types served there.
GROUP_VERSIONS: Mapping[tuple[str, str], tuple[ResourceType, ...]] = {
    gv: tuple(rt for rt in ALL if (rt.group, rt.version) == gv)
    for gv in dict.fromkeys((rt.group, rt.version) for rt in ALL)
}


def lookup(group: str, version: str, plural: str) -> ResourceType | None:
    for rt in GROUP_VERSIONS.get((group, version), ()):
        if rt.plural == plural:
            return rt
    return None


def by_plural(plural: str) -> ResourceType:
    """The resource type for a plural name ("pods", "leases"); KeyError when not served."""
    return BY_PLURAL[plural]
