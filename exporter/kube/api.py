"""Raw JSON requests to the API server over one aiohttp session.

Reads return plain dicts: typed models are slow on large lists and one malformed object fails a
whole typed list, and the ``kubernetes`` client package would cost ~18 MiB to import. This
module builds the URLs, authenticates (bearer token, client certificates, token refresh: see
exporter.kube.config) and owns the connection pool. Every request has a deadline; a watch's
deadline is a bit above its server-side ``timeoutSeconds``, so a silent connection cannot hang
it. Failures are raised as :mod:`exporter.kube.errors`.

Stays whole: one client, whose requests share its session, deadlines and error translation; the
helpers below it serve it alone.
"""

from __future__ import annotations

import gc
import json
import ssl
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any, TypeAlias
from urllib.parse import quote

import aiohttp
import msgspec
from aiohttp.helpers import basicauth_from_netrc, get_env_proxy_for_url, netrc_from_env
from yarl import URL

from exporter import __version__
from exporter.kube.config import ClientConfiguration, authorization, ssl_context
from exporter.kube.errors import InvalidResponse, KubeError, from_status, translate
from exporter.kube.objects import WatchLine
from exporter.kube.observer import RequestObserver, code_label
from exporter.kube.resources import Resource
from exporter.model.codec import error_message

JSONObject = dict[str, Any]

#: Bodies above this size are parsed with the garbage collector paused (3x faster on big lists).
_LARGE_BODY = 1 << 20
#: Connections to the server at most (the kubernetes client's default).
_POOL_SIZE = 100
#: A watch event can exceed aiohttp's default read buffer (as the kubernetes client sets it).
_READ_BUFFER = 1 << 21
_USER_AGENT = f"nodesync/{__version__}"
_WATCH_LINE = msgspec.json.Decoder(WatchLine)


@dataclass(frozen=True, slots=True)
class ListPage:
    items: list[JSONObject]  # only the entries that are JSON objects
    resource_version: str
    continue_token: str | None = None


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
    object: JSONObject

    def error(self) -> KubeError | None:
        """For an ERROR event, the error its Status carries (a 410 Expired is a Gone)."""
        if self.type != "ERROR":
            return None
        return from_status(500, self.object, http_reason="WatchError")


#: Called with every JSON object as it is decoded; its answer replaces the object.
ObjectHook: TypeAlias = Callable[[dict[str, Any]], Any]


def loads(body: bytes, object_hook: ObjectHook | None = None) -> Any:
    """json.loads, with the collector paused for big bodies (a list allocates millions of
    objects, each allocation burst would otherwise trigger full collections)."""
    if len(body) < _LARGE_BODY or not gc.isenabled():
        return json.loads(body, object_hook=object_hook)
    gc.disable()
    try:
        return json.loads(body, object_hook=object_hook)
    finally:
        gc.enable()


@dataclass(frozen=True, slots=True)
class Environment:
    """What the environment says about reaching the server: a proxy from ``HTTPS_PROXY`` /
    ``HTTP_PROXY`` unless ``NO_PROXY`` names its host, as kubectl honours them (its credentials
    from the URL or ``~/.netrc``), and credentials for the server in ``~/.netrc`` (``NETRC``)."""

    proxy: URL | None = None
    proxy_authorization: str | None = None  # the Proxy-Authorization header
    authorization: str | None = None  # the Authorization header, unless configured


def environment(host: str) -> Environment:
    """The Environment for a server at ``host``, looked up once for the client's session: what
    aiohttp's ``trust_env`` looks up again before every request, reading the environment and
    the netrc file in a thread each time (two hops between threads per request, before it is
    sent)."""
    url = URL(host)
    proxy: URL | None = None
    proxy_auth: aiohttp.BasicAuth | None = None
    auth: aiohttp.BasicAuth | None = None
    with suppress(LookupError):
        proxy, proxy_auth = get_env_proxy_for_url(url)
    if url.host is not None:
        with suppress(LookupError):
            auth = basicauth_from_netrc(netrc_from_env(), url.host)
    return Environment(
        proxy,
        proxy_auth.encode() if proxy_auth is not None else None,
        auth.encode() if auth is not None else None,
    )


class KubeAPI:
    """Raw GET/list/watch (and generic requests for writers) against one API server."""

    def __init__(
        self,
        configuration: ClientConfiguration,
        *,
        request_timeout: float = 60.0,
        connect_timeout: float = 10.0,
        watch_timeout_margin: float = 30.0,
        observer: RequestObserver | None = None,
    ) -> None:
        self.configuration = configuration
        self._session: aiohttp.ClientSession | None = None
        self._environment = Environment()
        self._request_timeout = request_timeout
        self._connect_timeout = connect_timeout
        self._watch_margin = watch_timeout_margin
        self.observer = observer

    def _http(self) -> aiohttp.ClientSession:
        """The session, made at the first request (it needs the running event loop)."""
        if self._session is None:
            cfg = self.configuration
            tls: ssl.SSLContext | bool = ssl_context(cfg) if cfg.host.startswith("https:") else True
            self._environment = environment(cfg.host)
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=_POOL_SIZE, ssl=tls),
                trust_env=False,  # read once, above, not before every request
                read_bufsize=_READ_BUFFER,
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def __aenter__(self) -> KubeAPI:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ reads

    async def get(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        observer: RequestObserver | None = None,
    ) -> JSONObject:
        """One object; NotFound when it does not exist."""
        body = await self.request(
            "GET", resource, "get", resource.path(namespace, name), observer=observer
        )
        if not isinstance(body, dict):
            raise InvalidResponse(200, "InvalidResponse", "the object is not a JSON object")
        return body

    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        field_selector: str | None = None,
        label_selector: str | None = None,
        resource_version: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        observer: RequestObserver | None = None,
        object_hook: ObjectHook | None = None,
    ) -> ListPage:
        """One page of a list (all of it unless ``limit`` is set). ``object_hook`` sees every
        JSON object as it is decoded (e.g. to drop what the caller never reads, before the
        whole list is in memory)."""
        query = _selectors(field_selector, label_selector)
        if resource_version is not None:
            query.append(("resourceVersion", resource_version))
        if limit:
            query.append(("limit", str(limit)))
        if continue_token:
            query.append(("continue", continue_token))
        body = await self.request(
            "GET",
            resource,
            "list",
            resource.path(namespace),
            query=query,
            observer=observer,
            object_hook=object_hook,
        )
        meta = body.get("metadata") if isinstance(body, dict) else None
        items = body.get("items") if isinstance(body, dict) else None
        if not isinstance(meta, dict) or not isinstance(items, list | None):
            raise InvalidResponse(200, "InvalidResponse", f"not a {resource.kind}List")
        rv = meta.get("resourceVersion")
        token = meta.get("continue")
        return ListPage(
            items=[i for i in items or () if isinstance(i, dict)],
            resource_version=rv if isinstance(rv, str) else "",
            continue_token=token if isinstance(token, str) and token else None,
        )

    @asynccontextmanager
    async def watch(
        self,
        resource: Resource,
        *,
        resource_version: str,
        timeout_seconds: int,
        namespace: str | None = None,
        field_selector: str | None = None,
        label_selector: str | None = None,
        allow_bookmarks: bool = True,
        observer: RequestObserver | None = None,
    ) -> AsyncIterator[AsyncIterator[WatchEvent]]:
        """Open a watch from ``resource_version``; iterate the events until the server ends the
        stream (after ``timeout_seconds``). ERROR events are yielded, and reported to the
        observer as failed watches with their Status code. A broken stream raises Unreachable."""
        obs = observer or self.observer
        query = _selectors(field_selector, label_selector)
        query += [("watch", "true"), ("resourceVersion", resource_version)]
        if allow_bookmarks:
            query.append(("allowWatchBookmarks", "true"))
        query.append(("timeoutSeconds", str(timeout_seconds)))
        limit = timeout_seconds + self._watch_margin
        timeout = aiohttp.ClientTimeout(
            total=limit, sock_connect=self._connect_timeout, sock_read=limit
        )
        path = resource.path(namespace)
        started = time.monotonic()
        response = await self._send("GET", path, query, None, None, timeout, resource, "watch", obs)
        events = self._events(response, resource, started, obs)
        try:
            yield events
        finally:
            await events.aclose()
            _close_now(response)

    async def _events(
        self,
        response: aiohttp.ClientResponse,
        resource: Resource,
        started: float,
        obs: RequestObserver | None,
    ) -> AsyncGenerator[WatchEvent, None]:
        pending: list[bytes] = []  # the start of a line split across chunks
        while True:
            try:
                chunk = await response.content.readany()
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                err = translate(exc)
                _report(obs, resource, "watch", started, code_label(err))
                raise err from exc
            if not chunk:
                rest = b"".join(pending)
                if rest.strip():
                    yield self._event(rest, resource, started, obs)
                return
            start = 0
            while (end := chunk.find(b"\n", start)) >= 0:
                line = chunk[start:end]
                start = end + 1
                if pending:
                    pending.append(line)
                    line = b"".join(pending)
                    pending.clear()
                if line.strip():
                    yield self._event(line, resource, started, obs)
            if start < len(chunk):
                pending.append(chunk[start:])

    def _event(
        self, line: bytes, resource: Resource, started: float, obs: RequestObserver | None
    ) -> WatchEvent:
        try:
            raw = _WATCH_LINE.decode(line)
        except msgspec.ValidationError as exc:
            err = InvalidResponse(200, "InvalidResponse", f"watch event: {error_message(exc)}")
            _report(obs, resource, "watch", started, code_label(err))
            raise err from exc
        except msgspec.DecodeError as exc:
            err = InvalidResponse(200, "InvalidResponse", f"watch line is not JSON: {exc}")
            _report(obs, resource, "watch", started, code_label(err))
            raise err from exc
        event = WatchEvent(raw.type, raw.object)
        failure = event.error()
        if failure is not None:
            _report(obs, resource, "watch", started, code_label(failure))
        return event

    # ------------------------------------------------------------------ any request

    async def request(
        self,
        method: str,
        resource: Resource,
        verb: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str | None = None,
        observer: RequestObserver | None = None,
        object_hook: ObjectHook | None = None,
    ) -> Any:
        """Send one request and return its JSON answer (writers use this too).

        ``verb`` is the Kubernetes verb the request is reported under.
        """
        obs = observer or self.observer
        timeout = aiohttp.ClientTimeout(
            total=self._request_timeout, sock_connect=self._connect_timeout
        )
        started = time.monotonic()
        response = await self._send(
            method,
            path,
            query or (),
            body,
            content_type,
            timeout,
            resource,
            verb,
            obs,
            report=False,
        )
        try:
            raw = await response.read()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            err = translate(exc)
            _report(obs, resource, verb, started, code_label(err))
            raise err from exc
        finally:
            response.release()
        try:
            parsed = loads(raw, object_hook)
        except ValueError as exc:
            err = InvalidResponse(response.status, "InvalidResponse", f"body is not JSON: {exc}")
            _report(obs, resource, verb, started, code_label(err))
            raise err from exc
        _report(obs, resource, verb, started, str(response.status))
        return parsed

    async def _send(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]],
        body: Any,
        content_type: str | None,
        client_timeout: aiohttp.ClientTimeout,
        resource: Resource,
        verb: str,
        obs: RequestObserver | None,
        *,
        report: bool = True,
    ) -> aiohttp.ClientResponse:
        """Send; an answer other than 2xx is raised (and reported). With ``report`` a 2xx is
        reported too (watches: the time to the answer's headers)."""
        cfg = self.configuration
        headers: dict[str, str] = {
            "Accept": "application/json",
            "Content-Type": content_type or "application/json",
            "User-Agent": _USER_AGENT,
        }
        url = cfg.host + path
        if query:
            url += "?" + "&".join(f"{key}={quote(str(value))}" for key, value in query)
        session = self._http()
        found = self._environment
        options: dict[str, Any] = {}
        if cfg.tls_server_name:
            options["server_hostname"] = cfg.tls_server_name
        if cfg.proxy:
            options["proxy"] = cfg.proxy
        elif found.proxy is not None:
            options["proxy"] = found.proxy
            if found.proxy_authorization is not None:
                options["proxy_headers"] = {"Proxy-Authorization": found.proxy_authorization}
        started = time.monotonic()
        try:
            credentials = await authorization(cfg)
            if credentials:
                headers["Authorization"] = credentials
            elif found.authorization is not None:
                headers["Authorization"] = found.authorization
            response = await session.request(
                method,
                url,
                headers=headers,
                data=None if body is None else json.dumps(body),
                timeout=client_timeout,
                **options,
            )
        except Exception as exc:
            err = translate(exc)
            _report(obs, resource, verb, started, code_label(err))
            raise err from exc
        if 200 <= response.status < 300:
            if report:
                _report(obs, resource, verb, started, str(response.status))
            return response
        try:
            raw = await response.read()
        except (aiohttp.ClientError, TimeoutError, OSError):
            raw = b""
        finally:
            response.release()
        err = from_status(
            response.status, raw, _headers(response.headers), http_reason=response.reason or ""
        )
        _report(obs, resource, verb, started, code_label(err))
        raise err


def _close_now(response: aiohttp.ClientResponse) -> None:
    """Close a watch's connection now. ``close()`` alone starts a graceful TLS shutdown that
    waits for the server's answer in the background, outside the connection pool (which aborts
    the connections it holds when the client closes): a client closed at shutdown would leave
    that socket open after its event loop ended. A watch's connection is never reused."""
    connection = response.connection
    transport = connection.transport if connection is not None else None
    response.close()
    if transport is not None:
        transport.abort()


def _selectors(field_selector: str | None, label_selector: str | None) -> list[tuple[str, str]]:
    query: list[tuple[str, str]] = []
    if field_selector:
        query.append(("fieldSelector", field_selector))
    if label_selector:
        query.append(("labelSelector", label_selector))
    return query


def _headers(headers: Mapping[str, str]) -> dict[str, str]:
    retry_after = headers.get("Retry-After")
    return {"Retry-After": retry_after} if retry_after is not None else {}


def _report(
    obs: RequestObserver | None, resource: Resource, verb: str, started: float, code: str
) -> None:
    if obs is not None:
        obs.observe_request(resource.plural, verb, time.monotonic() - started, code)
