"""HTTP handlers for the Kubernetes paths: decode the request, call the store, encode the answer.

One entry point, `handle_api`, dispatches on the parsed `RequestInfo` (verb, resource,
subresource). Everything the store raises as `APIError` is turned into a Status by the app's
error middleware.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from nodesync_sim.fake.apiserver import discovery, errors, tables
from nodesync_sim.fake.apiserver.deletion import DeleteOptions
from nodesync_sim.fake.apiserver.disruption import evict
from nodesync_sim.fake.apiserver.objects import StoredObject, dumps
from nodesync_sim.fake.apiserver.reads import ListResult
from nodesync_sim.fake.apiserver.requestinfo import RequestInfo, is_true
from nodesync_sim.fake.apiserver.resources import NAMESPACES, ResourceType, lookup
from nodesync_sim.fake.apiserver.selectors import parse_field_selector, parse_label_selector
from nodesync_sim.fake.apiserver.store import Store
from nodesync_sim.fake.apiserver.strategy import patch_types
from nodesync_sim.fake.apiserver.watch import WatchFilter, WatchHub, WatchParams, serve_watch


@dataclass(slots=True)
class HandlerContext:
    store: Store
    hub: WatchHub
    bookmark_interval: float
    watch_timeout: float
    server_address: str


def json_response(body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type="application/json")


async def _body(request: web.Request) -> Any:
    raw = await request.read()
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise errors.bad_request(f"the body of the request is not valid JSON: {exc}") from None


def _int_param(request: web.Request, name: str) -> int | None:
    value = request.query.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise errors.bad_request(f"{name}: invalid integer {value!r}") from None


def _dry_run(request: web.Request) -> bool:
    values = request.query.getall("dryRun", [])
    if any(v != "All" for v in values):
        raise errors.bad_request(f"dryRun: unsupported value {values!r}")
    return bool(values)


def _as_table(request: web.Request, rt: ResourceType) -> bool:
    return tables.has_table(rt) and tables.wants_table(request.headers.get("Accept", ""))


def _table_response(
    request: web.Request, rt: ResourceType, objs: list[StoredObject], metadata: dict[str, Any]
) -> web.Response:
    include = request.query.get("includeObject") or "Metadata"
    return json_response(dumps(tables.table(rt, objs, metadata, include_object=include)))


def list_metadata(result: ListResult) -> dict[str, Any]:
    meta: dict[str, Any] = {"resourceVersion": str(result.resource_version)}
    if result.continue_token:
        meta["continue"] = result.continue_token
    if result.remaining is not None:
        meta["remainingItemCount"] = result.remaining
    return meta


def list_body(rt: ResourceType, result: ListResult) -> bytes:
    meta = b'{"resourceVersion":"' + str(result.resource_version).encode() + b'"'
    if result.continue_token:
        meta += b',"continue":' + dumps(result.continue_token)
    if result.remaining is not None:
        meta += b',"remainingItemCount":' + str(result.remaining).encode()
    meta += b"}"
    head = b'{"kind":"' + rt.list_kind.encode() + b'","apiVersion":"'
    head += rt.api_version.encode() + b'","metadata":' + meta + b',"items":['
    # Items of a typed list carry no kind and apiVersion; a custom resource's (unstructured) do.
    items = (o.full_bytes() if rt.custom else o.item_bytes() for o in result.items)
    return head + b",".join(items) + b"]}"


def _discovery(info: RequestInfo, ctx: HandlerContext) -> web.Response:
    if info.verb != "get":
        raise errors.method_not_allowed(info.verb.upper())
    path = info.path.rstrip("/")
    doc: dict[str, Any] | None
    if path == "/api":
        doc = discovery.api_versions(ctx.server_address)
    elif path == "/apis":
        doc = discovery.api_group_list()
    elif path.startswith("/apis/") and path.count("/") == 2:
        doc = discovery.api_group(path.split("/")[2])
    elif info.version:
        doc = discovery.api_resource_list(info.group, info.version)
    else:
        doc = None
    if doc is None:
        raise errors.not_found_path()
    return json_response(dumps(doc))


def resolve(info: RequestInfo) -> ResourceType:
    rt = lookup(info.group, info.version, info.resource)
    if rt is None or (info.subresource and info.subresource not in rt.subresources):
        raise errors.not_found_path()
    if info.name and rt.namespaced and not info.namespace:
        raise errors.not_found_path()
    if info.namespace and not rt.namespaced and rt is not NAMESPACES:
        raise errors.not_found_path()  # a cluster-scoped kind has no namespaced path
    return rt


async def handle_api(
    request: web.Request, info: RequestInfo, ctx: HandlerContext
) -> web.StreamResponse:
    if not info.is_resource_request:
        return _discovery(info, ctx)
    rt = resolve(info)
    ns = info.namespace if rt.namespaced else ""
    store = ctx.store
    verb = info.verb
    sub = info.subresource
    if sub == "eviction":
        if verb != "create":
            raise errors.method_not_allowed(request.method)
        evict(store, ns, info.name, await _body(request), dry_run=_dry_run(request))
        status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
        return json_response(dumps({**status, "code": 201}), 201)
    if verb == "get":
        obj = store.get_object(rt, ns, info.name)
        if _as_table(request, rt):
            return _table_response(request, rt, [obj], {"resourceVersion": obj.resource_version})
        return json_response(obj.full_bytes())
    if verb in ("list", "watch"):
        if sub:
            raise errors.method_not_allowed(request.method)
        labels = parse_label_selector(request.query.get("labelSelector"))
        fields = parse_field_selector(request.query.get("fieldSelector"), rt.field_getters())
        if verb == "watch":
            timeout = _int_param(request, "timeoutSeconds")
            params = WatchParams(
                resource_version=request.query.get("resourceVersion"),
                timeout_seconds=float(timeout) if timeout else ctx.watch_timeout,
                allow_bookmarks=is_true(request.query.get("allowWatchBookmarks")),
                send_initial_events=is_true(request.query.get("sendInitialEvents")),
                bookmark_interval=ctx.bookmark_interval,
            )
            return await serve_watch(
                request, store, ctx.hub, WatchFilter(rt, ns, labels, fields), params
            )
        result = store.list_objects(
            rt,
            ns,
            labels=labels,
            fields=fields,
            limit=_int_param(request, "limit") or 0,
            continue_token=request.query.get("continue") or None,
            resource_version=request.query.get("resourceVersion"),
            resource_version_match=request.query.get("resourceVersionMatch"),
        )
        if _as_table(request, rt):
            return _table_response(request, rt, result.items, list_metadata(result))
        return json_response(list_body(rt, result))
    if verb == "create":
        if sub or info.name:
            raise errors.method_not_allowed(request.method)
        created = store.create_object(rt, ns, await _body(request), dry_run=_dry_run(request))
        return json_response(created.full_bytes(), 201)
    if verb == "update":
        obj, was_created = store.update_object(
            rt, ns, info.name, await _body(request), subresource=sub, dry_run=_dry_run(request)
        )
        return json_response(obj.full_bytes(), 201 if was_created else 200)
    if verb == "patch":
        content_type = request.content_type
        accepted = patch_types(rt)
        if content_type not in accepted:
            raise errors.unsupported_media_type(content_type, accepted)
        patched = store.patch_object(
            rt,
            ns,
            info.name,
            content_type,
            await _body(request),
            subresource=sub,
            dry_run=_dry_run(request),
        )
        return json_response(patched.full_bytes())
    if verb == "delete":
        if sub:
            raise errors.method_not_allowed(request.method)
        return await _delete(request, rt, ns, info.name, store)
    if verb == "deletecollection":
        return await _delete_collection(request, rt, ns, store)
    raise errors.method_not_allowed(request.method)


async def _delete_options(request: web.Request) -> DeleteOptions:
    body = await _body(request) or {}
    if not isinstance(body, dict):
        raise errors.bad_request("DeleteOptions must be a JSON object")
    grace = _int_param(request, "gracePeriodSeconds")
    if grace is None and body.get("gracePeriodSeconds") is not None:
        grace = int(body["gracePeriodSeconds"])
    pre = body.get("preconditions") or {}
    return DeleteOptions(
        grace_period_seconds=grace,
        precondition_uid=pre.get("uid"),
        precondition_resource_version=pre.get("resourceVersion"),
        propagation_policy=request.query.get("propagationPolicy") or body.get("propagationPolicy"),
    )


def _delete_answer(rt: ResourceType, obj: StoredObject, deleted: bool) -> web.Response:
    if not deleted or rt.return_deleted_object:
        return json_response(obj.full_bytes())
    return json_response(dumps(errors.success_status(rt, obj.name, obj.uid)))


async def _delete(
    request: web.Request, rt: ResourceType, ns: str, name: str, store: Store
) -> web.Response:
    options = await _delete_options(request)
    result = store.delete_object(rt, ns, name, options, dry_run=_dry_run(request))
    return _delete_answer(rt, result.obj, result.deleted)


async def _delete_collection(
    request: web.Request, rt: ResourceType, ns: str, store: Store
) -> web.Response:
    options = await _delete_options(request)
    labels = parse_label_selector(request.query.get("labelSelector"))
    fields = parse_field_selector(request.query.get("fieldSelector"), rt.field_getters())
    dry_run = _dry_run(request)
    with store.lock:
        items = store.list_objects(rt, ns, labels=labels, fields=fields).items
        for obj in items:
            store.delete_object(rt, obj.namespace, obj.name, options, dry_run=dry_run)
    status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    return json_response(dumps(status))
