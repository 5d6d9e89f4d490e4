"""The storm's kubelets and node agents, played by the benchmark against the test API server.

- :class:`LeaseRenewer`: every healthy node's kubelet renews its Lease every 10 s, on a
  monotonic schedule; a failing node's renewals stop.
- :class:`NodeWatch`: the node agents' part of the cleanup handshake. A watch on Nodes answers
  every ``nodesync.io/cleanup-request`` with a ``nodesync.io/cleanup-status`` "done" (in
  exporter.model's own format) a second later. It writes with PUT (verb ``update``), which the
  controller never uses, so the server's counters tell its writes from the controller's. The
  same watch records every change of every Node: cordons, taints, cleanup requests.
- whose writes are whose: the API server counts every request it answers; the verbs and
  resources in :data:`OWN_WRITES` are the benchmark's own (its kubelets, scheduler and
  agents), every other write is the controller's.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import time
from collections import defaultdict
from dataclasses import dataclass, field

import aiohttp

from bench.harness.apiserver import APIError, Counts, JSONObject, SimAPIServer
from bench.harness.objects import lease_path
from exporter.model.cleanup import CleanupState, CleanupStatus
from exporter.model.kube import TAINT_NODESYNC
from exporter.model.rfc3339 import format_micro_time
from exporter.model.rollback import CLEANUP_REQUEST_ANNOTATION, CLEANUP_STATUS_ANNOTATION
from exporter.tasks import wait_set

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
#: The writes the benchmark makes itself (nodes, leases, pods, kubelet's status, the agents'
#: answers); every other write the API server counts is the controller's.
OWN_WRITES = frozenset(
    {
        ("create", "nodes"),
        ("create", "leases"),
        ("create", "pods"),
        ("patch", "leases"),
        ("patch", "nodes/status"),
        ("update", "nodes"),
    }
)


def is_controller_write(verb: str, resource: str) -> bool:
    return verb in WRITE_VERBS and (verb, resource) not in OWN_WRITES


def controller_writes(counts: Counts) -> int:
    """The controller's writes in a snapshot of the server's counters."""
    return sum(
        n for (verb, resource, _), n in counts.items() if is_controller_write(verb, resource)
    )


@dataclass
class LeaseRenewer:
    """Renews every registered Lease every ``period`` seconds, as kubelet does, on a
    monotonic schedule, until stopped; ``halt(name)`` stops one node's renewals."""

    api: SimAPIServer
    period: float
    issued: int = 0
    ok: int = 0
    failed: int = 0
    max_lateness: float = 0.0
    last_ok: dict[str, float] = field(default_factory=dict)  # wall time of the last renewal
    max_gap: float = 0.0  # longest time between two renewals of a healthy lease
    _heap: list[tuple[float, str]] = field(default_factory=list)
    _halted: set[str] = field(default_factory=set)

    def add(self, name: str, renewed_at: float) -> None:
        self.last_ok[name] = renewed_at
        heapq.heappush(self._heap, (time.monotonic() + self.period, name))

    def halt(self, name: str) -> None:
        self._halted.add(name)

    async def _renew(self, name: str, gate: asyncio.Semaphore) -> None:
        async with gate:
            if name in self._halted:
                return
            now = time.time()
            try:
                await self.api.merge_patch(
                    lease_path(name), {"spec": {"renewTime": format_micro_time(now)}}
                )
            except (aiohttp.ClientError, APIError, TimeoutError):
                self.failed += 1
                return
            self.ok += 1
            if name not in self._halted:
                self.max_gap = max(self.max_gap, now - self.last_ok.get(name, now))
            self.last_ok[name] = now

    async def run(self, stop: asyncio.Event) -> None:
        gate = asyncio.Semaphore(32)
        tasks: set[asyncio.Task[None]] = set()
        while not stop.is_set():
            now = time.monotonic()
            while self._heap and self._heap[0][0] <= now:
                due, name = heapq.heappop(self._heap)
                if name in self._halted:
                    continue
                self.max_lateness = max(self.max_lateness, now - due)
                self.issued += 1
                task = asyncio.create_task(self._renew(name, gate))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                heapq.heappush(self._heap, (due + self.period, name))
            wait = (self._heap[0][0] - time.monotonic()) if self._heap else 0.1
            await wait_set(stop, max(0.005, min(wait, 0.1)))
        await asyncio.gather(*tasks, return_exceptions=True)


@dataclass
class NodeRecord:
    """What the watch saw happen to one Node."""

    modifications: int = 0
    cordons: int = 0
    uncordons: int = 0
    taints_added: int = 0
    taints_removed: int = 0
    requests: list[str] = field(default_factory=list)  # cleanup request ids, as they changed
    answered: list[str] = field(default_factory=list)
    deleted: bool = False
    first_write_at: float | None = None  # wall time the controller's first change was seen
    answered_at: float | None = None


@dataclass
class NodeWatch:
    """Lists and watches Nodes: records every change of each, and answers cleanup requests as
    the node's agent would (``agent_delay`` later, with the status in the agent's format)."""

    api: SimAPIServer
    agent_delay: float
    records: dict[str, NodeRecord] = field(default_factory=lambda: defaultdict(NodeRecord))
    state: dict[str, tuple[bool, bool, str, str]] = field(default_factory=dict)
    relists: int = 0
    answers_written: int = 0
    answer_conflicts: int = 0
    answer_failures: int = 0
    _answering: set[tuple[str, str]] = field(default_factory=set)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @staticmethod
    def _view(obj: JSONObject) -> tuple[bool, bool, str, str]:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        annotations = meta.get("annotations") or {}
        taints = spec.get("taints") or []
        status = CleanupStatus.from_json(annotations.get(CLEANUP_STATUS_ANNOTATION, ""))
        return (
            spec.get("unschedulable") is True,
            any(t.get("key") == TAINT_NODESYNC for t in taints),
            annotations.get(CLEANUP_REQUEST_ANNOTATION, ""),
            status.id if status is not None else "",
        )

    def _seen(self, kind: str, obj: JSONObject) -> None:
        name = obj["metadata"]["name"]
        record = self.records[name]
        if kind == "DELETED":
            record.deleted = True
            self.state.pop(name, None)
            return
        new = self._view(obj)
        old = self.state.get(name)
        self.state[name] = new
        if old is not None and kind == "MODIFIED":
            record.modifications += 1
            cordoned, tainted, request, answered = new
            if cordoned and not old[0]:
                record.cordons += 1
            if old[0] and not cordoned:
                record.uncordons += 1
            if tainted and not old[1]:
                record.taints_added += 1
            if old[1] and not tainted:
                record.taints_removed += 1
            if request != old[2] and request:
                record.requests.append(request)
            if answered != old[3] and answered:
                record.answered.append(answered)
            if (cordoned, tainted, request) != old[:3] and record.first_write_at is None:
                record.first_write_at = time.time()
        _, _, request, answered = new
        if request and request != answered and (name, request) not in self._answering:
            self._answering.add((name, request))
            task = asyncio.create_task(self._answer(name, request))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _answer(self, name: str, request: str) -> None:
        await asyncio.sleep(self.agent_delay)
        status = CleanupStatus(request, CleanupState.DONE, 0, 0, time.time()).to_json()
        for _ in range(5):
            try:
                node = await self.api.call("GET", f"/api/v1/nodes/{name}")
                annotations = node["metadata"].setdefault("annotations", {})
                if annotations.get(CLEANUP_REQUEST_ANNOTATION) != request:
                    return
                annotations[CLEANUP_STATUS_ANNOTATION] = status
                await self.api.call("PUT", f"/api/v1/nodes/{name}", node)
            except APIError as exc:
                if exc.status == 409:
                    self.answer_conflicts += 1
                    continue
                self.answer_failures += 1
                return
            except (aiohttp.ClientError, TimeoutError):
                self.answer_failures += 1
                return
            self.answers_written += 1
            self.records[name].answered_at = time.time()
            return
        self.answer_failures += 1

    async def _list(self) -> str:
        listed = await self.api.call("GET", "/api/v1/nodes")
        for obj in listed["items"]:
            self._seen("ADDED" if obj["metadata"]["name"] not in self.state else "MODIFIED", obj)
        return str(listed["metadata"]["resourceVersion"])

    async def run(self) -> None:
        """List, then watch from the list's resourceVersion; relist when the watch says its
        history is gone, rewatch when the server ends it. Until cancelled."""
        rv = await self._list()
        while True:
            try:
                async with contextlib.aclosing(self.api.watch("/api/v1/nodes", rv)) as events:
                    async for event in events:
                        obj = event["object"]
                        if event["type"] == "ERROR":
                            self.relists += 1
                            rv = await self._list()
                            break
                        rv = str(obj["metadata"]["resourceVersion"])
                        if event["type"] != "BOOKMARK":
                            self._seen(event["type"], obj)
            except (aiohttp.ClientError, TimeoutError):
                await asyncio.sleep(0.2)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
