"""Run the test API server: `APIServer` (async, in the caller's loop) and `ThreadedAPIServer`
(its own loop in a background thread, for synchronous tests and the sync `kubernetes` client).

    async with APIServer() as server:
        cfg = server.configuration()            # kubernetes.client.Configuration
        server.store.create("nodes", {"metadata": {"name": "n1"}})
        server.faults.fail_next(2, 500)

    with ThreadedAPIServer() as server:          # same attributes; store calls are thread-safe
        ...
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from aiohttp import web

from nodesync_sim.fake.apiserver.app import ServerSettings, create_app
from nodesync_sim.fake.apiserver.audit import AuditLog
from nodesync_sim.fake.apiserver.auth import Authorizer, allow_all
from nodesync_sim.fake.apiserver.counters import RequestCounters
from nodesync_sim.fake.apiserver.faults import Faults
from nodesync_sim.fake.apiserver.history import DEFAULT_HISTORY_SECONDS
from nodesync_sim.fake.apiserver.keys import HUB
from nodesync_sim.fake.apiserver.store import Store
from nodesync_sim.fake.apiserver.tls import ServingCertificate

if TYPE_CHECKING:
    import kubernetes.aio.client
    import kubernetes.client

DEFAULT_USER = "admin"


def kubeconfig_document(
    url: str, token: str, name: str = "nodesync-sim", *, ca_pem: str | None = None
) -> dict[str, Any]:
    """A kubeconfig (as a dict) pointing at `url` with a bearer token, trusting the CA
    `ca_pem` (PEM text) when given."""
    cluster: dict[str, str] = {"server": url}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem.encode()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
        "preferences": {},
    }


def write_kubeconfig(
    path: str | os.PathLike[str], url: str, token: str, *, ca_pem: str | None = None
) -> Path:
    """Write a kubeconfig (JSON is valid YAML) readable only by the owner."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(kubeconfig_document(url, token, ca_pem=ca_pem), fh, indent=2)
    return target


class APIServer:
    """The test API server on loopback, started and stopped in the running event loop."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        extra_tokens: Mapping[str, str] | None = None,
        store: Store | None = None,
        history_limit: int = 20_000,
        history_seconds: float | None = DEFAULT_HISTORY_SECONDS,
        bookmark_interval: float = 60.0,
        watch_timeout: float = 1800.0,
        authorizer: Authorizer = allow_all,
        tls: ServingCertificate | None = None,
    ) -> None:
        self.host = host
        #: HTTPS with this certificate when set (before :meth:`start`), else plain HTTP.
        self.tls = tls
        self.port = port
        self.token = token or secrets.token_urlsafe(24)
        self.tokens: dict[str, str] = {self.token: DEFAULT_USER, **(extra_tokens or {})}
        self.store = store or Store(history_limit=history_limit, history_seconds=history_seconds)
        self.faults = Faults()
        self.counters = RequestCounters()
        #: Every resource request answered, in order (who, what, which object, the status).
        self.audit = AuditLog()
        self.settings = ServerSettings(
            bookmark_interval=bookmark_interval,
            watch_timeout=watch_timeout,
            authorizer=authorizer,
        )
        self._runner: web.AppRunner | None = None
        self._app: web.Application | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://{self.host}:{self.port}"

    async def start(self) -> None:
        if self._runner is not None:
            raise RuntimeError("already started")
        app = create_app(
            self.store,
            self.tokens,
            settings=self.settings,
            faults=self.faults,
            counters=self.counters,
            audit=self.audit,
        )
        runner = web.AppRunner(
            app, handler_cancellation=True, access_log=None, shutdown_timeout=5.0
        )
        await runner.setup()
        context = self.tls.server_context() if self.tls is not None else None
        site = web.TCPSite(runner, self.host, self.port, reuse_address=True, ssl_context=context)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self.port = int(runner.addresses[0][1])
        self.settings.server_address = f"{self.host}:{self.port}"
        self._runner, self._app = runner, app

    async def stop(self) -> None:
        runner, self._runner, self._app = self._runner, None, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> APIServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # ---------------------------------------------------------------- test controls

    def compact(self) -> int:
        """Forget history: watches and exact lists from older versions get 410 Expired."""
        return self.store.compact()

    def drop_watches(self) -> int:
        """End all open watch streams (call from the server's loop)."""
        if self._app is None:
            return 0
        return self._app[HUB].drop_all()

    @property
    def open_watches(self) -> int:
        return 0 if self._app is None else self._app[HUB].open_watches

    # ---------------------------------------------------------------- client configuration

    def configuration(self, token: str | None = None) -> kubernetes.client.Configuration:
        """A `kubernetes.client.Configuration` for this server."""
        from kubernetes import client

        return client.Configuration(
            host=self.url, api_key={"authorization": f"Bearer {token or self.token}"}
        )

    def aio_configuration(self, token: str | None = None) -> kubernetes.aio.client.Configuration:
        """A `kubernetes.aio.client.Configuration` for this server."""
        from kubernetes.aio import client

        return client.Configuration(
            host=self.url, api_key={"authorization": f"Bearer {token or self.token}"}
        )

    def write_kubeconfig(self, path: str | os.PathLike[str]) -> Path:
        ca_pem = self.tls.ca_pem if self.tls is not None else None
        return write_kubeconfig(path, self.url, self.token, ca_pem=ca_pem)


class ThreadedAPIServer:
    """An `APIServer` running its own event loop in a daemon thread."""

    def __init__(self, **kwargs: Any) -> None:
        self.server = APIServer(**kwargs)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    # Delegated attributes.
    @property
    def url(self) -> str:
        return self.server.url

    @property
    def token(self) -> str:
        return self.server.token

    @property
    def store(self) -> Store:
        return self.server.store

    @property
    def faults(self) -> Faults:
        return self.server.faults

    @property
    def counters(self) -> RequestCounters:
        return self.server.counters

    def configuration(self, token: str | None = None) -> kubernetes.client.Configuration:
        return self.server.configuration(token)

    def write_kubeconfig(self, path: str | os.PathLike[str]) -> Path:
        return self.server.write_kubeconfig(path)

    def compact(self) -> int:
        return self.server.compact()

    def drop_watches(self) -> int:
        return self._call(self.server.drop_watches)

    @property
    def open_watches(self) -> int:
        return self._call(lambda: self.server.open_watches)

    def _call(self, fn: Callable[[], int]) -> int:
        loop = self._loop
        if loop is None:
            raise RuntimeError("not running")

        async def run() -> int:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), loop).result(timeout=10)

    def start(self, timeout: float = 10.0) -> None:
        self._thread = threading.Thread(target=self._run, name="sim-apiserver", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("the test API server did not start")
        if self._error is not None:
            self._thread.join()
            raise self._error

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            try:
                await self.server.start()
            except BaseException as exc:
                self._error = exc
                self._ready.set()
                return
            self._ready.set()
            try:
                await self._stop.wait()
            finally:
                await self.server.stop()

        asyncio.run(main())

    def stop(self, timeout: float = 15.0) -> None:
        loop, stop, thread = self._loop, self._stop, self._thread
        if thread is None:
            return
        if loop is not None and stop is not None:
            loop.call_soon_threadsafe(stop.set)
        thread.join(timeout)
        if thread.is_alive():
            raise TimeoutError("the test API server thread did not stop")
        self._thread = None
        self._loop = None

    def __enter__(self) -> ThreadedAPIServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
