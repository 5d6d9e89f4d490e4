"""``POST /_sim/batch``: many creates and patches in one HTTP request, for benchmarks at scale.

A cluster of 65,000 nodes renews 6,500 Leases a second. Each renewal is a write with its own
resourceVersion and its own watch event, which is what a controller watching the Leases pays
for; the HTTP request that carries it is what kubelet pays, on its own node. One Python process
cannot send or serve 6,500 requests a second on a shared machine, so a benchmark sends them
here in batches: every entry is applied as the request it stands for would be (the same
create and patch strategies, validation and resourceVersion, one watch event each), in order,
and counted in ``/_sim/counters`` under its own verb and resource. What no entry gets is an
HTTP request of its own.

The body: ``{"requests": [{"method": "POST" | "PATCH", "path": "/api/v1/nodes",
"contentType": "application/merge-patch+json", "body": {...}}, ...], "objects": true}``.
The answer: ``{"results": [{"code": 201, "object": {...}}, ...]}``, one per entry in order;
with ``"objects": false``, each result carries the object's ``resourceVersion`` instead of the
object; an entry that fails has ``code`` and ``message`` and does not stop the others.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from nodesync_sim.fake.apiserver import errors
from nodesync_sim.fake.apiserver.counters import RequestCounters
from nodesync_sim.fake.apiserver.handlers import json_response, resolve
from nodesync_sim.fake.apiserver.objects import StoredObject, dumps
from nodesync_sim.fake.apiserver.requestinfo import parse
from nodesync_sim.fake.apiserver.store import Store
from nodesync_sim.fake.apiserver.strategy import patch_types

JSONObject = dict[str, Any]
METHODS = frozenset({"POST", "PATCH"})


def _apply(store: Store, entry: Any) -> tuple[str, str, StoredObject]:
    """Apply one entry: (verb, resource label, the stored object). Raises APIError."""
    if not isinstance(entry, dict) or entry.get("method") not in METHODS:
        raise errors.bad_request("each request needs a method, POST or PATCH")
    path = entry.get("path")
    if not isinstance(path, str):
        raise errors.bad_request("each request needs a path")
    info = parse(str(entry["method"]), path, {})
    if not info.is_resource_request or info.subresource:
        raise errors.not_found_path()
    rt = resolve(info)
    ns = info.namespace if rt.namespaced else ""
    if info.verb == "create":
        if info.name:
            raise errors.method_not_allowed("POST")
        return info.verb, info.resource_label, store.create_object(rt, ns, entry.get("body"))
    content_type = str(entry.get("contentType", ""))
    accepted = patch_types(rt)
    if content_type not in accepted:
        raise errors.unsupported_media_type(content_type, accepted)
    patched = store.patch_object(rt, ns, info.name, content_type, entry.get("body"))
    return info.verb, info.resource_label, patched


def apply_batch(
    store: Store, counters: RequestCounters, requests: list[Any], objects: bool
) -> list[JSONObject]:
    """Every entry of ``requests`` in order; one result each."""
    results: list[JSONObject] = []
    for entry in requests:
        try:
            verb, resource, stored = _apply(store, entry)
        except errors.APIError as exc:
            given = entry if isinstance(entry, dict) else {}
            info = parse(str(given.get("method", "")), str(given.get("path", "")), {})
            counters.record(info.verb, info.resource_label, exc.code)
            results.append({"code": exc.code, "message": exc.message})
            continue
        code = 201 if verb == "create" else 200
        counters.record(verb, resource, code)
        if objects:
            results.append({"code": code, "object": stored.to_dict()})
        else:
            results.append({"code": code, "resourceVersion": stored.resource_version})
    return results


async def handle_batch(
    request: web.Request, store: Store, counters: RequestCounters
) -> web.Response:
    try:
        body: Any = json.loads(await request.read())
    except ValueError:
        raise errors.bad_request("the body must be JSON") from None
    if not isinstance(body, dict) or not isinstance(body.get("requests"), list):
        raise errors.bad_request('the body must be {"requests": [...]}')
    results = apply_batch(store, counters, body["requests"], bool(body.get("objects", True)))
    return json_response(dumps({"results": results}))
