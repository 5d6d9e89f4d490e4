"""Evicting a pod through the Eviction API, so PodDisruptionBudgets are respected, and finding
which version of that API the server serves (as kubectl drain does).

A refusal (429) is retried with exponential backoff and jitter until a timeout, then reported
``blocked``: never forced, never a plain delete. The eviction carries the pod's uid as a
precondition, so a pod that replaced it under the same name is never evicted.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

import msgspec

from exporter.kube.convert import ConversionError, decoded
from exporter.kube.errors import Conflict, InvalidResponse, NotFound, TooManyRequests
from exporter.kube.informer import Backoff
from exporter.kube.reads import ObjectReads
from exporter.kube.resources import PODS, Resource
from exporter.kube.writing import Channel
from exporter.model.kube import PodInfo

log = logging.getLogger(__name__)

#: The eviction subresource, for the request metrics' ``resource`` label only.
EVICTIONS = Resource(
    group="", version="v1", plural="pods/eviction", kind="Eviction", namespaced=True
)
#: The core group's discovery document, which names the Eviction API's version.
CORE_DISCOVERY = Resource(
    group="", version="v1", plural="discovery", kind="APIResourceList", namespaced=False
)
#: The Status cause of an eviction refused by a PodDisruptionBudget.
CAUSE_DISRUPTION_BUDGET = "DisruptionBudget"
#: A server's Retry-After is honoured up to this many seconds.
MAX_RETRY_AFTER = 30.0

EvictionOutcome = Literal["evicted", "gone", "blocked", "skipped"]


@dataclass(frozen=True, slots=True)
class EvictionResult:
    """``evicted``: the Eviction API accepted it (or the pod is already terminating);
    ``gone``: the pod no longer exists, or another pod took its name (uid differs);
    ``blocked``: PodDisruptionBudgets refused it until the timeout;
    ``skipped``: a DaemonSet or mirror pod, which eviction must not touch.
    ``attempts`` counts eviction requests sent (0: none was needed)."""

    outcome: EvictionOutcome
    detail: str
    attempts: int
    dry_run: bool = False


class APIResource(msgspec.Struct, frozen=True, gc=False):
    name: str = ""
    group: str = ""
    version: str = ""


class APIResourceList(msgspec.Struct, frozen=True, gc=False):
    """A discovery document, as far as the Eviction API's version is read from it."""

    resources: list[APIResource] = []


class Evictions:
    def __init__(
        self,
        channel: Channel,
        reads: ObjectReads,
        *,
        backoff_initial: float = 1.0,
        backoff_max: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self._channel = channel
        self._reads = reads
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._api_version: str | None = None

    async def evict(
        self,
        namespace: str,
        name: str,
        uid: str = "",
        *,
        timeout: float = 120.0,  # noqa: ASYNC109 - how long refusals are retried, not a deadline
    ) -> EvictionResult:
        """Evict the pod (``uid``: only if it is still that pod), in the version of the
        Eviction API the server serves (:meth:`eviction_api_version`)."""
        pod = await self._reads.get_pod(namespace, name)
        ref = f"pod {namespace}/{name}"
        if pod is None:
            return EvictionResult("gone", f"{ref} not found", 0)
        if uid and pod.uid != uid:
            return EvictionResult("gone", f"{ref} is another pod now (uid {pod.uid})", 0)
        if pod.owner_kind == "DaemonSet":
            return EvictionResult("skipped", f"{ref} belongs to a DaemonSet", 0)
        if pod.mirror:
            return EvictionResult("skipped", f"{ref} is a static pod's mirror", 0)
        if pod.deletion_timestamp is not None:
            return EvictionResult("evicted", f"{ref} is already terminating", 0)
        if self._channel.dry_run:
            return EvictionResult(
                "evicted", f"dry run: would evict {ref} (budgets not checked)", 0, dry_run=True
            )
        return await self._evict(pod, timeout)

    async def eviction_api_version(self) -> str:
        """The Eviction API's group/version, as kubectl drain finds it: what the core group's
        discovery names for ``pods/eviction`` (``policy/v1`` since Kubernetes 1.22,
        ``policy/v1beta1`` before). Read once; a server without the subresource is an error."""
        if self._api_version is None:
            body = await self._channel.api.request("GET", CORE_DISCOVERY, "get", "/api/v1")
            try:
                discovery = decoded(body, APIResourceList)
            except ConversionError as exc:
                raise InvalidResponse(200, "InvalidResponse", f"discovery: {exc}") from exc
            entry = next((r for r in discovery.resources if r.name == "pods/eviction"), None)
            if entry is None:
                raise NotFound(404, "NotFound", "the API server serves no pods/eviction")
            group, version = entry.group, entry.version
            self._api_version = f"{group}/{version}" if group and version else "policy/v1"
        return self._api_version

    async def _evict(self, pod: PodInfo, retry_for: float) -> EvictionResult:
        ref = f"pod {pod.namespace}/{pod.name}"
        body = {
            "apiVersion": await self.eviction_api_version(),
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
            "deleteOptions": {"preconditions": {"uid": pod.uid}},
        }
        path = PODS.path(pod.namespace, pod.name) + "/eviction"
        deadline = self._clock() + retry_for
        backoff = Backoff(self._backoff_initial, self._backoff_max, self._rng)
        attempts = 0
        while True:
            attempts += 1
            try:
                await self._channel.write("POST", EVICTIONS, "create", path, body=body)
            except NotFound:
                return EvictionResult("gone", f"{ref} not found", attempts)
            except Conflict:
                return EvictionResult("gone", f"{ref} is another pod now", attempts)
            except TooManyRequests as exc:
                refused = exc
            else:
                return EvictionResult("evicted", f"evicted {ref}", attempts)
            remaining = deadline - self._clock()
            if remaining <= 0:
                break
            delay = max(backoff.next(), min(refused.retry_after or 0.0, MAX_RETRY_AFTER))
            log.info(
                "eviction refused; retrying",
                extra={"pod": ref, "causes": list(refused.causes), "delay": delay},
            )
            await self._sleep(min(delay, remaining))
        if CAUSE_DISRUPTION_BUDGET in refused.causes:
            return EvictionResult(
                "blocked",
                f"{ref}: a PodDisruptionBudget refused eviction for {retry_for:g} s "
                f"({attempts} attempts): {refused.message}",
                attempts,
            )
        raise refused
