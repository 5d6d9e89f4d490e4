"""The agent's side of the cleanup handshake: remove exactly what drift reported, once per request.

Every ``period`` (and at most one cleanup at a time) the agent looks at its own Node, as its
watch sees it. A request id in ``nodesync.io/cleanup-request`` that the id in its
``nodesync.io/cleanup-status`` has not answered starts ONE cleanup (the id is the controller's
NodeRollback uid: an answer an earlier rollback left on the node never answers a new one):

1. Take the latest drift from the sync loop. No drift yet: acknowledge the request (status
   ``running``, so the controller knows the agent is there) and look again next period. The
   runtime cannot be read, at this look and the one before: answer ``unavailable`` (nothing can
   be cleaned; a node rollback goes on without the cleanup).
2. Read the runtime (ListPodSandbox, ListContainers) and the node's pods from the API server
   again, compute drift from those, and keep only the orphan_container, orphan_sandbox and
   stale_sandbox items both agree on (:func:`exporter.model.cleanup.select`). A failed read:
   as in 1. When the runtime holds a pod being deleted and the Node's Ready is Unknown, kubelet's
   healthz is probed right then: with the kubelet gone (both), such a pod is not desired past its
   deletion timestamp, and while one is not due yet (or the sync loop's drift does not show it
   yet) the request waits, acknowledged, till the next period. The agent's own pod is spared.
3. For each item, right before acting, ask the runtime for that object once more (it must still
   exist with the same pod uid; a stale sandbox must still be not ready), then stop and remove
   it: containers first, then sandboxes. NOT_FOUND counts as done.
4. List the runtime once more and report what it still holds that nobody wants (``remaining``).
5. Write the status (the agent's only write to the API server). A failed write is retried every
   period without cleaning again; a failed CRI call ends the cleanup as ``failed`` with the
   error, and a NEW request id is needed to try again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from exporter.cri.errors import CRIError, NotFound
from exporter.kube.errors import KubeError
from exporter.kube.reads import ObjectReads
from exporter.metrics.cleanup import CleanupTotals
from exporter.model.cleanup import (
    CleanupState,
    CleanupStatus,
    Remaining,
    Selection,
    held_pods,
    pending_request,
    remaining_after,
    select,
)
from exporter.model.drift import Drift, DriftItem, DriftKind, compute_drift, kubelet_gone
from exporter.model.kube import NodeInfo, PodInfo
from exporter.model.rollback import CLEANUP_STATUS_ANNOTATION
from exporter.model.runtime import Container, PodSandbox, RuntimeSnapshot, SandboxState

log = logging.getLogger(__name__)


class CleanupRuntime(Protocol):
    """The CRI calls a cleanup makes (exporter.cri.client.CRIClient)."""

    async def list_pod_sandboxes(self) -> tuple[PodSandbox, ...]: ...

    async def list_containers(self) -> tuple[Container, ...]: ...

    async def pod_sandbox_status(self, pod_sandbox_id: str) -> PodSandbox: ...

    async def container_status(self, container_id: str, pod_sandbox_id: str = "") -> Container: ...

    async def stop_pod_sandbox(
        self, pod_sandbox_id: str, call_timeout: float | None = None
    ) -> None: ...

    async def remove_pod_sandbox(
        self, pod_sandbox_id: str, call_timeout: float | None = None
    ) -> None: ...

    async def stop_container(self, container_id: str, timeout_seconds: int = 0) -> None: ...

    async def remove_container(
        self, container_id: str, call_timeout: float | None = None
    ) -> None: ...


class CleanupAPI(Protocol):
    """The API calls a cleanup makes (exporter.kube.writer.KubeWriter): the read of its
    node's pods (``reads``) and the write of its answer."""

    @property
    def reads(self) -> ObjectReads: ...

    async def annotate_node(self, node: str, annotations: Mapping[str, str | None]) -> object: ...


class NodeCleanup:
    def __init__(
        self,
        node_name: str,
        *,
        node: Callable[[], NodeInfo | None],
        drift: Callable[[], Drift | None],
        runtime: CleanupRuntime,
        runtime_error: Callable[[], str] = lambda: "",
        api: CleanupAPI,
        kubelet_healthy: Callable[[], Awaitable[bool]] | None = None,
        call_timeout: float = 30.0,
        clock: Callable[[], float] = time.time,
        own_pod_uid: str = "",
    ) -> None:
        """``kubelet_healthy`` probes kubelet's healthz now; without it the kubelet is never
        taken for gone (pods being deleted are left to it). ``own_pod_uid``: the pod spared."""
        self.node_name = node_name
        self.own_pod_uid = own_pod_uid
        self._kubelet_healthy = kubelet_healthy
        self._node = node
        self._drift = drift
        self._runtime = runtime
        self._runtime_error = runtime_error
        self._acked = ""  # the request id last acknowledged
        self._unreadable: dict[str, int] = {}  # request id -> looks that found the runtime down
        self._api = api
        self._call_timeout = call_timeout
        self._clock = clock
        self._answered: CleanupStatus | None = None  # the last cleanup this process ran
        self._published = True  # whether _answered is written to the Node
        self._waiting_for = ""  # request id a "waiting" message was logged for
        self._totals = CleanupTotals()
        self.checks = 0  # how many times the Node was looked at (for tests and debugging)
        self.last_seen: NodeInfo | None = None  # the Node as the last look saw it

    def totals(self) -> CleanupTotals:
        return self._totals

    async def run(self, period: float) -> None:
        """Look every ``period`` seconds until cancelled."""
        while True:
            try:
                await self.check_once()
            except Exception:  # a bug must not end the handshake for good
                log.exception("cleanup check failed")
            await asyncio.sleep(period)

    async def check_once(self) -> CleanupStatus | None:
        """Answer a pending request if there is one and drift allows; the status written, or
        None when nothing was cleaned this time."""
        try:
            return await self._check()
        finally:
            self.checks += 1

    async def _check(self) -> CleanupStatus | None:
        node = self.last_seen = self._node()
        if node is None:
            return None
        request = pending_request(node.annotations)
        answered = self._answered
        if request is None:
            return None
        if answered is not None and answered.id == request:
            # Cleaned already; the status is not written yet, or our watch has not seen it.
            if not self._published:
                await self._publish(answered)
            return None
        drift = self._drift()
        if drift is None:
            error = self._runtime_error()
            if error:
                return await self._unavailable(request, error)
            self._wait(request, "drift is not known yet (the API server's view is not synced)")
            await self._acknowledge(request)
            return None
        try:
            sandboxes, containers, pods = await asyncio.gather(
                self._runtime.list_pod_sandboxes(),
                self._runtime.list_containers(),
                self._api.reads.list_pods_on_node(self.node_name),
            )
        except CRIError as exc:
            return await self._unavailable(request, str(exc))
        except KubeError as exc:
            self._wait(request, f"cannot read the API server again: {exc}")
            await self._acknowledge(request)
            return None
        now = self._clock()
        snapshot = RuntimeSnapshot(now, None, (), sandboxes, containers)
        gone = await self._kubelet_gone(node, pods, snapshot)
        fresh = compute_drift(
            pods, snapshot, (), now, grace_seconds=drift.grace_seconds, kubelet_gone=gone
        )
        own = self.own_pod_uid
        chosen = select(
            drift, fresh, pods, now, kubelet_gone=gone, held=held_pods(snapshot), own_pod_uid=own
        )
        if chosen.waiting:
            pod, why = chosen.waiting[0]
            self._wait(
                request,
                f"the kubelet is gone and {len(chosen.waiting)} pods being deleted still run "
                f"(first {pod.namespace}/{pod.name}, uid {pod.uid}: {why})",
            )
            await self._acknowledge(request)
            return None
        status = await self._clean(request, chosen, drift, pods, gone)
        self._record(status)
        await self._publish(status)
        return status

    async def _kubelet_gone(
        self, node: NodeInfo, pods: list[PodInfo], snapshot: RuntimeSnapshot
    ) -> bool:
        """Whether the kubelet is gone (exporter.model.drift.kubelet_gone), asked only when it
        matters: the runtime holds a pod being deleted and the Node says Ready Unknown. Then
        kubelet's healthz is probed now, right before acting on what follows from it."""
        if self._kubelet_healthy is None:
            return False
        held = held_pods(snapshot)
        if not any(p.deletion_timestamp is not None and p.uid in held for p in pods):
            return False
        if not kubelet_gone(False, node):  # Ready is not Unknown: no need to probe
            return False
        return kubelet_gone(await self._kubelet_healthy(), node)

    async def _acknowledge(self, request: str) -> None:
        """Tell the controller the request was seen (status ``running``), once per request."""
        if self._acked == request:
            return
        ack = CleanupStatus(request, CleanupState.RUNNING, 0, 0, self._clock())
        if await self._write(ack):
            self._acked = request

    async def _unavailable(self, request: str, error: str) -> CleanupStatus | None:
        """The runtime cannot be read: the first time, acknowledge and look again; the second
        time in a row, answer ``unavailable``."""
        looks = self._unreadable.get(request, 0) + 1
        self._unreadable[request] = looks
        if looks < 2:
            self._wait(request, f"the runtime cannot be read: {error}")
            await self._acknowledge(request)
            return None
        status = CleanupStatus(
            request, CleanupState.UNAVAILABLE, 0, 0, self._clock(), error=error[:500]
        )
        log.warning("cleanup not possible: the runtime cannot be read", extra={"request": request})
        self._record(status)
        await self._publish(status)
        return status

    def _wait(self, request: str, why: str) -> None:
        if self._waiting_for != request:
            log.warning("cleanup request waits", extra={"request": request, "reason": why})
            self._waiting_for = request

    async def _clean(
        self,
        request: str,
        chosen: Selection,
        requested: Drift,
        pods: list[PodInfo],
        gone: bool,
    ) -> CleanupStatus:
        for item, why in chosen.skipped:
            log.info("cleanup skips an item", extra=_fields(item, request, reason=why))
        removed = {"sandbox": 0, "container": 0}
        skipped = len(chosen.skipped)
        error = ""
        try:
            for item in chosen.act:
                if item.kind is DriftKind.ORPHAN_CONTAINER:
                    done = await self._remove_container(item)
                    kind = "container"
                else:
                    done = await self._remove_sandbox(item)
                    kind = "sandbox"
                if done:
                    removed[kind] += 1
                    log.info("cleanup removed", extra=_fields(item, request))
                else:
                    skipped += 1
                    log.info("cleanup skips an item", extra=_fields(item, request, reason="gone"))
        except CRIError as exc:
            error = str(exc)
            log.warning("cleanup failed", extra={"request": request, "error": error})
        remaining = None
        if not error:
            try:
                remaining = await self._remaining(requested, pods, gone)
            except CRIError as exc:
                error = f"cannot list the runtime after the cleanup: {exc}"
                log.warning("cleanup failed", extra={"request": request, "error": error})
        if remaining is not None and not remaining.empty:
            log.warning(
                "the runtime still holds what nobody wants after the cleanup",
                extra={
                    "request": request,
                    "sandboxes": remaining.sandboxes,
                    "containers": remaining.containers,
                    "pods": ", ".join(remaining.pods),
                },
            )
        return CleanupStatus(
            id=request,
            state=CleanupState.FAILED if error else CleanupState.DONE,
            removed_sandboxes=removed["sandbox"],
            removed_containers=removed["container"],
            finished_at=self._clock(),
            error=error,
            skipped=skipped,
            remaining=remaining,
        )

    async def _remaining(self, requested: Drift, pods: list[PodInfo], gone: bool) -> Remaining:
        """What the runtime, listed again, still holds that nobody wants (by the rule of
        exporter.model.cleanup.remaining_after, with the kubelet gone or not)."""
        sandboxes, containers = await asyncio.gather(
            self._runtime.list_pod_sandboxes(), self._runtime.list_containers()
        )
        now = self._clock()
        snapshot = RuntimeSnapshot(now, None, (), sandboxes, containers)
        after = compute_drift(
            pods, snapshot, (), now, grace_seconds=requested.grace_seconds, kubelet_gone=gone
        )
        own = self.own_pod_uid
        return remaining_after(requested, after, pods, now, kubelet_gone=gone, own_pod_uid=own)

    async def _remove_sandbox(self, item: DriftItem) -> bool:
        try:
            live = await self._runtime.pod_sandbox_status(item.sandbox_id)
        except NotFound:
            return False
        if live.uid != item.pod_uid:
            return False
        if item.kind is DriftKind.STALE_SANDBOX and live.state is not SandboxState.NOTREADY:
            return False
        await self._runtime.stop_pod_sandbox(item.sandbox_id, self._call_timeout)
        await self._runtime.remove_pod_sandbox(item.sandbox_id, self._call_timeout)
        return True

    async def _remove_container(self, item: DriftItem) -> bool:
        try:
            live = await self._runtime.container_status(item.container_id, item.sandbox_id)
        except NotFound:
            return False
        if live.pod_uid != item.pod_uid:
            return False
        await self._runtime.stop_container(item.container_id, 0)
        await self._runtime.remove_container(item.container_id, self._call_timeout)
        return True

    def _record(self, status: CleanupStatus) -> None:
        t = self._totals
        self._totals = CleanupTotals(
            done=t.done + (status.state is CleanupState.DONE),
            failed=t.failed + (status.state is CleanupState.FAILED),
            unavailable=t.unavailable + (status.state is CleanupState.UNAVAILABLE),
            removed_sandboxes=t.removed_sandboxes + status.removed_sandboxes,
            removed_containers=t.removed_containers + status.removed_containers,
            last_finished_at=status.finished_at,
        )
        self._answered = status
        self._published = False

    async def _write(self, status: CleanupStatus) -> bool:
        try:
            await self._api.annotate_node(
                self.node_name, {CLEANUP_STATUS_ANNOTATION: status.to_json()}
            )
        except KubeError as exc:
            log.warning(
                "cannot write the cleanup status; retrying",
                extra={"request": status.id, "error": str(exc)},
            )
            return False
        return True

    async def _publish(self, status: CleanupStatus) -> None:
        if not await self._write(status):
            return
        self._published = True
        log.info(
            "cleanup answered",
            extra={
                "request": status.id,
                "state": status.state.value,
                "removed_sandboxes": status.removed_sandboxes,
                "removed_containers": status.removed_containers,
                "skipped": status.skipped,
            },
        )


def _fields(item: DriftItem, request: str, **extra: str) -> dict[str, str]:
    return {
        "request": request,
        "kind": item.kind.value,
        "pod_uid": item.pod_uid,
        "namespace": item.namespace,
        "pod": item.name,
        "sandbox_id": item.sandbox_id,
        "container_id": item.container_id,
        **extra,
    }
