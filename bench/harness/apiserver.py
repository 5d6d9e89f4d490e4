"""``nodesync sim apiserver`` in a child process, and the HTTP client the benchmarks use on it.

The client sends what kubelet, the agents or a test would send (JSON bodies, merge patches, a
streaming watch), authenticated with the server's token. It adds nothing a real client would
not pay for: one keep-alive session, at most 64 connections.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.harness.processes import nodesync_child
from bench.harness.readiness import wait_path
from nodesync_sim.real.process import ChildProcess, free_port

JSONObject = dict[str, Any]
#: A snapshot of the server's request counters: (verb, resource, status code) -> requests.
Counts = dict[tuple[str, str, int], int]


class APIError(RuntimeError):
    """The API server answered with a status of 300 or more."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"{status}: {text[:300]}")
        self.status = status


@dataclass
class SimAPIServer:
    """The test API server in a child process (``await start()``, ``await close()``), and a
    session authenticated to it. ``history_limit`` and ``history_age`` (a duration): how many
    watch events the server keeps and for how long (None: its defaults), enough that no watch
    falls off it during a long run."""

    workdir: Path
    history_limit: int | None = None
    history_age: str | None = None
    port: int = field(default_factory=free_port)
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    child: ChildProcess | None = None
    session: aiohttp.ClientSession | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        """Written by the server once it listens; the controller and agents read it."""
        return self.workdir / "kubeconfig"

    @property
    def log(self) -> Path:
        return self.workdir / "apiserver.log"

    @property
    def pid(self) -> int:
        pid = self.child.pid if self.child is not None else None
        assert pid is not None, "the test API server is not running"
        return pid

    async def start(self, within: float = 30.0) -> None:
        """Start the server; return once it answers (raises ChildProcessFailed if it does not
        within ``within`` seconds)."""
        args = [
            "sim",
            "apiserver",
            "--web.listen-address",
            f"127.0.0.1:{self.port}",
            "--kubeconfig",
            str(self.kubeconfig),
            "--log.level",
            "warning",
        ]
        if self.history_limit is not None:
            args += ["--history-limit", str(self.history_limit)]
        if self.history_age is not None:
            args += ["--history-age", self.history_age]
        self.child = nodesync_child(*args, log=self.log, env={"NODESYNC_SIM_TOKEN": self.token})
        self.child.start()
        self.session = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {self.token}"},
            connector=aiohttp.TCPConnector(limit=64),
            timeout=aiohttp.ClientTimeout(total=30),
        )
        await wait_path(self.child, self.kubeconfig, within=within)
        await self.call("GET", "/api")

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
        if self.child is not None:
            self.child.stop()

    async def call(
        self,
        method: str,
        path: str,
        body: object = None,
        content_type: str = "application/json",
        params: Mapping[str, str] | None = None,
    ) -> Any:
        """One request; the decoded JSON answer (None when empty). Raises APIError."""
        assert self.session is not None, "start() first"
        async with self.session.request(
            method,
            f"{self.url}{path}",
            data=None if body is None else json.dumps(body),
            headers={"Content-Type": content_type},
            params=params,
        ) as response:
            text = await response.text()
            if response.status >= 300:
                raise APIError(response.status, text)
            return json.loads(text) if text else None

    async def create(self, path: str, body: JSONObject) -> JSONObject:
        return dict(await self.call("POST", path, body))

    async def merge_patch(self, path: str, body: JSONObject) -> JSONObject:
        return dict(await self.call("PATCH", path, body, "application/merge-patch+json"))

    async def batch(self, requests: Sequence[JSONObject], objects: bool = True) -> list[JSONObject]:
        """Many creates and patches in one request (``/_sim/batch``): each applied as the
        request it stands for, with its own watch event; one result each, in order."""
        answer = await self.call("POST", "/_sim/batch", {"requests": requests, "objects": objects})
        return list(answer["results"])

    async def counters(self) -> Counts:
        """The server's own count of the requests it answered (``/_sim/counters``)."""
        rows = await self.call("GET", "/_sim/counters")
        return {(r["verb"], r["resource"], int(r["code"])): int(r["count"]) for r in rows}

    async def watch(self, path: str, resource_version: str) -> AsyncGenerator[JSONObject, None]:
        """The events of one watch of ``path`` from ``resource_version`` (bookmarks included),
        until the server ends it (at the latest after 900 s). Close it (``aclosing``) when
        leaving it early, so its connection is released at once."""
        assert self.session is not None, "start() first"
        params = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "900",
        }
        async with self.session.get(
            f"{self.url}{path}",
            params=params,
            timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
        ) as response:
            async for line in response.content:
                if line.strip():
                    yield json.loads(line)
