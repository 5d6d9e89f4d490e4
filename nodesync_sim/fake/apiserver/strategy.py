"""Per-kind create and update strategies: what the real registry does to an object before it is
stored, as pure functions of the request body and the stored object.

- Create: the server sets uid, creationTimestamp and (for kinds that track it) generation 1,
  drops what clients may not set (deletionTimestamp, resourceVersion, managedFields, ...),
  resets the status of kinds whose status a create may not set, and fills the defaults
  clients read (pods' restartPolicy, a namespace's finalizer, ...).
- Update: system metadata is kept from the stored object; a kind with a status subresource
  keeps its status on main-resource writes and changes only its status through ``/status``;
  generation grows when the spec changes.
- Custom resources (apiextensions' strategy for a CRD with a status subresource): a create
  through the API drops the status and fills no defaults; a main-resource write keeps the
  stored status and bumps generation when anything but metadata and status changed; a
  ``/status`` write changes the status only (absent: removed), nothing else; an update must
  carry metadata.resourceVersion; only JSON patch and merge patch are accepted (a strategic
  merge patch needs Go types a custom resource has not).
"""

from __future__ import annotations

import copy
import secrets
import string
import uuid

from nodesync_sim.fake.apiserver import errors
from nodesync_sim.fake.apiserver.objects import JSONObject
from nodesync_sim.fake.apiserver.patch import MERGE_PATCH, PATCH_TYPES
from nodesync_sim.fake.apiserver.resources import NAMESPACES, ResourceType

DEFAULT_GRACE_SECONDS = 30

#: Metadata only the server sets; an update keeps the stored values.
SYSTEM_META = (
    "name",
    "namespace",
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
)
#: Metadata a create ignores.
_IGNORED_ON_CREATE = frozenset(
    {
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
        "managedFields",
        "resourceVersion",
    }
)
_GENERATED_SUFFIX = string.ascii_lowercase + string.digits


def object_name(rt: ResourceType, meta_in: JSONObject) -> tuple[str, str]:
    """(name, generateName): a generated name is generateName plus five random characters."""
    name = str(meta_in.get("name") or "")
    generate = str(meta_in.get("generateName") or "")
    if not name and generate:
        name = generate + "".join(secrets.choice(_GENERATED_SUFFIX) for _ in range(5))
    if not name:
        raise errors.invalid(
            rt,
            "",
            "metadata.name",
            "FieldValueRequired",
            "Required value: name or generateName is required",
        )
    return name, generate


def new_object(
    rt: ResourceType,
    namespace: str,
    name: str,
    generate: str,
    body: JSONObject,
    *,
    created_at: str,
    from_api: bool,
) -> JSONObject:
    """The object a create stores (its resourceVersion is set when it is committed).

    `from_api` applies the API's create strategy (e.g. a pod's status reset); without it the
    body's status is kept, for tests that build objects in a given state."""
    meta_in = body.get("metadata") or {}
    meta: JSONObject = {"name": name}
    if generate:
        meta["generateName"] = generate
    if rt.namespaced:
        meta["namespace"] = namespace
    meta["uid"] = str(uuid.uuid4())
    meta["resourceVersion"] = ""
    if rt.has_generation:
        meta["generation"] = 1
    meta["creationTimestamp"] = created_at
    for k, v in meta_in.items():
        if k not in meta and k not in _IGNORED_ON_CREATE:
            meta[k] = copy.deepcopy(v)
    obj: JSONObject = {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}
    for k, v in body.items():
        if k not in ("kind", "apiVersion", "metadata"):
            obj[k] = copy.deepcopy(v)
    if from_api and rt.reset_status_on_create is not None:
        obj["status"] = copy.deepcopy(rt.reset_status_on_create)
    if rt.custom:
        if from_api:
            obj.pop("status", None)  # a create cannot set the status of a custom resource
    else:
        _default(rt, obj)
    return obj


def patch_types(rt: ResourceType) -> tuple[str, ...]:
    """The PATCH media types the kind accepts: custom resources have no strategic merge."""
    if rt.custom:
        return (MERGE_PATCH,)
    return PATCH_TYPES


def requires_resource_version(rt: ResourceType) -> bool:
    """Whether an update (PUT) must carry metadata.resourceVersion: custom resources do not
    allow unconditional updates."""
    return rt.custom


def _default(rt: ResourceType, obj: JSONObject) -> None:
    """The few defaults the real server fills in that clients look at.

    Go structs that are not pointers always serialize: spec and status are `{}` when empty.
    """
    if rt.plural != "events":
        obj.setdefault("spec", {})
    if rt.has_status:
        obj.setdefault("status", {})
    if rt is NAMESPACES:
        labels = obj["metadata"].setdefault("labels", {})
        labels["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
        obj.setdefault("status", {"phase": "Active"})
    elif rt.plural == "pods":
        spec = obj.setdefault("spec", {})
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("schedulerName", "default-scheduler")
        obj.setdefault("status", {"phase": "Pending"})


def merge_for_update(
    rt: ResourceType, cur: JSONObject, new: JSONObject, subresource: str
) -> JSONObject:
    """The object an update of `cur` with body `new` stores (resourceVersion left empty)."""
    if subresource == "status":
        # Status writes change status only (metadata is reset too, as in the real server).
        out = {k: v for k, v in cur.items() if k != "status"}
        out["metadata"] = dict(cur["metadata"])
        if new.get("status") is not None or (rt.custom and "status" in new):
            out["status"] = copy.deepcopy(new["status"])  # a custom resource's null is refused
        return out
    out = {"kind": rt.kind, "apiVersion": rt.api_version}
    meta_in = new.get("metadata") or {}
    meta: JSONObject = {}
    cur_meta = cur["metadata"]
    for k in SYSTEM_META:
        if k in cur_meta:
            meta[k] = cur_meta[k]
    meta["resourceVersion"] = ""
    for k, v in meta_in.items():
        if k not in meta and k not in ("selfLink", "managedFields"):
            meta[k] = copy.deepcopy(v)
    # Keep the server's order: system fields first as in the stored object.
    out["metadata"] = meta
    for k, v in new.items():
        if k not in ("kind", "apiVersion", "metadata"):
            out[k] = copy.deepcopy(v)
    if rt.has_status:
        if "status" in cur:
            out["status"] = cur["status"]
        else:
            out.pop("status", None)
    if rt.has_generation and _generation_changed(rt, cur, out):
        meta["generation"] = int(cur_meta.get("generation", 0)) + 1
    return out


def _generation_changed(rt: ResourceType, cur: JSONObject, new: JSONObject) -> bool:
    """A spec change (built-in kinds); any change but metadata (custom resources: the status is
    the stored one already)."""
    if not rt.custom:
        return bool(new.get("spec") != cur.get("spec"))

    def content(obj: JSONObject) -> JSONObject:
        return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion", "metadata")}

    return content(new) != content(cur)
