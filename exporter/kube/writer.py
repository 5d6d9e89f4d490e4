"""Every write nodesync makes to the API server, each idempotent and safe to repeat.

Each write reads the live object first and does nothing when it is already so ("changed" is
False), or when the object is gone: "not found" is success, as for the CRI cleanup calls. Each
write request takes a token of the shared :class:`AsyncRateLimiter` first (retries included;
reads take none). With ``dry_run`` nothing is written at all: the live state is still read and
the result says what would have happened (``dry_run=True``).

Where a race matters the write carries what was read: taints are rewritten with the Node's
resourceVersion (409 Conflict: read again and retry, a few times), a Node is deleted with a
precondition on its uid, a pod is evicted with a precondition on its uid. Cordon, uncordon and
annotations are per-field patches that cannot lose a concurrent change.

Failures other than those handled here are raised as :mod:`exporter.kube.errors`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from exporter.kube.api import JSONObject, KubeAPI
from exporter.kube.convert import ConversionError, node_info, pod_info
from exporter.kube.errors import (
    AlreadyExists,
    Conflict,
    InvalidResponse,
    NotFound,
    TooManyRequests,
)
from exporter.kube.informer import Backoff
from exporter.kube.ratelimit import AsyncRateLimiter
from exporter.kube.resources import EVENTS, NODES, PODS, Resource
from exporter.model.kube import NodeInfo, PodInfo, Taint
from exporter.model.rfc3339 import format_time

__all__ = ["AsyncRateLimiter", "EvictionResult", "KubeWriter", "WriteResult"]

log = logging.getLogger(__name__)

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
MERGE_PATCH = "application/merge-patch+json"

#: The eviction subresource, for the request metrics' ``resource`` label only.
EVICTIONS = Resource(
    group="", version="v1", plural="pods/eviction", kind="Eviction", namespaced=True
)
#: The core group's discovery document, which names the Eviction API's version.
CORE_DISCOVERY = Resource(
    group="", version="v1", plural="discovery", kind="APIResourceList", namespaced=False
)

#: How often a write that lost a race (409) reads again and retries before giving up.
CONFLICT_ATTEMPTS = 5
#: The Status cause of an eviction refused by a PodDisruptionBudget.
CAUSE_DISRUPTION_BUDGET = "DisruptionBudget"
#: A server's Retry-After is honoured up to this many seconds.
MAX_RETRY_AFTER = 30.0
EVENT_TYPES = frozenset({"Normal", "Warning"})
#: Longest event message written (the API's events.k8s.io limit; core/v1 shows the same).
MAX_EVENT_MESSAGE = 1024
_MAX_NAME = 253

EvictionOutcome = Literal["evicted", "gone", "blocked", "skipped"]


@dataclass(frozen=True, slots=True)
class WriteResult:
    """``changed``: the write was made (or, in a dry run, would be). False when the object was
    already so, or is gone. ``detail`` says which, for logs and audit."""

    changed: bool
    detail: str
    dry_run: bool = False


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


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def taint_json(taint: Taint) -> JSONObject:
    out: JSONObject = {"key": taint.key, "effect": taint.effect}
    if taint.value:
        out["value"] = taint.value
    if taint.time_added is not None:
        out["timeAdded"] = format_time(taint.time_added)
    return out


def event_name(object_name: str, key: str) -> str:
    """The Event's name for an audit key: the same key always gives the same name, so a
    retried create is refused as AlreadyExists instead of recording the step twice."""
    suffix = ".nodesync-" + hashlib.sha256(key.encode()).hexdigest()[:20]
    head = object_name[: _MAX_NAME - len(suffix)].rstrip(".-") or "object"
    return head + suffix


class KubeWriter:
    def __init__(
        self,
        api: KubeAPI,
        *,
        limiter: AsyncRateLimiter | None = None,
        dry_run: bool = False,
        component: str = "nodesync-controller",
        eviction_backoff_initial: float = 1.0,
        eviction_backoff_max: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self._api = api
        self._limiter = limiter
        self.dry_run = dry_run
        self.component = component
        self._backoff_initial = eviction_backoff_initial
        self._backoff_max = eviction_backoff_max
        self._clock = clock
        self._wall_clock = wall_clock
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._eviction_api_version: str | None = None

    # ------------------------------------------------------------------ plumbing

    async def _write(
        self,
        method: str,
        resource: Resource,
        verb: str,
        path: str,
        *,
        body: Any = None,
        content_type: str | None = None,
    ) -> Any:
        if self._limiter is not None:
            await self._limiter.acquire()
        return await self._api.request(
            method, resource, verb, path, body=body, content_type=content_type
        )

    async def _get(self, resource: Resource, name: str, namespace: str | None = None) -> Any:
        try:
            return await self._api.get(resource, name, namespace)
        except NotFound:
            return None

    def _would(self, detail: str) -> WriteResult:
        return WriteResult(True, f"dry run: would {detail}", dry_run=True)

    # ------------------------------------------------------------------ reads

    async def get_node(self, name: str) -> NodeInfo | None:
        raw = await self._get(NODES, name)
        if raw is None:
            return None
        try:
            return node_info(raw)
        except ConversionError as exc:
            raise InvalidResponse(200, "InvalidResponse", f"node {name}: {exc}") from exc

    async def list_pods_on_node(self, node: str) -> list[PodInfo]:
        """The pods bound to ``node``, read from the API server now (a consistent read, not
        the watch cache). A pod that cannot be read is left out and logged."""
        page = await self._api.list(PODS, field_selector=f"spec.nodeName={node}")
        pods: list[PodInfo] = []
        for item in page.items:
            try:
                pods.append(pod_info(item))
            except ConversionError as exc:
                log.warning("skipping a pod that cannot be read", extra={"error": str(exc)})
        return pods

    # ------------------------------------------------------------------ node spec

    async def cordon(self, node: str) -> WriteResult:
        return await self._set_unschedulable(node, True)

    async def uncordon(self, node: str) -> WriteResult:
        return await self._set_unschedulable(node, False)

    async def _set_unschedulable(self, node: str, value: bool) -> WriteResult:
        verb = "cordon" if value else "uncordon"
        raw = await self._get(NODES, node)
        if raw is None:
            return WriteResult(False, f"node {node} not found")
        if (_dict(raw.get("spec")).get("unschedulable") is True) == value:
            return WriteResult(False, f"node {node} is already {verb}ed")
        if self.dry_run:
            return self._would(f"{verb} node {node}")
        # One field, no list: a patch without resourceVersion cannot lose another change.
        patch = {"spec": {"unschedulable": True if value else None}}
        try:
            await self._write(
                "PATCH",
                NODES,
                "patch",
                NODES.path(None, node),
                body=patch,
                content_type=STRATEGIC_MERGE_PATCH,
            )
        except NotFound:
            return WriteResult(False, f"node {node} not found")
        return WriteResult(True, f"{verb}ed node {node}")

    async def add_taint(self, node: str, taint: Taint) -> WriteResult:
        """Add ``taint``, or set its value when a taint with its key and effect exists; every
        other taint is kept as it is."""

        def change(taints: list[JSONObject]) -> tuple[list[JSONObject] | None, str]:
            wanted = taint_json(taint)
            for i, t in enumerate(taints):
                if t.get("key") == taint.key and t.get("effect") == taint.effect:
                    if (t.get("value") or "") == taint.value:
                        return None, f"node {node} already has taint {taint.key}:{taint.effect}"
                    return [*taints[:i], {**t, **wanted}, *taints[i + 1 :]], "update"
            return [*taints, wanted], "add"

        return await self._update_taints(node, change, f"taint {taint.key}:{taint.effect}")

    async def remove_taint(self, node: str, key: str) -> WriteResult:
        """Remove every taint with ``key`` (any effect)."""

        def change(taints: list[JSONObject]) -> tuple[list[JSONObject] | None, str]:
            kept = [t for t in taints if t.get("key") != key]
            if len(kept) == len(taints):
                return None, f"node {node} has no taint {key}"
            return kept, "remove"

        return await self._update_taints(node, change, f"taint {key}")

    async def _update_taints(
        self,
        node: str,
        change: Callable[[list[JSONObject]], tuple[list[JSONObject] | None, str]],
        what: str,
    ) -> WriteResult:
        """spec.taints is a list the API replaces as a whole: write it back with the
        resourceVersion it was read at, so a concurrent change is never overwritten.

        ``change`` returns the new list and a verb (add, update, remove), or None and why
        nothing needs to change."""
        for _ in range(CONFLICT_ATTEMPTS):
            raw = await self._get(NODES, node)
            if raw is None:
                return WriteResult(False, f"node {node} not found")
            meta = _dict(raw.get("metadata"))
            raw_taints = _dict(raw.get("spec")).get("taints")
            taints = [t for t in raw_taints if isinstance(t, dict)] if raw_taints else []
            new, verb = change(taints)
            if new is None:
                return WriteResult(False, verb)
            if self.dry_run:
                return self._would(f"{verb} {what} on node {node}")
            patch = {
                "metadata": {"resourceVersion": meta.get("resourceVersion", "")},
                "spec": {"taints": new or None},
            }
            try:
                await self._write(
                    "PATCH",
                    NODES,
                    "patch",
                    NODES.path(None, node),
                    body=patch,
                    content_type=MERGE_PATCH,
                )
            except NotFound:
                return WriteResult(False, f"node {node} not found")
            except Conflict:
                log.info(
                    "node changed while writing its taints; reading it again", extra={"node": node}
                )
                continue
            done = "added" if verb == "add" else f"{verb}d"
            return WriteResult(True, f"{done} {what} on node {node}")
        raise Conflict(409, "Conflict", f"node {node} kept changing: gave up writing {what}")

    async def annotate_node(self, node: str, annotations: Mapping[str, str | None]) -> WriteResult:
        """Set annotations (None removes one); the others are kept."""
        raw = await self._get(NODES, node)
        if raw is None:
            return WriteResult(False, f"node {node} not found")
        current = _dict(_dict(raw.get("metadata")).get("annotations"))
        patch = {
            k: v
            for k, v in annotations.items()
            if (k in current if v is None else current.get(k) != v)
        }
        keys = ", ".join(sorted(patch))
        if not patch:
            return WriteResult(False, f"node {node} already has these annotations")
        if self.dry_run:
            return self._would(f"annotate node {node}: {keys}")
        try:
            await self._write(
                "PATCH",
                NODES,
                "patch",
                NODES.path(None, node),
                body={"metadata": {"annotations": patch}},
                content_type=MERGE_PATCH,
            )
        except NotFound:
            return WriteResult(False, f"node {node} not found")
        return WriteResult(True, f"annotated node {node}: {keys}")

    # ------------------------------------------------------------------ deletion

    async def delete_node(self, name: str, uid: str = "") -> WriteResult:
        """Delete the Node; with ``uid``, only if it is still that object (a node that joined
        again under the same name is another object). The delete carries the uid it checked."""
        raw = await self._get(NODES, name)
        if raw is None:
            return WriteResult(False, f"node {name} not found")
        meta = _dict(raw.get("metadata"))
        live_uid = str(meta.get("uid") or "")
        if uid and live_uid != uid:
            return WriteResult(False, f"node {name} is another object now (uid {live_uid})")
        if meta.get("deletionTimestamp"):
            return WriteResult(False, f"node {name} is already being deleted")
        if self.dry_run:
            return self._would(f"delete node {name}")
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": live_uid}}
        try:
            await self._write("DELETE", NODES, "delete", NODES.path(None, name), body=options)
        except NotFound:
            return WriteResult(False, f"node {name} not found")
        except Conflict as exc:
            return WriteResult(False, f"node {name} was replaced, not deleted: {exc.message}")
        return WriteResult(True, f"deleted node {name}")

    # ------------------------------------------------------------------ eviction

    async def evict(
        self,
        namespace: str,
        name: str,
        uid: str = "",
        *,
        timeout: float = 120.0,  # noqa: ASYNC109 - how long refusals are retried, not a deadline
    ) -> EvictionResult:
        """Evict through the Eviction API, so PodDisruptionBudgets are respected; its version is
        the one the server serves (:meth:`eviction_api_version`).

        A refusal (429) is retried with exponential backoff and jitter until ``timeout``, then
        reported ``blocked``: never forced, never a plain delete. The eviction carries the pod's
        uid as a precondition, so a pod that replaced it under the same name is never evicted.
        """
        raw = await self._get(PODS, name, namespace)
        if raw is None:
            return EvictionResult("gone", f"pod {namespace}/{name} not found", 0)
        try:
            pod = pod_info(raw)
        except ConversionError as exc:
            raise InvalidResponse(200, "InvalidResponse", f"pod {namespace}/{name}: {exc}") from exc
        ref = f"pod {namespace}/{name}"
        if uid and pod.uid != uid:
            return EvictionResult("gone", f"{ref} is another pod now (uid {pod.uid})", 0)
        if pod.owner_kind == "DaemonSet":
            return EvictionResult("skipped", f"{ref} belongs to a DaemonSet", 0)
        if pod.mirror:
            return EvictionResult("skipped", f"{ref} is a static pod's mirror", 0)
        if pod.deletion_timestamp is not None:
            return EvictionResult("evicted", f"{ref} is already terminating", 0)
        if self.dry_run:
            return EvictionResult(
                "evicted", f"dry run: would evict {ref} (budgets not checked)", 0, dry_run=True
            )
        return await self._evict(pod, timeout)

    async def eviction_api_version(self) -> str:
        """The Eviction API's group/version, as kubectl drain finds it: what the core group's
        discovery names for ``pods/eviction`` (``policy/v1`` since Kubernetes 1.22,
        ``policy/v1beta1`` before). Read once; a server without the subresource is an error."""
        if self._eviction_api_version is None:
            body = await self._api.request("GET", CORE_DISCOVERY, "get", "/api/v1")
            entries = body.get("resources") if isinstance(body, dict) else None
            entry = next(
                (
                    r
                    for r in entries or ()
                    if isinstance(r, dict) and r.get("name") == "pods/eviction"
                ),
                None,
            )
            if entry is None:
                raise NotFound(404, "NotFound", "the API server serves no pods/eviction")
            group, version = entry.get("group"), entry.get("version")
            self._eviction_api_version = f"{group}/{version}" if group and version else "policy/v1"
        return self._eviction_api_version

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
                await self._write("POST", EVICTIONS, "create", path, body=body)
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

    # ------------------------------------------------------------------ audit

    async def record_event(
        self,
        *,
        kind: str,
        namespace: str,
        name: str,
        uid: str,
        reason: str,
        message: str,
        type: str = "Normal",
        key: str,
    ) -> WriteResult:
        """Record a core/v1 Event on an object, exactly once per ``key``.

        The Event's name is derived from ``key``: a retried or repeated record (a controller
        restarted mid-step) is refused as AlreadyExists and reported unchanged. Events of
        cluster-scoped objects (Nodes) go to the ``default`` namespace, as kubelet's do.
        """
        if type not in EVENT_TYPES:
            raise ValueError(f"event type must be Normal or Warning, not {type!r}")
        event_namespace = namespace or "default"
        now = format_time(self._wall_clock())
        involved: JSONObject = {"apiVersion": "v1", "kind": kind, "name": name, "uid": uid}
        if namespace:
            involved["namespace"] = namespace
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": event_name(name, key), "namespace": event_namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message[:MAX_EVENT_MESSAGE],
            "type": type,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        what = f"{type} event {reason} on {kind} {name}"
        if self.dry_run:
            return self._would(f"record {what}")
        try:
            await self._write("POST", EVENTS, "create", EVENTS.path(event_namespace), body=body)
        except AlreadyExists:
            return WriteResult(False, f"{what} already recorded")
        return WriteResult(True, f"recorded {what}")
