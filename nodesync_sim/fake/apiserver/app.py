"""The aiohttp application: middlewares (errors + counters, auth, faults), routes, lifecycle.

Request path through the middlewares, outermost first:
1. `_errors_and_counters`: parses the RequestInfo, turns APIError into a Status response, and
   counts every request by (verb, resource, code) and records it in the audit log.
2. `_auth`: Kubernetes and /_sim paths need a known bearer token (401), then the authorizer
   hook (403). /version, /healthz, /livez, /readyz are public, as with anonymous auth on.
3. `_faults`: injected latency and failures, Kubernetes paths only.

Admin endpoints (outside the Kubernetes paths, token required):
- GET /_sim/faults: the active fault rules.
- POST /_sim/faults: JSON with any of {"latency": {"seconds", "path_prefix", "verb"}},
  {"fail": {"count", "status", "path_prefix", "verb", "retry_after"}}, {"compact": true},
  {"drop_watches": true}.
- DELETE /_sim/faults: clear latency and failure rules.
- GET /_sim/counters: request counts as a list of {verb, resource, code, count}.
- POST /_sim/batch: many creates and merge patches in one request (see the batch module).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from nodesync_sim.fake.apiserver import errors
from nodesync_sim.fake.apiserver.audit import AuditLog, AuditRecord
from nodesync_sim.fake.apiserver.auth import Authorizer, TokenAuthenticator, allow_all
from nodesync_sim.fake.apiserver.batch import handle_batch
from nodesync_sim.fake.apiserver.counters import RequestCounters
from nodesync_sim.fake.apiserver.discovery import VERSION_INFO
from nodesync_sim.fake.apiserver.faults import Faults
from nodesync_sim.fake.apiserver.handlers import HandlerContext, handle_api, json_response
from nodesync_sim.fake.apiserver.keys import (
    AUDIT,
    AUTHENTICATOR,
    COUNTERS,
    FAULTS,
    HUB,
    SETTINGS,
    STORE,
)
from nodesync_sim.fake.apiserver.objects import dumps
from nodesync_sim.fake.apiserver.requestinfo import RequestInfo, parse
from nodesync_sim.fake.apiserver.resources import lookup
from nodesync_sim.fake.apiserver.store import Store
from nodesync_sim.fake.apiserver.watch import WatchHub

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PUBLIC_PATHS = frozenset({"/version", "/version/", "/healthz", "/livez", "/readyz"})


@dataclass(slots=True)
class ServerSettings:
    bookmark_interval: float = 60.0
    watch_timeout: float = 1800.0  # server-side watch timeout when the client sets none
    authorizer: Authorizer = field(default=allow_all)
    server_address: str = "127.0.0.1:0"  # host:port shown in /api discovery


_INFO = web.RequestKey("request_info", RequestInfo)
_USER = web.RequestKey("user", str)


def _is_api_path(path: str) -> bool:
    return path == "/api" or path == "/apis" or path.startswith(("/api/", "/apis/"))


def _status_response(err: errors.APIError) -> web.Response:
    resp = json_response(dumps(err.status()), err.code)
    resp.headers.update(err.headers)
    return resp


async def _created_name(request: web.Request, info: RequestInfo, code: int) -> str:
    """The name a create's body asks for (a real server's audit log has it from the body)."""
    if info.verb != "create" or info.subresource or code == 499 or not request.body_exists:
        return ""
    try:
        body = json.loads(await request.read())  # read once already: aiohttp keeps it
    except (ValueError, ConnectionError):
        return ""
    metadata = body.get("metadata") if isinstance(body, dict) else None
    return str(metadata.get("name") or "") if isinstance(metadata, dict) else ""


@web.middleware
async def _errors_and_counters(request: web.Request, handler: Handler) -> web.StreamResponse:
    info = parse(request.method, request.path, request.query)
    request[_INFO] = info
    code = 500
    try:
        resp = await handler(request)
        code = resp.status
        return resp
    except errors.APIError as exc:
        code = exc.code
        return _status_response(exc)
    except web.HTTPException as exc:
        code = exc.status
        raise
    except (asyncio.CancelledError, ConnectionError):
        code = 499  # the client went away (nginx's convention)
        raise
    except Exception as exc:
        log.exception("unhandled error serving %s %s", request.method, request.path)
        return _status_response(errors.internal(str(exc)))
    finally:
        request.app[COUNTERS].record(info.verb, info.resource_label, code)
        if info.is_resource_request:
            request.app[AUDIT].record(
                AuditRecord(
                    user=request.get(_USER, ""),
                    user_agent=request.headers.get("User-Agent", ""),
                    verb=info.verb,
                    resource=info.resource,
                    subresource=info.subresource,
                    namespace=info.namespace,
                    name=info.name or await _created_name(request, info, code),
                    code=code,
                    query=dict(request.query),
                )
            )


@web.middleware
async def _auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path in PUBLIC_PATHS:
        return await handler(request)
    user = request.app[AUTHENTICATOR].authenticate(request.headers.get("Authorization"))
    if user is None:
        raise errors.unauthorized()
    request[_USER] = user
    info = request[_INFO]
    if info.is_resource_request:
        allowed = request.app[SETTINGS].authorizer(
            user, info.verb, info.resource, info.subresource, info.namespace, info.name
        )
        if not allowed:
            rt = lookup(info.group, info.version, info.resource)
            raise errors.forbidden(
                user, info.verb, rt, info.resource, info.subresource, info.namespace, info.name
            )
    return await handler(request)


@web.middleware
async def _faults(request: web.Request, handler: Handler) -> web.StreamResponse:
    if not _is_api_path(request.path):
        return await handler(request)
    info = request[_INFO]
    faults = request.app[FAULTS]
    delay = faults.latency_for(request.path, info.verb)
    if delay > 0:
        await asyncio.sleep(delay)
    rule = faults.take_failure(request.path, info.verb)
    if rule is not None:
        if rule.status == 429:
            raise errors.too_many_requests(
                "Too many requests, please try again later.", rule.retry_after
            )
        if rule.status == 503:
            raise errors.APIError(503, "ServiceUnavailable", "injected fault: unavailable")
        if rule.status == 400:
            raise errors.bad_request("injected fault: the server refuses this request")
        raise errors.internal("injected fault")
    return await handler(request)


async def _api(request: web.Request) -> web.StreamResponse:
    app = request.app
    settings = app[SETTINGS]
    ctx = HandlerContext(
        store=app[STORE],
        hub=app[HUB],
        bookmark_interval=settings.bookmark_interval,
        watch_timeout=settings.watch_timeout,
        server_address=settings.server_address,
    )
    return await handle_api(request, request[_INFO], ctx)


async def _version(request: web.Request) -> web.Response:
    return json_response(dumps(VERSION_INFO))


async def _not_found(request: web.Request) -> web.Response:
    raise errors.not_found_path()


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _get_faults(request: web.Request) -> web.Response:
    return json_response(dumps(request.app[FAULTS].describe()))


async def _post_faults(request: web.Request) -> web.Response:
    try:
        body: Any = await request.json()
    except ValueError:
        raise errors.bad_request("the body must be JSON") from None
    if not isinstance(body, dict):
        raise errors.bad_request("the body must be a JSON object")
    app = request.app
    faults = app[FAULTS]
    result: dict[str, Any] = {}
    try:
        if isinstance(body.get("latency"), dict):
            lat = body["latency"]
            faults.add_latency(
                float(lat["seconds"]),
                path_prefix=str(lat.get("path_prefix", "")),
                verb=str(lat.get("verb", "")),
            )
        if isinstance(body.get("fail"), dict):
            fail = body["fail"]
            faults.fail_next(
                int(fail.get("count", 1)),
                int(fail.get("status", 500)),
                path_prefix=str(fail.get("path_prefix", "")),
                verb=str(fail.get("verb", "")),
                retry_after=int(fail.get("retry_after", 1)),
            )
    except (KeyError, TypeError, ValueError) as exc:
        raise errors.bad_request(f"invalid fault: {exc}") from None
    if body.get("compact"):
        result["compacted_to"] = app[STORE].compact()
    if body.get("drop_watches"):
        result["dropped_watches"] = app[HUB].drop_all()
    return json_response(dumps({**faults.describe(), **result}))


async def _delete_faults(request: web.Request) -> web.Response:
    request.app[FAULTS].clear()
    return json_response(dumps(request.app[FAULTS].describe()))


async def _get_counters(request: web.Request) -> web.Response:
    rows = [
        {"verb": k.verb, "resource": k.resource, "code": k.code, "count": n}
        for k, n in sorted(request.app[COUNTERS].snapshot().items())
    ]
    return json_response(dumps(rows))


async def _post_batch(request: web.Request) -> web.Response:
    return await handle_batch(request, request.app[STORE], request.app[COUNTERS])


async def _lifecycle(app: web.Application) -> AsyncIterator[None]:
    store, hub = app[STORE], app[HUB]
    hub.bind(asyncio.get_running_loop())
    store.add_listener(hub.on_change)
    try:
        yield
    finally:
        store.remove_listener(hub.on_change)


async def _drop_watches(app: web.Application) -> None:
    app[HUB].drop_all()


def create_app(
    store: Store,
    tokens: Mapping[str, str],
    *,
    settings: ServerSettings | None = None,
    faults: Faults | None = None,
    counters: RequestCounters | None = None,
    audit: AuditLog | None = None,
) -> web.Application:
    """The test API server as an aiohttp application over `store`."""
    app = web.Application(middlewares=[_errors_and_counters, _auth, _faults])
    app[STORE] = store
    app[HUB] = WatchHub()
    app[FAULTS] = faults or Faults()
    app[COUNTERS] = counters or RequestCounters()
    app[AUDIT] = audit if audit is not None else AuditLog()
    app[AUTHENTICATOR] = TokenAuthenticator(tokens)
    app[SETTINGS] = settings or ServerSettings()
    app.cleanup_ctx.append(_lifecycle)
    app.on_shutdown.append(_drop_watches)
    app.router.add_get("/version", _version)
    app.router.add_get("/version/", _version)
    for path in ("/healthz", "/livez", "/readyz"):
        app.router.add_get(path, _healthz)
    app.router.add_get("/_sim/faults", _get_faults)
    app.router.add_post("/_sim/faults", _post_faults)
    app.router.add_delete("/_sim/faults", _delete_faults)
    app.router.add_get("/_sim/counters", _get_counters)
    app.router.add_post("/_sim/batch", _post_batch)
    for prefix in ("/api", "/apis"):
        app.router.add_route("*", prefix, _api)
        app.router.add_route("*", prefix + "/{tail:.*}", _api)
    app.router.add_route("*", "/{tail:.*}", _not_found)
    return app
