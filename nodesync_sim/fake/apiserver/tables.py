"""Server-side printing: gets and lists as a ``meta.k8s.io/v1`` Table, as ``kubectl get`` asks
for them (``Accept: application/json;as=Table;v=v1;g=meta.k8s.io, ...``).

Only Nodes (the real server's columns: NAME STATUS ROLES AGE VERSION, and with ``-o wide``
INTERNAL-IP EXTERNAL-IP OS-IMAGE KERNEL-VERSION CONTAINER-RUNTIME) and NodeRollbacks (the CRD's
printer columns, deploy/base/noderollback-crd.yaml) have columns here; any other kind is
answered as plain JSON, which kubectl prints with its generic NAME and AGE columns. Watches are
never Tables (``kubectl get -w`` of a Node prints the generic columns).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from nodesync_sim.fake.apiserver.objects import StoredObject
from nodesync_sim.fake.apiserver.resources import ResourceType

JSONObject = dict[str, Any]
Column = tuple[str, str, int, Callable[[JSONObject, float], str]]  # name, type, priority, cell


def wants_table(accept: str) -> bool:
    """Whether an Accept header asks for a meta.k8s.io/v1 Table first."""
    for media in accept.split(","):
        params = {
            k.strip(): v.strip() for k, _, v in (p.partition("=") for p in media.split(";")[1:])
        }
        if params.get("as") == "Table":
            return params.get("g") == "meta.k8s.io" and params.get("v") == "v1"
        if media.strip():
            return False
    return False


def human_duration(seconds: float) -> str:
    """An age as kubectl prints it (k8s.io/apimachinery/pkg/util/duration.HumanDuration)."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    years, days = hours // (24 * 365), (hours // 24) % 365
    return f"{years}y{days}d" if years < 8 and days else f"{years}y"


def _age(obj: JSONObject, now: float) -> str:
    created = (obj.get("metadata") or {}).get("creationTimestamp")
    if not created:
        return "<unknown>"
    return human_duration(now - datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp())


def _node_status(node: JSONObject, now: float) -> str:
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    status = "Unknown"
    if ready is not None:
        status = {"True": "Ready", "False": "NotReady"}.get(ready.get("status"), "Unknown")
    if (node.get("spec") or {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    return status


def _node_roles(node: JSONObject, now: float) -> str:
    labels = (node.get("metadata") or {}).get("labels") or {}
    roles = {k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/")}
    if labels.get("kubernetes.io/role"):
        roles.add(labels["kubernetes.io/role"])
    return ",".join(sorted(r for r in roles if r)) or "<none>"


def _address(kind: str) -> Callable[[JSONObject, float], str]:
    def cell(node: JSONObject, now: float) -> str:
        addresses = (node.get("status") or {}).get("addresses") or []
        return next((a["address"] for a in addresses if a.get("type") == kind), "<none>")

    return cell


def _path(*keys: str, empty: str = "") -> Callable[[JSONObject, float], str]:
    def cell(obj: JSONObject, now: float) -> str:
        value: Any = obj
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        return empty if value is None or value == "" else str(value)

    return cell


def _name(obj: JSONObject, now: float) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


_NODE_INFO = ("status", "nodeInfo")
COLUMNS: dict[str, Sequence[Column]] = {
    "nodes": (
        ("Name", "string", 0, _name),
        ("Status", "string", 0, _node_status),
        ("Roles", "string", 0, _node_roles),
        ("Age", "string", 0, _age),
        ("Version", "string", 0, _path(*_NODE_INFO, "kubeletVersion")),
        ("Internal-IP", "string", 1, _address("InternalIP")),
        ("External-IP", "string", 1, _address("ExternalIP")),
        ("OS-Image", "string", 1, _path(*_NODE_INFO, "osImage", empty="<unknown>")),
        ("Kernel-Version", "string", 1, _path(*_NODE_INFO, "kernelVersion", empty="<unknown>")),
        (
            "Container-Runtime",
            "string",
            1,
            _path(*_NODE_INFO, "containerRuntimeVersion", empty="<unknown>"),
        ),
    ),
    "noderollbacks": (
        ("Name", "string", 0, _name),
        ("Node", "string", 0, _path("spec", "nodeName")),
        ("Action", "string", 0, _path("spec", "action")),
        ("Phase", "string", 0, _path("status", "phase")),
        ("Step", "string", 0, _path("status", "step")),
        ("Reason", "string", 1, _path("status", "reason")),
        ("Age", "date", 0, _age),
    ),
}


def has_table(rt: ResourceType) -> bool:
    return rt.plural in COLUMNS


def _row_object(obj: JSONObject, include: str) -> JSONObject | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata") or {},
    }


def table(
    rt: ResourceType,
    objects: Sequence[StoredObject],
    metadata: JSONObject,
    *,
    include_object: str = "Metadata",
    now: float | None = None,
) -> JSONObject:
    """The Table of ``objects`` of a kind :func:`has_table` is true for."""
    at = time.time() if now is None else now
    columns = COLUMNS[rt.plural]
    rows = []
    for stored in objects:
        obj = stored.to_dict()
        row: JSONObject = {"cells": [cell(obj, at) for (_, _, _, cell) in columns]}
        shown = _row_object(obj, include_object)
        if shown is not None:
            row["object"] = shown
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": [
            {
                "name": name,
                "type": kind,
                "format": "name" if name == "Name" else "",
                "description": "",
                "priority": priority,
            }
            for (name, kind, priority, _) in columns
        ],
        "rows": rows,
    }
