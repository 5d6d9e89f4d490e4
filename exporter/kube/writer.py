"""The writes nodesync makes to Nodes (cordon, taints, annotations, deletion), each idempotent
and safe to repeat, and :class:`KubeWriter`, which gathers every kind of write (and the reads
they make) behind one object for the roles.

Each write reads the live object first and does nothing when it is already so ("changed" is
False), or when the object is gone: "not found" is success, as for the CRI cleanup calls. Each
write request takes a token of the shared write budget first (exporter.kube.writing); with
``dry_run`` nothing is written and the result says what would have happened.

Where a race matters the write carries what was read: taints are rewritten with the Node's
resourceVersion (409 Conflict: read again and retry, a few times), a Node is deleted with a
precondition on its uid, a pod is evicted with a precondition on its uid
(exporter.kube.eviction). Cordon, uncordon and annotations are per-field patches that cannot
lose a concurrent change. Events: exporter.kube.events; the reads: exporter.kube.reads.

Failures other than those handled here are raised as :mod:`exporter.kube.errors`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping

from exporter.kube.api import JSONObject, KubeAPI
from exporter.kube.errors import Conflict, NotFound
from exporter.kube.events import EventRecorder, event_name
from exporter.kube.eviction import EvictionResult, Evictions
from exporter.kube.ratelimit import AsyncRateLimiter
from exporter.kube.reads import ObjectReads
from exporter.kube.resources import NODES
from exporter.kube.writing import MERGE_PATCH, STRATEGIC_MERGE_PATCH, Channel, WriteResult
from exporter.model.kube import Taint
from exporter.model.rfc3339 import format_time

__all__ = [
    "MERGE_PATCH",
    "AsyncRateLimiter",
    "EvictionResult",
    "KubeWriter",
    "WriteResult",
    "event_name",
]

log = logging.getLogger(__name__)

#: How often a write that lost a race (409) reads again and retries before giving up.
CONFLICT_ATTEMPTS = 5


def taint_json(taint: Taint) -> JSONObject:
    out: JSONObject = {"key": taint.key, "effect": taint.effect}
    if taint.value:
        out["value"] = taint.value
    if taint.time_added is not None:
        out["timeAdded"] = format_time(taint.time_added)
    return out


class KubeWriter:
    """Every write of nodesync: the Node's here, evictions (``evictions``) and Events
    (``events``) in their own modules, over one budget and one dry-run switch; and the live
    reads the steps make before they act (``reads``)."""

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
        self._channel = Channel(api, limiter=limiter, dry_run=dry_run)
        self.reads = ObjectReads(api)
        self.events = EventRecorder(self._channel, component=component, wall_clock=wall_clock)
        self.evictions = Evictions(
            self._channel,
            self.reads,
            backoff_initial=eviction_backoff_initial,
            backoff_max=eviction_backoff_max,
            clock=clock,
            sleep=sleep,
            rng=rng,
        )

    @property
    def dry_run(self) -> bool:
        return self._channel.dry_run

    @property
    def component(self) -> str:
        return self.events.component

    # ------------------------------------------------------------------ the Node

    async def cordon(self, node: str) -> WriteResult:
        return await self._set_unschedulable(node, True)

    async def uncordon(self, node: str) -> WriteResult:
        return await self._set_unschedulable(node, False)

    async def _set_unschedulable(self, node: str, value: bool) -> WriteResult:
        verb = "cordon" if value else "uncordon"
        live = await self.reads.writable_node(node)
        if live is None:
            return WriteResult(False, f"node {node} not found")
        if (live.spec.unschedulable is True) == value:
            return WriteResult(False, f"node {node} is already {verb}ed")
        if self._channel.dry_run:
            return self._channel.would(f"{verb} node {node}")
        # One field, no list: a patch without resourceVersion cannot lose another change.
        patch = {"spec": {"unschedulable": True if value else None}}
        try:
            await self._channel.write(
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
            live = await self.reads.writable_node(node)
            if live is None:
                return WriteResult(False, f"node {node} not found")
            new, verb = change(live.spec.taints or [])
            if new is None:
                return WriteResult(False, verb)
            if self._channel.dry_run:
                return self._channel.would(f"{verb} {what} on node {node}")
            patch = {
                "metadata": {"resourceVersion": live.metadata.resource_version},
                "spec": {"taints": new or None},
            }
            try:
                await self._channel.write(
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
        live = await self.reads.writable_node(node)
        if live is None:
            return WriteResult(False, f"node {node} not found")
        current = live.metadata.annotations or {}
        patch = {
            k: v
            for k, v in annotations.items()
            if (k in current if v is None else current.get(k) != v)
        }
        keys = ", ".join(sorted(patch))
        if not patch:
            return WriteResult(False, f"node {node} already has these annotations")
        if self._channel.dry_run:
            return self._channel.would(f"annotate node {node}: {keys}")
        try:
            await self._channel.write(
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
        live = await self.reads.writable_node(name)
        if live is None:
            return WriteResult(False, f"node {name} not found")
        live_uid = live.metadata.uid
        if uid and live_uid != uid:
            return WriteResult(False, f"node {name} is another object now (uid {live_uid})")
        if live.metadata.deletion_timestamp:
            return WriteResult(False, f"node {name} is already being deleted")
        if self._channel.dry_run:
            return self._channel.would(f"delete node {name}")
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": live_uid}}
        try:
            await self._channel.write(
                "DELETE", NODES, "delete", NODES.path(None, name), body=options
            )
        except NotFound:
            return WriteResult(False, f"node {name} not found")
        except Conflict as exc:
            return WriteResult(False, f"node {name} was replaced, not deleted: {exc.message}")
        return WriteResult(True, f"deleted node {name}")
