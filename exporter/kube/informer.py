"""A list+watch cache of one resource, converted to exporter.model dataclasses.

The protocol is client-go's reflector, reduced to what nodesync needs:

1. Wait a random part of ``initial_jitter_seconds`` (100+ joining agents must not list at once).
2. List with resourceVersion="0" (a real server answers from its watch cache, not etcd).
3. Watch from the list's resourceVersion with bookmarks and a server-side timeout (jittered
   between 1x and 2x ``watch_timeout_seconds``); every event and bookmark advances the
   resourceVersion, and every new watch resumes from the last one seen, so nothing is lost.
4. 410 Gone (an ERROR event or an HTTP 410), or a resourceVersion the server has not reached:
   list again with a consistent read (resourceVersion="", never older than what was seen) and
   hand the difference to the handlers as ADDED / MODIFIED / DELETED.
5. Any other failure: mark the informer down, wait (Retry-After when the server gave one, else
   exponential backoff with jitter, capped at a few seconds and reset by every success) and
   resume the watch from the last resourceVersion.

Objects travel as plain dicts and are converted with the function given; one that cannot be
converted is skipped, counted and logged, and the rest is served. Handlers run synchronously in
the informer's task and must be quick; an exception in a handler is logged and ignored.

Stays whole: one protocol, client-go's reflector, whose steps share the resourceVersion, the
cache and the backoff; apart, each part would reach into the others' state.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from exporter.kube.api import JSONObject, KubeAPI, ObjectHook, WatchEvent
from exporter.kube.errors import Gone, KubeError, is_resource_version_too_large
from exporter.kube.observer import RequestObserver
from exporter.kube.resources import Resource
from exporter.tasks import TimeSlice

T = TypeVar("T")
Handler = Callable[[str, T | None, T | None], None]

ADDED, MODIFIED, DELETED, BOOKMARK, ERROR = "ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"
_EVENT_TYPES = frozenset({ADDED, MODIFIED, DELETED, BOOKMARK, ERROR})

log = logging.getLogger(__name__)

#: Yield to the event loop every this many objects while converting a big list.
_YIELD_EVERY = 500


@dataclass(frozen=True, slots=True)
class InformerTiming:
    """How long to wait for what. The watch timeout and the first backoff are client-go's
    reflector's; the backoff is capped at 2 s (client-go: 30 s) and reset by every success, so
    that an informer is current again within seconds of an API server's return (each failing
    informer then asks about every 1-2 s while the server is away)."""

    watch_timeout_seconds: float = 300.0  # each watch asks for 1x..2x this
    backoff_initial_seconds: float = 0.8
    backoff_max_seconds: float = 2.0
    max_retry_after_seconds: float = 120.0  # a server's Retry-After is honoured up to this
    short_watch_seconds: float = 1.0  # an empty watch ending sooner is backed off


class Backoff:
    """Exponential backoff with jitter: the n-th delay is initial * 2^n * (1 + rand), capped."""

    def __init__(self, initial: float, maximum: float, rng: random.Random | None = None) -> None:
        self._initial = initial
        self._max = maximum
        self._rng = rng or random.Random()
        self._current = initial

    def next(self) -> float:
        delay = min(self._current * (1.0 + self._rng.random()), self._max)
        self._current = min(self._current * 2.0, self._max)
        return delay

    def reset(self) -> None:
        self._current = self._initial


class Informer(Generic[T]):
    """Keeps ``store`` equal to the server's objects of one resource (and selector)."""

    def __init__(
        self,
        api: KubeAPI,
        resource: Resource,
        convert: Callable[[dict[str, Any]], T],
        *,
        namespace: str | None = None,
        field_selector: str | None = None,
        label_selector: str | None = None,
        initial_jitter_seconds: float = 0.0,
        observer: RequestObserver | None = None,
        name: str | None = None,
        timing: InformerTiming | None = None,
        list_object_hook: ObjectHook | None = None,
    ) -> None:
        """``list_object_hook``: see every JSON object of a list as it is decoded (to drop what
        ``convert`` never reads before the whole list is in memory)."""
        self._api = api
        self._list_object_hook = list_object_hook
        self._resource = resource
        self._convert = convert
        self._namespace = namespace
        self._field_selector = field_selector
        self._label_selector = label_selector
        self._initial_jitter = max(0.0, initial_jitter_seconds)
        self._observer = observer or api.observer
        self._timing = timing or InformerTiming()
        self.name = name or _describe(resource, namespace, field_selector, label_selector)
        self._items: dict[str, T] = {}
        self._versions: dict[str, str] = {}  # key -> resourceVersion of the stored object
        self._view = MappingProxyType(self._items)
        self._handlers: list[Handler[T]] = []
        self._synced = asyncio.Event()
        self._rv: str | None = None  # None: list first
        self._listed_rv: str | None = None  # the version of the last list
        self._consistent_relist = False
        self._up = False
        self._last_success: float | None = None
        self._last_error: KubeError | None = None
        self._rng = random.Random()
        self._backoff = Backoff(
            self._timing.backoff_initial_seconds, self._timing.backoff_max_seconds, self._rng
        )

    # ------------------------------------------------------------------ state

    @property
    def resource(self) -> Resource:
        return self._resource

    @property
    def store(self) -> Mapping[str, T]:
        """A live read-only view: key "namespace/name", or "name" for cluster-scoped kinds."""
        return self._view

    @property
    def synced(self) -> bool:
        """True once the first list completed (and ever after)."""
        return self._synced.is_set()

    @property
    def up(self) -> bool:
        """False before the first success and while the last list/watch attempt failed."""
        return self._up

    @property
    def last_success(self) -> float | None:
        """Unix time of the last successful list or watch event (bookmarks included)."""
        return self._last_success

    @property
    def last_error(self) -> KubeError | None:
        """The error of the last failed attempt (kept after recovery)."""
        return self._last_error

    @property
    def resource_version(self) -> str | None:
        """The last resourceVersion seen (None before the first list and after a 410)."""
        return self._rv

    async def wait_synced(self) -> None:
        await self._synced.wait()

    def add_handler(self, handler: Handler[T]) -> None:
        """Call ``handler(type, old, new)`` for every change from now on: ADDED (None, new),
        MODIFIED (old, new), DELETED (old, None). Added after the first sync, it first gets
        an ADDED for every object already in the store."""
        self._handlers.append(handler)
        if self.synced:
            for item in list(self._items.values()):
                self._call(handler, ADDED, None, item)

    # ------------------------------------------------------------------ the loop

    async def run(self) -> None:
        """List and watch until cancelled; never raises anything else (an unexpected error is
        logged with its traceback and retried like an API failure)."""
        if self._initial_jitter > 0:
            await asyncio.sleep(self._rng.uniform(0.0, self._initial_jitter))
        while True:
            try:
                if self._rv is None:
                    await self._list()
                    self._backoff.reset()
                await self._watch_once()
            except KubeError as err:
                expired = isinstance(err, Gone) or is_resource_version_too_large(err)
                if expired and self._rv is not None:
                    no_progress = self._rv == self._listed_rv
                    self._relist_next(err)
                    if no_progress:  # the list's own version expired: do not spin
                        await asyncio.sleep(self._backoff.next())
                    continue  # else at once, as client-go: the watch cache has moved on
                if expired:
                    self._consistent_relist = True
                await asyncio.sleep(self._failed(err))
            except Exception as exc:  # a bug must not end the cache for good: report, retry
                log.exception("informer %s: unexpected failure", self.name)
                await asyncio.sleep(self._failed(KubeError(0, type(exc).__name__, str(exc))))

    def _relist_next(self, err: KubeError) -> None:
        log.info(
            "informer %s: resourceVersion %s no longer served (%s %s), listing again",
            self.name,
            self._rv,
            err.code,
            err.reason,
            extra={"informer": self.name},
        )
        self._rv = None
        self._consistent_relist = True
        if self._observer is not None:
            self._observer.observe_relist(self._resource.plural)

    def _failed(self, err: KubeError) -> float:
        """Mark down; the delay before the next attempt."""
        self._up = False
        self._last_error = err
        if err.retry_after is not None:
            delay = min(err.retry_after, self._timing.max_retry_after_seconds)
            delay *= 1.0 + 0.1 * self._rng.random()  # do not come back all at the same instant
        else:
            delay = self._backoff.next()
        log.warning(
            "informer %s: %s; retrying in %.1f s",
            self.name,
            err,
            delay,
            extra={"informer": self.name, "code": err.code, "reason": err.reason},
        )
        return delay

    def _succeeded(self) -> None:
        self._up = True
        self._last_success = time.time()
        self._backoff.reset()

    async def _list(self) -> None:
        # "0": any version, from the watch cache. "": a consistent read, never older than what
        # this informer already saw (after 410 the cache may be behind what we had).
        page = await self._api.list(
            self._resource,
            namespace=self._namespace,
            field_selector=self._field_selector,
            label_selector=self._label_selector,
            resource_version="" if self._consistent_relist else "0",
            observer=self._observer,
            object_hook=self._list_object_hook,
        )
        await self._replace(page.items)
        self._rv = self._listed_rv = page.resource_version
        self._consistent_relist = False
        self._succeeded()
        self._synced.set()

    async def _watch_once(self) -> None:
        assert self._rv is not None
        seconds = self._timing.watch_timeout_seconds * (1.0 + self._rng.random())
        started = time.monotonic()
        events = 0
        async with self._api.watch(
            self._resource,
            resource_version=self._rv,
            timeout_seconds=max(1, int(seconds)),
            namespace=self._namespace,
            field_selector=self._field_selector,
            label_selector=self._label_selector,
            observer=self._observer,
        ) as stream:
            self._succeeded()
            turn = TimeSlice()
            async for event in stream:
                events += 1
                self._apply(event)
                await turn.pause()  # a burst of events from one read: let others in
        if events == 0 and time.monotonic() - started < self._timing.short_watch_seconds:
            # The server ends our watches at once: do not hammer it.
            await asyncio.sleep(self._backoff.next())
        else:
            self._backoff.reset()

    # ------------------------------------------------------------------ events

    def _apply(self, event: WatchEvent) -> None:
        if self._observer is not None:
            label = event.type if event.type in _EVENT_TYPES else "UNKNOWN"
            self._observer.observe_watch_event(self._resource.plural, label)
        failure = event.error()
        if failure is not None:
            raise failure
        obj = event.object
        rv = _resource_version(obj)
        if event.type == BOOKMARK:
            if rv:
                self._rv = rv
            self._succeeded()
            return
        if event.type not in (ADDED, MODIFIED, DELETED):
            log.debug("informer %s: ignoring a %s event", self.name, event.type)
            return
        if rv:
            self._rv = rv
        self._succeeded()
        key = self._resource.key_of(obj)
        if key is None:
            self._skip(obj, "no name")
            return
        old = self._items.get(key)
        if event.type == DELETED:
            if key not in self._items:
                return
            del self._items[key]
            self._versions.pop(key, None)
            self._notify(DELETED, old, None)
            return
        try:
            new = self._convert(obj)
        except Exception as exc:
            self._skip(obj, str(exc) or type(exc).__name__)
            return
        self._items[key] = new
        self._versions[key] = rv
        self._notify(ADDED if old is None else MODIFIED, old, new)

    async def _replace(self, items: list[JSONObject]) -> None:
        """Take a full list as the new store; tell handlers what changed."""
        fresh: dict[str, T] = {}
        versions: dict[str, str] = {}
        for i, obj in enumerate(items):
            if i and i % _YIELD_EVERY == 0:
                await asyncio.sleep(0)
            key = self._resource.key_of(obj)
            if key is None:
                self._skip(obj, "no name")
                continue
            rv = _resource_version(obj)
            if key in self._items and rv and self._versions.get(key) == rv:
                fresh[key] = self._items[key]  # unchanged: no conversion
            else:
                try:
                    fresh[key] = self._convert(obj)
                except Exception as exc:
                    self._skip(obj, str(exc) or type(exc).__name__)
                    if key not in self._items:
                        continue
                    # Keep what we had rather than report a malformed object as deleted.
                    fresh[key] = self._items[key]
                    rv = self._versions.get(key, "")
            versions[key] = rv
        changes: list[tuple[str, T | None, T | None]] = []
        for key, old in self._items.items():
            if key not in fresh:
                changes.append((DELETED, old, None))
        for key, new in fresh.items():
            previous = self._items.get(key)
            if previous is None:
                changes.append((ADDED, None, new))
            elif previous is not new:
                changes.append((MODIFIED, previous, new))
        self._items.clear()
        self._items.update(fresh)
        self._versions = versions
        for change in changes:
            self._notify(*change)

    def _skip(self, obj: JSONObject, why: str) -> None:
        meta = obj.get("metadata")
        ident = self._resource.key_of(obj) or (meta if isinstance(meta, dict) else {}).get("name")
        log.warning(
            "informer %s: skipping malformed %s %r: %s",
            self.name,
            self._resource.kind,
            ident,
            why,
            extra={"informer": self.name},
        )
        if self._observer is not None:
            self._observer.observe_skipped_object(self._resource.plural)

    def _notify(self, type_: str, old: T | None, new: T | None) -> None:
        for handler in self._handlers:
            self._call(handler, type_, old, new)

    def _call(self, handler: Handler[T], type_: str, old: T | None, new: T | None) -> None:
        try:
            handler(type_, old, new)
        except Exception:
            log.exception("informer %s: a %s handler failed", self.name, type_)


def _resource_version(obj: JSONObject) -> str:
    meta = obj.get("metadata")
    rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
    return rv if isinstance(rv, str) else ""


def _describe(
    resource: Resource,
    namespace: str | None,
    field_selector: str | None,
    label_selector: str | None,
) -> str:
    parts = [resource.plural]
    if namespace:
        parts.append(f"namespace={namespace}")
    if field_selector:
        parts.append(field_selector)
    if label_selector:
        parts.append(label_selector)
    return " ".join(parts)
