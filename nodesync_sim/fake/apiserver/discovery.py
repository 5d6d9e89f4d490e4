"""Discovery documents: /api, /apis, /apis/<group>, /api/v1, /apis/<group>/<version>, /version."""

from __future__ import annotations

from typing import Any

from nodesync_sim.fake.apiserver.resources import GROUP_VERSIONS, ResourceType

JSONObject = dict[str, Any]

VERSION_INFO: JSONObject = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2024-12-11T00:00:00Z",
    "goVersion": "go1.23.3",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
_SUBRESOURCE_VERBS = {"status": ["get", "patch", "update"], "eviction": ["create"]}
_SUBRESOURCE_KINDS = {"eviction": ("policy", "v1", "Eviction")}


def api_versions(server_address: str) -> JSONObject:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _group(name: str) -> JSONObject:
    versions = [
        {"groupVersion": f"{g}/{v}", "version": v} for (g, v) in GROUP_VERSIONS if g == name
    ]
    return {"name": name, "versions": versions, "preferredVersion": versions[0]}


def group_names() -> list[str]:
    return list(dict.fromkeys(g for (g, _) in GROUP_VERSIONS if g))


def api_group_list() -> JSONObject:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group(g) for g in group_names()],
    }


def api_group(name: str) -> JSONObject | None:
    if name not in group_names():
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name)}


def _resource(rt: ResourceType) -> list[JSONObject]:
    main: JSONObject = {
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": _VERBS,
    }
    if rt.short_names:
        main["shortNames"] = list(rt.short_names)
    out = [main]
    for sub in rt.subresources:
        entry: JSONObject = {
            "name": f"{rt.plural}/{sub}",
            "singularName": "",
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": _SUBRESOURCE_VERBS[sub],
        }
        if sub in _SUBRESOURCE_KINDS:
            group, version, kind = _SUBRESOURCE_KINDS[sub]
            entry.update(group=group, version=version, kind=kind)
        out.append(entry)
    return out


def api_resource_list(group: str, version: str) -> JSONObject | None:
    types = GROUP_VERSIONS.get((group, version))
    if types is None:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": [r for rt in types for r in _resource(rt)],
    }
