"""Kubelet-local probe: is kubelet healthy, and which pods does it have directories for.

Both are read on the node itself (kubelet's healthz port on loopback and its root directory), never
through the API server. A kubelet that is not running is reported as unhealthy, not as an error.
"""

from __future__ import annotations

import asyncio
import os
import re
import time

import aiohttp

from exporter.model.host import KubeletSnapshot

__all__ = [
    "DEFAULT_HEALTHZ_URL",
    "DEFAULT_KUBELET_ROOT",
    "KubeletProbe",
    "is_pod_uid",
    "probe_healthz",
    "read_pod_dirs",
]

DEFAULT_HEALTHZ_URL = "http://127.0.0.1:10248/healthz"
DEFAULT_KUBELET_ROOT = "/var/lib/kubelet"

# Pods from the API server have RFC 4122 UIDs; static pods (from manifest files) get a UID that is
# the hex MD5 of their source, 32 hex digits without dashes. kubelet names pod dirs by either.
_POD_UID = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32}",
    re.IGNORECASE,
)

# healthz answers "ok"; anything much longer is not a healthy kubelet and need not be read.
_MAX_BODY = 64


async def _read_bounded(stream: aiohttp.StreamReader, limit: int) -> bytes:
    """The body up to EOF, or its first ``limit`` + 1 bytes if it is longer."""
    body = b""
    while len(body) <= limit:
        chunk = await stream.read(limit + 1 - len(body))
        if not chunk:
            break
        body += chunk
    return body


def is_pod_uid(name: str) -> bool:
    """Whether ``name`` looks like a pod UID kubelet names a pod directory after."""
    return _POD_UID.fullmatch(name) is not None


async def _check_healthz(session: aiohttp.ClientSession, url: str, seconds: float) -> str:
    """Empty when kubelet answered healthy, else a short description of what went wrong."""
    try:
        async with session.get(
            url, timeout=aiohttp.ClientTimeout(total=seconds), allow_redirects=False
        ) as response:
            if response.status != 200:
                return f"healthz: HTTP {response.status}"
            body = await _read_bounded(response.content, _MAX_BODY)
            if len(body) > _MAX_BODY:
                return f"healthz: body longer than {_MAX_BODY} bytes"
            text = body.decode("utf-8", errors="replace").strip()
            if text != "ok":
                return f"healthz: unexpected body {text[:32]!r}"
            return ""
    except TimeoutError:
        return f"healthz: no answer within {seconds:g}s"
    except (aiohttp.ClientError, OSError) as exc:
        return f"healthz: {type(exc).__name__}: {exc}"


async def probe_healthz(
    session: aiohttp.ClientSession,
    url: str,
    timeout: float,  # noqa: ASYNC109 - a per-request budget handed to aiohttp, covering the body
) -> bool:
    """True only when ``url`` answers HTTP 200 with body "ok" within ``timeout`` seconds.

    Refused connections, timeouts, redirects, other status codes and other bodies are all False;
    network errors never raise.
    """
    return await _check_healthz(session, url, timeout) == ""


def read_pod_dirs(kubelet_root: str) -> tuple[frozenset[str], bool]:
    """Pod UIDs that have a directory under ``<kubelet_root>/pods``, and whether it was readable.

    kubelet keeps one directory per pod it knows (``<root>/pods/<uid>/``), including pods it is
    still tearing down. Entries that are not directories, or not named like a pod UID, are ignored.
    A missing or unreadable ``pods`` directory gives ``(frozenset(), False)``.
    """
    uids: set[str] = set()
    try:
        with os.scandir(os.path.join(kubelet_root, "pods")) as entries:
            for entry in entries:
                if is_pod_uid(entry.name) and entry.is_dir(follow_symlinks=False):
                    uids.add(entry.name)
    except OSError:
        return frozenset(), False
    return frozenset(uids), True


class KubeletProbe:
    """Reads a :class:`KubeletSnapshot`; owns one HTTP session, created on first use.

    Use it from one event loop and ``await close()`` when done (or ``async with``).
    """

    def __init__(
        self,
        healthz_url: str = DEFAULT_HEALTHZ_URL,
        kubelet_root: str = DEFAULT_KUBELET_ROOT,
        timeout: float = 2.0,
    ) -> None:
        self._healthz_url = healthz_url
        self._kubelet_root = kubelet_root
        self._timeout = timeout
        self._session: aiohttp.ClientSession | None = None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # One connection is enough; do not pick up proxy settings meant for remote hosts.
            connector = aiohttp.TCPConnector(limit=1)
            self._session = aiohttp.ClientSession(connector=connector, trust_env=False)
        return self._session

    async def read(self) -> KubeletSnapshot:
        """Probe healthz and list pod directories concurrently.

        kubelet being down or its root missing is reported in the snapshot, never raised.
        """
        health, (uids, readable) = await asyncio.gather(
            _check_healthz(self._get_session(), self._healthz_url, self._timeout),
            asyncio.to_thread(read_pod_dirs, self._kubelet_root),
        )
        errors = [health] if health else []
        if not readable:
            errors.append(f"pod dirs: {os.path.join(self._kubelet_root, 'pods')} not readable")
        return KubeletSnapshot(
            taken_at=time.time(),
            healthy=not health,
            pod_uids=uids,
            pod_dir_readable=readable,
            error="; ".join(errors),
        )

    async def healthy(self) -> bool:
        """Probe healthz only, now (:func:`probe_healthz`)."""
        return await probe_healthz(self._get_session(), self._healthz_url, self._timeout)

    async def close(self) -> None:
        """Close the HTTP session, if one was opened. Safe to call more than once."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def __aenter__(self) -> KubeletProbe:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
