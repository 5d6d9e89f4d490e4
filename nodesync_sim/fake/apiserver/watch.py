"""Watch streams: one JSON event per line over a chunked HTTP response.

Every watcher reads the store's shared change history from its own cursor, so a change is
serialized once (cached on the `Change`) however many watchers get it. Selectors behave as in
the real watch cache: an object entering a watcher's selector arrives as ADDED, one leaving it
as DELETED (the previous state at the change's resourceVersion).

A watch without a resourceVersion (or "0") first gets synthetic ADDED events for the current
objects. A compacted resourceVersion gets HTTP 200 and one ERROR event carrying a 410 Expired
Status, as on a real server. Bookmarks (only metadata.resourceVersion) go out every
`bookmark_interval` seconds when the client allows them.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from aiohttp import web

from nodesync_sim.fake.apiserver.errors import APIError
from nodesync_sim.fake.apiserver.objects import Change, dumps, event_line
from nodesync_sim.fake.apiserver.resources import ResourceType
from nodesync_sim.fake.apiserver.selectors import FieldSelector, LabelSelector
from nodesync_sim.fake.apiserver.store import Store

INITIAL_BATCH = 500


@dataclass(frozen=True, slots=True)
class WatchFilter:
    rt: ResourceType
    namespace: str
    labels: LabelSelector
    fields: FieldSelector

    def _passes(self, obj: dict[str, object]) -> bool:
        return self.labels.matches_object(obj) and self.fields.matches(obj)

    def render(self, change: Change) -> bytes | None:
        """The line this watcher gets for `change`, or None."""
        if change.rt is not self.rt:
            return None
        if (
            self.namespace
            and self.rt.namespaced
            and not change.key.startswith(self.namespace + "/")
        ):
            return None
        if self.labels.empty and self.fields.empty:
            return change.line(change.type)
        now = change.type != "DELETED" and self._passes(change.obj.obj)
        before = change.prev is not None and self._passes(change.prev.obj)
        if now and before:
            return change.line("MODIFIED")
        if now:
            return change.line("ADDED")
        if before:
            return change.line("DELETED")
        return None


@dataclass(frozen=True, slots=True)
class WatchParams:
    resource_version: str | None
    timeout_seconds: float
    allow_bookmarks: bool
    send_initial_events: bool
    bookmark_interval: float


class _ActiveWatch:
    __slots__ = ("dropped", "wake")

    def __init__(self) -> None:
        self.wake = asyncio.Event()
        self.dropped = False


class WatchHub:
    """The open watches of one server: wakes them on changes, drops them on demand."""

    def __init__(self) -> None:
        self._watches: set[_ActiveWatch] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread_id: int | None = None
        self._wake_pending = False

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread_id = threading.get_ident()

    @property
    def open_watches(self) -> int:
        return len(self._watches)

    def on_change(self, change: Change) -> None:
        """Store listener; may be called from any thread."""
        loop = self._loop
        if loop is None:
            return
        if threading.get_ident() == self._thread_id:
            self._wake_all()
        elif not self._wake_pending:
            self._wake_pending = True
            with contextlib.suppress(RuntimeError):  # loop already closed
                loop.call_soon_threadsafe(self._wake_all)

    def _wake_all(self) -> None:
        self._wake_pending = False
        for w in self._watches:
            w.wake.set()

    def drop_all(self) -> int:
        """End every open watch stream (clients see the stream end and re-watch)."""
        dropped = len(self._watches)
        for w in self._watches:
            w.dropped = True
            w.wake.set()
        return dropped

    @contextlib.contextmanager
    def register(self) -> Iterator[_ActiveWatch]:
        w = _ActiveWatch()
        self._watches.add(w)
        try:
            yield w
        finally:
            self._watches.discard(w)


def _bookmark(rt: ResourceType, rv: int, *, initial_end: bool = False) -> bytes:
    meta: dict[str, object] = {"resourceVersion": str(rv), "creationTimestamp": None}
    if initial_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    obj = {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}
    return b'{"type":"BOOKMARK","object":' + dumps(obj) + b"}\n"


def error_line(err: APIError) -> bytes:
    return b'{"type":"ERROR","object":' + dumps(err.status()) + b"}\n"


async def serve_watch(
    request: web.Request,
    store: Store,
    hub: WatchHub,
    filt: WatchFilter,
    params: WatchParams,
) -> web.StreamResponse:
    """Stream events until the timeout, a drop, or the client goes away."""
    loop = asyncio.get_running_loop()
    with hub.register() as active:
        # open_watch raises 400 for a malformed version before anything is sent.
        try:
            start = store.open_watch(
                filt.rt,
                filt.namespace,
                params.resource_version,
                send_initial_events=params.send_initial_events,
            )
            expired: APIError | None = None
        except APIError as exc:
            if exc.code != 410:
                raise
            expired = exc
        resp = web.StreamResponse(
            status=200, headers={"Content-Type": "application/json", "Cache-Control": "no-cache"}
        )
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        try:
            if expired is not None:
                await resp.write(error_line(expired))
                return await _finish(resp)
            batch: list[bytes] = []
            for obj in start.initial:
                if filt.labels.matches_object(obj.obj) and filt.fields.matches(obj.obj):
                    batch.append(event_line("ADDED", obj))
                    if len(batch) >= INITIAL_BATCH:
                        await resp.write(b"".join(batch))
                        batch.clear()
            if params.send_initial_events and params.allow_bookmarks:
                batch.append(_bookmark(filt.rt, start.resource_version, initial_end=True))
            if batch:
                await resp.write(b"".join(batch))
            cursor = start.cursor
            rv = start.resource_version
            deadline = loop.time() + params.timeout_seconds
            next_bookmark = loop.time() + params.bookmark_interval
            while True:
                active.wake.clear()
                try:
                    changes, cursor, current = store.changes_since(cursor)
                except APIError as exc:
                    await resp.write(error_line(exc))
                    break
                lines = [line for c in changes if (line := filt.render(c)) is not None]
                rv = max(rv, current)
                if lines:
                    await resp.write(b"".join(lines))
                if active.dropped:
                    break
                now = loop.time()
                if params.allow_bookmarks and now >= next_bookmark:
                    await resp.write(_bookmark(filt.rt, rv))
                    next_bookmark = now + params.bookmark_interval
                if now >= deadline:
                    break
                wait_until = deadline
                if params.allow_bookmarks:
                    wait_until = min(wait_until, next_bookmark)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.0, wait_until - now)):
                        await active.wake.wait()
        except ConnectionError:
            return resp
        return await _finish(resp)


async def _finish(resp: web.StreamResponse) -> web.StreamResponse:
    with contextlib.suppress(ConnectionError):
        await resp.write_eof()
    return resp
