"""Waiting for a child process to be ready, on the event loop, and timing it.

Every wait polls, fails at once with the child's log tail when the child exits, and fails with
it too when ``within`` seconds pass (:class:`nodesync_sim.real.process.ChildProcessFailed`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from nodesync_sim.real.process import ChildProcess, ChildProcessFailed


async def wait_until(
    child: ChildProcess,
    ready: Callable[[], Awaitable[bool]],
    *,
    within: float,
    what: str = "ready",
    interval: float = 0.05,
) -> None:
    """Poll ``await ready()`` every ``interval`` until it is true."""
    deadline = time.monotonic() + within
    while True:
        if await ready():
            return
        if not child.running:
            raise ChildProcessFailed(
                f"{child.name} exited (code {child.returncode}) before it was {what}:\n"
                + child.log_tail()
            )
        if time.monotonic() >= deadline:
            raise ChildProcessFailed(
                f"{child.name} was not {what} within {within:g} s:\n" + child.log_tail()
            )
        await asyncio.sleep(interval)


async def wait_http(child: ChildProcess, url: str, *, within: float) -> None:
    """Until ``GET url`` answers 200."""
    async with aiohttp.ClientSession() as http:

        async def answers() -> bool:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with http.get(url, timeout=aiohttp.ClientTimeout(total=1)) as response:
                    return response.status == 200
            return False

        await wait_until(child, answers, within=within, what=f"answering {url}")


async def wait_port(child: ChildProcess, port: int, *, within: float) -> None:
    """Until something accepts a TCP connection on 127.0.0.1:``port``."""

    async def accepts() -> bool:
        with contextlib.suppress(OSError):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return True
        return False

    await wait_until(child, accepts, within=within, what=f"listening on port {port}")


async def wait_path(child: ChildProcess, path: Path, *, within: float) -> None:
    """Until ``path`` exists (a file the child writes once it is ready)."""

    async def exists() -> bool:
        return await asyncio.to_thread(path.exists)

    await wait_until(child, exists, within=within, what=f"ready (no {path.name} yet)")


@dataclass(frozen=True)
class Readiness:
    """How long after ``started`` a child first answered, and was ready; the ready answer."""

    answered_s: float
    ready_s: float
    body: bytes


async def time_until_ready(
    child: ChildProcess,
    http: aiohttp.ClientSession,
    url: str,
    *,
    started: float,
    answered: Callable[[int], bool],
    ready: Callable[[int, bytes], bool],
    interval: float,
    request_timeout: float,
    within: float = 60.0,
) -> Readiness:
    """``GET url`` every ``interval`` from ``started`` (``time.monotonic()`` when the child was
    started) until ``ready(status, body)``: the first time ``answered(status)`` held and the
    time it was ready, both measured from ``started``. A request that fails has status 0."""
    answered_s: float | None = None
    while True:
        try:
            timing = aiohttp.ClientTimeout(total=request_timeout)
            async with http.get(url, timeout=timing) as response:
                status, body = response.status, await response.read()
        except (aiohttp.ClientError, TimeoutError):
            status, body = 0, b""
        now = time.monotonic()
        if answered_s is None and answered(status):
            answered_s = now - started
        if ready(status, body):
            first = answered_s if answered_s is not None else now - started
            return Readiness(first, now - started, body)
        if not child.running or now - started > within:
            raise ChildProcessFailed(f"{child.name} was not ready at {url}:\n{child.log_tail()}")
        await asyncio.sleep(interval)
