"""A reverse proxy between one client (a controller subprocess) and the real kube-apiserver, to
stop that client at an exact request: deterministic crashes instead of timed ones.

The proxy listens on plain HTTP on loopback and forwards every request (headers, bearer token,
body) to the API server over TLS, streaming the answers (watches included). It runs its own
event loop in a thread, so tests stay synchronous.

:meth:`KubeProxy.trap` arms it with a predicate on requests. The first request that matches is
forwarded and answered as usual; from the moment it matched, every *later* request of the client
is held: it never reaches the API server. So the client made exactly that effect and none of
what it would have done next (its status write, its Event, its Lease renewal); the test then
SIGKILLs it. :attr:`KubeProxy.sprung` is set once the matched request was answered by the API
server (the effect happened). :meth:`KubeProxy.release` answers the held requests 503 without
forwarding them (after the kill: nobody reads the answers).

:meth:`KubeProxy.gate` instead pauses the client before an exact request: a request that matches
waits (:attr:`KubeProxy.gated` is set) until :meth:`KubeProxy.open_gate`, and is then forwarded
as usual; every other request goes through meanwhile. So a test can look at the cluster just
before an effect (e.g. ``kubectl describe`` of a Node about to be deleted).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from aiohttp import ClientSession, ClientTimeout, TCPConnector, web

from nodesync_sim.real.kube_apiserver import LocalKubeAPIServer

_HOP_BY_HOP = frozenset(
    {
        "host",
        "connection",
        "keep-alive",
        "content-length",
        "transfer-encoding",
        "upgrade",
        "proxy-connection",
        "te",
        "trailer",
    }
)
_START_TIMEOUT = 10.0


@dataclass(frozen=True)
class ProxiedRequest:
    """A request as the trap's predicate sees it. ``body`` is the parsed JSON body (None when
    there is none or it is not JSON)."""

    method: str
    path: str
    query: dict[str, list[str]]
    body: Any


Predicate = Callable[[ProxiedRequest], bool]


class KubeProxy:
    """See the module docstring. ``start`` it, ``stop`` it (also safe when never started)."""

    def __init__(self, server: LocalKubeAPIServer, name: str = "proxy") -> None:
        self.server = server
        self.name = name
        self.port = 0
        self.sprung = threading.Event()
        self.matched: ProxiedRequest | None = None
        self.forwarded: list[ProxiedRequest] = []
        self.held: list[ProxiedRequest] = []
        self._predicate: Predicate | None = None
        self._holding = False
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stopped: asyncio.Event | None = None
        self._released: asyncio.Event | None = None
        self._error: BaseException | None = None
        self.gated = threading.Event()
        self._gate: Predicate | None = None
        self._gate_open: asyncio.Event | None = None

    # -- the test's side ---------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> KubeProxy:
        self._thread = threading.Thread(
            target=self._run, name=f"kubeproxy-{self.name}", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(_START_TIMEOUT) or self._error is not None:
            raise RuntimeError(f"the proxy did not start: {self._error!r}")
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        stopped = self._stopped
        if stopped is not None:
            with contextlib.suppress(RuntimeError):  # the loop ended already
                loop.call_soon_threadsafe(stopped.set)
        thread.join(_START_TIMEOUT)
        self._thread = None

    def trap(self, predicate: Predicate) -> None:
        """Forward the first request matching ``predicate``, then hold every later one."""
        with self._lock:
            if self._predicate is not None or self._holding:
                raise RuntimeError("the proxy is armed already")
            self._predicate = predicate

    def release(self) -> None:
        """Answer the held requests (and any later one) 503, never forwarding them."""
        loop, released = self._loop, self._released
        if loop is not None and released is not None:
            with contextlib.suppress(RuntimeError):  # the loop ended already
                loop.call_soon_threadsafe(released.set)

    def gate(self, predicate: Predicate) -> None:
        """Hold the requests matching ``predicate`` until :meth:`open_gate` (see above)."""
        with self._lock:
            if self._gate is not None:
                raise RuntimeError("the proxy has a gate already")
            self._gate = predicate

    def open_gate(self) -> None:
        """Forward the requests waiting at the gate, and every later one."""
        loop, gate_open = self._loop, self._gate_open
        if loop is not None and gate_open is not None:
            with contextlib.suppress(RuntimeError):  # the loop ended already
                loop.call_soon_threadsafe(gate_open.set)

    def kubeconfig(self, identity: str, path: Path) -> Path:
        """A kubeconfig for ``identity`` that reaches the API server through this proxy."""
        token = self.server.identities[identity].token
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "proxy", "cluster": {"server": self.url}}],
            "users": [{"name": identity, "user": {"token": token}}],
            "contexts": [{"name": identity, "context": {"cluster": "proxy", "user": identity}}],
            "current-context": identity,
        }
        path.write_text(json.dumps(config, indent=2) + "\n")
        return path

    # -- the proxy's loop --------------------------------------------------------------

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported by start(); the thread must not die silently
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        self._released = asyncio.Event()
        self._gate_open = asyncio.Event()
        context = ssl.create_default_context(cafile=str(self.server.ca_file))
        async with ClientSession(
            connector=TCPConnector(ssl=context, limit=0),
            auto_decompress=False,
            timeout=ClientTimeout(total=None, sock_connect=10),
        ) as session:

            async def handle(request: web.Request) -> web.StreamResponse:
                return await self._handle(request, session)

            app = web.Application(client_max_size=64 * 1024 * 1024)
            app.router.add_route("*", "/{tail:.*}", handle)
            runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
            await runner.setup()
            try:
                site = web.TCPSite(runner, "127.0.0.1", 0)
                await site.start()
                self.port = int(runner.addresses[0][1])
                self._ready.set()
                await self._stopped.wait()
            finally:
                self._released.set()
                self._gate_open.set()
                await runner.cleanup()

    def _at_gate(self, request: ProxiedRequest) -> bool:
        """True when the request must wait for the gate to open."""
        with self._lock:
            gate, gate_open = self._gate, self._gate_open
        return (
            gate is not None and gate_open is not None and not gate_open.is_set() and gate(request)
        )

    def _decide(self, request: ProxiedRequest) -> bool:
        """True when the request may go through."""
        with self._lock:
            if self._holding:
                self.held.append(request)
                return False
            if self._predicate is not None and self._predicate(request):
                self._predicate = None
                self._holding = True
                self.matched = request
            self.forwarded.append(request)
            return True

    async def _handle(self, request: web.Request, session: ClientSession) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        seen = ProxiedRequest(request.method, request.path, parse_qs(request.query_string), body)
        if self._at_gate(seen):
            assert self._gate_open is not None
            self.gated.set()
            await self._gate_open.wait()
        if not self._decide(seen):
            assert self._released is not None
            await self._released.wait()
            return web.json_response({"error": "held by the test proxy"}, status=503)
        is_trap = seen is self.matched
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        async with session.request(
            request.method,
            self.server.url + request.path_qs,
            headers=headers,
            data=raw if raw else None,
        ) as upstream:
            if is_trap:
                self.sprung.set()
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for key, value in upstream.headers.items():
                if key.lower() not in _HOP_BY_HOP:
                    response.headers.add(key, value)
            await response.prepare(request)
            try:
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
            except (ConnectionError, RuntimeError):
                pass  # the client went away (killed): nothing to answer to
            return response
