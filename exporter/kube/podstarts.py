"""Pods as they start running, from now on: a watch without a cache.

The controller needs one fact of the pods: when the first pod that is not a DaemonSet's starts
running on a new node. Listing and caching every pod of a large cluster for that would cost
more than the rest of the controller (hundreds of thousands of objects), so this is a watch of
running pods (``fieldSelector=status.phase=Running``: a pod entering Running arrives as ADDED)
that starts from the current resourceVersion, read with a one-item list, and keeps nothing:
each pod that starts is handed to the handler, converted to (node, start time), and forgotten.

What runs while the watch is down (a reconnect, a 410 Gone, the API server away) is not seen:
after a 410 the watch starts again from the current version, and pods that started in the gap
are missed (their nodes show no ``pod_running`` stage). Failures are backed off as the
informers do (exporter.kube.informer).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable

from exporter.kube.api import KubeAPI
from exporter.kube.convert import pod_start
from exporter.kube.errors import Gone, KubeError, is_resource_version_too_large
from exporter.kube.informer import ADDED, BOOKMARK, MODIFIED, Backoff, InformerTiming
from exporter.kube.resources import PODS

log = logging.getLogger(__name__)

RUNNING = "status.phase=Running"

#: Called with the node and the pod's start (None when no container says) of each running pod
#: that is neither a DaemonSet's nor a mirror.
StartHandler = Callable[[str, float | None], None]


class PodStarts:
    """Hands every pod seen running (ADDED or MODIFIED while Running) to ``handler``."""

    def __init__(
        self, api: KubeAPI, handler: StartHandler, *, timing: InformerTiming | None = None
    ) -> None:
        self._api = api
        self._handler = handler
        self._timing = timing or InformerTiming()
        self._rng = random.Random()
        self._backoff = Backoff(
            self._timing.backoff_initial_seconds, self._timing.backoff_max_seconds, self._rng
        )
        self._rv: str | None = None
        self.up = False
        self.last_success: float | None = None

    async def run(self) -> None:
        """Watch until cancelled; failures are logged and retried."""
        while True:
            try:
                if self._rv is None:
                    page = await self._api.list(PODS, field_selector=RUNNING, limit=1)
                    self._rv = page.resource_version
                await self._watch_once()
            except KubeError as err:
                if isinstance(err, Gone) or is_resource_version_too_large(err):
                    self._rv = None  # start again from now: what started meanwhile is missed
                self.up = False
                delay = self._backoff.next()
                log.warning("pod starts: %s; retrying in %.1f s", err, delay)
                await asyncio.sleep(delay)

    async def _watch_once(self) -> None:
        assert self._rv is not None
        seconds = self._timing.watch_timeout_seconds * (1.0 + self._rng.random())
        opened = time.monotonic()
        events = 0
        async with self._api.watch(
            PODS,
            resource_version=self._rv,
            timeout_seconds=max(1, int(seconds)),
            field_selector=RUNNING,
        ) as stream:
            self._succeeded()
            async for event in stream:
                events += 1
                failure = event.error()
                if failure is not None:
                    raise failure
                meta = event.object.get("metadata")
                rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
                if isinstance(rv, str) and rv:
                    self._rv = rv
                self._succeeded()
                if event.type == BOOKMARK or event.type not in (ADDED, MODIFIED):
                    continue
                started = pod_start(event.object)
                if started is not None:
                    try:
                        self._handler(*started)
                    except Exception:
                        log.exception("pod starts: the handler failed")
        if events == 0 and time.monotonic() - opened < self._timing.short_watch_seconds:
            await asyncio.sleep(self._backoff.next())  # the server ends our watches at once

    def _succeeded(self) -> None:
        self.up = True
        self.last_success = time.time()
        self._backoff.reset()
