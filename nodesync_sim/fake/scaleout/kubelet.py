"""One simulated kubelet: what a node's kubelet does, as the API server sees it.

- **Registers** its Node (labels, conditions, addresses, capacity) and creates its Lease in
  kube-node-lease (owned by the Node).
- **Renews** the Lease every ``lease_renew_seconds``.
- **Posts node status** (Ready, MemoryPressure, DiskPressure, PIDPressure, each with its
  heartbeat): when a condition changes, and at least every ``status_update_seconds``. Ready is
  False (``KubeletNotReady``) for ``ready_after_seconds`` after registration, then True, unless a
  fault says otherwise.
- **Runs the pods bound to it** (one watch of all pods, shared): ``pod_start_seconds`` after it
  saw a pod it starts it in its runtime and reports it Running with every container running and
  ready; crash and OOM loops make a container fail again after kubelet's back-off (base
  ``crash_backoff_seconds``, doubling, capped at ``crash_backoff_max_seconds``), reported as
  CrashLoopBackOff with the last termination and a growing restart count.
- **Confirms deletions**: a pod deleted gracefully (an eviction, a delete) is stopped in the
  runtime within ``pod_stop_seconds`` (never later than its grace period) and then deleted
  with grace 0 and its uid as precondition, as kubelet does; the API server keeps the pod
  Terminating until then, so a silent kubelet's pods stay Terminating. A cordoned or tainted
  node keeps running its pods.
- **Stops pods it does not want**: a running sandbox of a simulated node's runtime that is no pod
  bound to the node (an orphan a ``marks`` entry left there) is stopped at the next pod sync, as
  kubelet 1.20's housekeeping stops whatever runs that it does not want; like kubelet's garbage
  collection on the real cluster of the tests, it does not remove it.

The scheduler's and the workload controllers' share is played here too: DaemonSet pods are
bound to the node when it registers, ReplicaSet pods once it first reports Ready.

Faults (docs/simulator.md): ``never_ready`` (Ready False, CNI not ready), ``readiness_taint``
(the same, the node tainted until the fault ends: then the taint is removed, as a CNI agent
removes its startup taint, and the node turns Ready), ``cri_timeouts`` (Ready False,
``KubeletNotReady``, "container runtime is down"), ``lease_stops`` (the kubelet stops talking to
the API server: no Lease, no status, no pod updates, no deletion confirmed), ``pods_pending`` (pods
started during the fault stay Pending, ContainerCreating, without a sandbox), ``crash_loop``
and ``oom_loop``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from exporter.kube.convert import node_info
from exporter.kube.errors import KubeError, NotFound
from exporter.kube.resources import NODES
from exporter.kube.writer import KubeWriter
from exporter.model.kube import LEASE_NAMESPACE, Taint
from nodesync_sim.fake.scaleout import objects, timeline
from nodesync_sim.fake.scaleout.client import KubeletClient
from nodesync_sim.fake.scaleout.layout import OWNER_DAEMONSET, NodePlan
from nodesync_sim.fake.scaleout.pods import BoundPod, PodIndex
from nodesync_sim.fake.scaleout.runtime import SimRuntime, Termination
from nodesync_sim.fake.scaleout.scenario import (
    CRI_TIMEOUTS,
    FAULT_KINDS,
    LEASE_STOPS,
    MEMORY_PRESSURE,
    NEVER_READY,
    OOM_LOOP,
    PODS_PENDING,
    Timing,
)
from nodesync_sim.fake.scaleout.timeline import ScenarioClock, Timeline

log = logging.getLogger(__name__)

#: How often faults are checked for a start or an end (the timeline's resolution), at least:
#: slower kubelets check a quarter of their pod sync period (a 2 s pod sync: every 0.5 s), so
#: that hundreds of them do not wake up thousands of times a second.
FAULT_TICK = 0.05
#: How long the lease's stop waits for a renewal sent before it to land.
RENEWAL_LANDS_SECONDS = 1.0


def fault_tick(timing: Timing) -> float:
    return max(FAULT_TICK, min(timing.pod_sync_seconds, timing.lease_renew_seconds) / 4)


FaultHook = Callable[[str, str, bool], Awaitable[None]]
"""``hook(node, kind, active)``: called when a fault of the node starts or ends."""


class PodRuntime(Protocol):
    """Where a kubelet's pods run: the simulated runtime, or a real containerd."""

    async def run_pod(self, pod: BoundPod) -> None: ...

    async def stop_pod(self, uid: str) -> None:
        """Stop the pod's containers and sandbox, keeping them listed (idempotent)."""

    async def remove_pod(self, uid: str) -> None:
        """Stop and remove the pod's containers and sandbox (idempotent)."""


class SimPodRuntime:
    """Pods of a simulated node: entries in its :class:`SimRuntime`."""

    def __init__(self, runtime: SimRuntime, clock: Callable[[], float]) -> None:
        self.runtime = runtime
        self._clock = clock

    async def run_pod(self, pod: BoundPod) -> None:
        info = pod.info
        self.runtime.run(info.uid, info.namespace, info.name, pod.containers, self._clock())

    async def stop_pod(self, uid: str) -> None:
        self.runtime.stop(uid, self._clock())

    async def remove_pod(self, uid: str) -> None:
        self.runtime.remove(uid)


@dataclass(slots=True)
class _Run:
    """What the kubelet knows of one pod it was given."""

    seen_at: float
    started_at: float | None = None
    pending: bool = False
    failures: dict[str, int] = field(default_factory=dict)  # container -> failures so far
    next_failure: dict[str, float] = field(default_factory=dict)
    looping: bool = False
    stop_at: float | None = None


class SimulatedKubelet:
    def __init__(
        self,
        plan: NodePlan,
        *,
        index: int,
        client: KubeletClient,
        pods: PodIndex,
        runtime: PodRuntime,
        timing: Timing,
        clock: ScenarioClock,
        timeline: Timeline,
        on_fault: FaultHook | None = None,
        sim_runtime: SimRuntime | None = None,
        taint_writer: KubeWriter | None = None,
    ) -> None:
        self.plan = plan
        self.name = plan.name
        self._index = index
        self._client = client
        self._pods = pods
        self._runtime = runtime
        self._sim_runtime = sim_runtime
        self._timing = timing
        self._clock = clock
        self._timeline = timeline
        self._on_fault = on_fault
        self._taint_writer = taint_writer  # writes a readiness taint's changes
        self._tainted: frozenset[str] = frozenset()  # readiness taints on the Node, as written
        self.node_uid = ""
        self.registered_at: float | None = None
        self.last_renewal: float | None = None
        # Held while a renewal is on its way: the lease's stop is recorded once the renewal
        # sent before it has landed, so the stop names the renewTime the Lease keeps.
        self._renewing = asyncio.Lock()
        self.node_gone = False
        self._lease: dict[str, object] = {}
        self._posted: dict[str, str] = {}  # condition type -> status last posted
        self._transitions: dict[str, float] = {}
        self._last_post: float | None = None
        self._reported_ready = False
        self._app_pods_bound = False
        self._alive = True
        self._runs: dict[str, _Run] = {}
        self._active: set[str] = set()
        self._resync = False  # read the Node before the next status post (after a silence)
        # (pod uid, container) -> the last failure of a looping container and its back-off
        self._last_terminations: dict[tuple[str, str], tuple[Termination, float]] = {}

    # ------------------------------------------------------------------ state

    def alive(self, now: float) -> bool:
        """Talking to the API server (no ``lease_stops`` fault active)."""
        return self.plan.active(LEASE_STOPS, self._clock.t(now)) is None

    def ready_view(self, now: float) -> tuple[str, str, str]:
        """Ready as this kubelet sees it: (status, reason, message)."""
        t = self._clock.t(now)
        registered = self.registered_at if self.registered_at is not None else now
        if now - registered < self._timing.ready_after_seconds:
            return "False", objects.NOT_READY_REASON, objects.STARTING_MESSAGE
        if self.plan.active(CRI_TIMEOUTS, t) is not None:
            return "False", objects.NOT_READY_REASON, objects.RUNTIME_MESSAGE
        if self.plan.active(NEVER_READY, t) is not None:
            return "False", objects.NOT_READY_REASON, objects.CNI_MESSAGE
        if self.plan.readiness_taints(t) or self._tainted:  # Ready once the taint is removed
            return "False", objects.NOT_READY_REASON, objects.CNI_MESSAGE
        return "True", objects.READY_REASON, objects.READY_MESSAGE

    def _conditions(self, now: float) -> list[objects.Condition]:
        pressure = self.plan.active(MEMORY_PRESSURE, self._clock.t(now)) is not None
        return objects.kubelet_conditions(*self.ready_view(now), memory_pressure=pressure)

    def _conditions_json(
        self,
        conditions: list[objects.Condition],
        now: float,
        transition_at: float | None = None,
    ) -> list[dict[str, object]]:
        """Conditions with a heartbeat ``now``; a changed one transitioned at ``transition_at``
        (default: now)."""
        for c in conditions:
            if self._posted.get(c.type) != c.status or c.type not in self._transitions:
                self._transitions[c.type] = now if transition_at is None else transition_at
        return objects.conditions_json(conditions, self._transitions, heartbeat=now)

    # ------------------------------------------------------------------ registration

    async def register(self, *, created_ago: float = 0.0) -> None:
        """Create the Node and its Lease, and bind the node's DaemonSet pods. An old node
        (``created_ago``) has been up, and Ready, since then."""
        now = self._clock.now()
        self.registered_at = now - created_ago
        readiness = self.plan.readiness_taints(self._clock.t(now))
        self._tainted = readiness
        conditions = self._conditions(now)
        body = objects.node_body(
            self.plan,
            self._conditions_json(conditions, now, self.registered_at),
            self._index,
            readiness,
        )
        node = await self._client.register_node(body)
        self.node_uid = node_info(node).uid
        self._timeline.record(self.name, timeline.REGISTERED, at=now)
        self._remember_posted(conditions, now)
        self._lease = await self._client.create_lease(
            self.name, self.node_uid, self._timing.lease_duration_seconds, now
        )
        self.last_renewal = now
        await self._bind(daemonsets=True)

    def registration_objects(self) -> list[tuple[str, str, str]]:
        """(resource, namespace, name) of what :meth:`register` creates: the Node, its Lease,
        the DaemonSet pods."""
        made = [("nodes", "", self.name), ("leases", LEASE_NAMESPACE, self.name)]
        made += [
            ("pods", pod.namespace, pod.name)
            for pod in self.plan.pods
            if pod.owner_kind == OWNER_DAEMONSET
        ]
        return made

    async def _bind(self, *, daemonsets: bool) -> None:
        """Create the node's DaemonSet pods, or its ReplicaSet pods, bound to it."""
        for pod in self.plan.pods:
            if (pod.owner_kind == OWNER_DAEMONSET) == daemonsets:
                await self._client.create_pod(objects.pod_body(pod, self.name))

    def _remember_posted(self, conditions: list[objects.Condition], now: float) -> None:
        self._last_post = now
        ready = next(c for c in conditions if c.type == "Ready")
        if ready.status == "True" and self._posted.get("Ready") != "True":
            self._timeline.record(self.name, timeline.READY, at=now)
        elif ready.status == "False" and self._posted.get("Ready") != "False":
            self._timeline.record(self.name, timeline.NOT_READY, ready.reason, at=now)
        self._posted = {c.type: c.status for c in conditions}

    # ------------------------------------------------------------------ loops

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self._every(self._timing.lease_renew_seconds, self._renew_lease))
            status_tick = min(self._timing.status_update_seconds, self._timing.pod_sync_seconds)
            group.create_task(self._every(status_tick, self._post_status))
            group.create_task(self._every(self._timing.pod_sync_seconds, self._sync_pods))
            group.create_task(self._every(fault_tick(self._timing), self._check_faults))

    async def _every(self, period: float, action: Callable[[], Awaitable[None]]) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            try:
                await action()
            except KubeError as exc:
                log.warning("simulated kubelet %s: API error: %s", self.name, exc)
            except Exception:  # a runtime error (the real containerd) must not stop the node
                log.exception("simulated kubelet %s: %s failed", self.name, action.__name__)
            next_at = max(next_at + period, loop.time())
            await asyncio.sleep(next_at - loop.time())

    async def _check_faults(self) -> None:
        now = self._clock.now()
        t = self._clock.t(now)
        active = {kind for kind in FAULT_KINDS if self.plan.active(kind, t) is not None}
        for kind in sorted(active - self._active):
            self._timeline.record(self.name, timeline.FAULT_STARTED, kind, at=now)
            if self._on_fault is not None:
                await self._on_fault(self.name, kind, True)
        for kind in sorted(self._active - active):
            self._timeline.record(self.name, timeline.FAULT_ENDED, kind, at=now)
            if self._on_fault is not None:
                await self._on_fault(self.name, kind, False)
        self._active = active
        alive = LEASE_STOPS not in active
        if alive != self._alive:
            if alive:
                self._timeline.record(self.name, timeline.LEASE_RESUMED, at=now)
            else:
                renewed = await self._landed_renewal()
                last = f"{renewed:.3f}" if renewed is not None else ""
                self._timeline.record(self.name, timeline.LEASE_STOPPED, last, at=now)
            self._alive = alive
        await self._write_readiness_taints(t)

    async def _write_readiness_taints(self, t: float) -> None:
        """The CNI agent's share (or a readiness gate's owner's): a ``readiness_taint`` fault's
        taint is on the Node while the fault is active, removed when it ends. What is not
        written yet (an API error) is tried again at the next check."""
        writer = self._taint_writer
        wanted = self.plan.readiness_taints(t)
        if writer is None or self.registered_at is None or self.node_gone:
            return
        for key in sorted(wanted - self._tainted):
            await writer.add_taint(self.name, Taint(key, objects.READINESS_TAINT_EFFECT))
            self._tainted |= {key}
        for key in sorted(self._tainted - wanted):
            await writer.remove_taint(self.name, key)
            self._tainted -= {key}

    async def _landed_renewal(self) -> float | None:
        """The last renewal, once one on its way has landed (waiting RENEWAL_LANDS_SECONDS at
        most, so that a hung API server does not hold the fault checks back)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(RENEWAL_LANDS_SECONDS), self._renewing:
                pass
        return self.last_renewal

    async def _renew_lease(self) -> None:
        async with self._renewing:
            now = self._clock.now()
            if self.node_gone or not self.alive(now) or self.registered_at is None:
                return
            try:
                self._lease = await self._client.renew_lease(self._lease, now)
            except NotFound:
                self._lease = await self._client.create_lease(
                    self.name, self.node_uid, self._timing.lease_duration_seconds, now
                )
            self.last_renewal = now

    async def _post_status(self) -> None:
        now = self._clock.now()
        if self.node_gone or not self.alive(now) or self.registered_at is None:
            self._resync = True
            return
        if self._resync:
            await self._read_node()  # after a silence: compare with what the API holds now
            await self._repost_pods(now)
            self._resync = False
        conditions = self._conditions(now)
        changed = any(self._posted.get(c.type) != c.status for c in conditions)
        due = self._last_post is None or now - self._last_post >= self._timing.status_update_seconds
        if changed or due:
            try:
                await self._client.patch_node_status(
                    self.name, {"conditions": self._conditions_json(conditions, now)}
                )
            except NotFound:
                self.node_gone = True
                self._timeline.record(self.name, timeline.NODE_GONE, at=now)
                return
            self._remember_posted(conditions, now)
        if not self._app_pods_bound and self._posted.get("Ready") == "True":
            self._app_pods_bound = True
            await self._bind(daemonsets=False)

    async def _repost_pods(self, now: float) -> None:
        """After a silence the node lifecycle controller has turned the pods not ready: the
        kubelet posts the status of those it runs (and that do not loop) again."""
        for uid, pod in list(self._pods.on(self.name).items()):
            run = self._runs.get(uid)
            if run is None or run.started_at is None or run.looping or run.pending:
                continue
            if pod.info.deletion_timestamp is not None or pod.info.terminal:
                continue
            containers = [objects.running_container(c, run.started_at) for c in pod.containers]
            status = objects.pod_status("Running", self._scheduled(pod), now, containers)
            await self._client.patch_pod_status(pod.info.namespace, pod.info.name, status)

    async def _read_node(self) -> None:
        try:
            node = await self._client.api.get(NODES, self.name)
        except NotFound:
            return
        for condition in node_info(node).conditions:
            self._posted[condition.type] = condition.status

    # ------------------------------------------------------------------ pods

    async def _sync_pods(self) -> None:
        now = self._clock.now()
        if not self.alive(now):
            return
        bound = dict(self._pods.on(self.name))
        for uid in [u for u in self._runs if u not in bound]:
            await self._runtime.remove_pod(uid)  # deleted behind the kubelet's back
            del self._runs[uid]
        runtime = self._sim_runtime
        if runtime is not None and not runtime.frozen:
            for uid in runtime.pod_uids() - bound.keys():
                runtime.stop(uid, now)  # housekeeping: not a pod of this node
        for uid, pod in bound.items():
            try:
                await self._sync_pod(uid, pod, now)
            except KubeError as exc:
                log.warning("simulated kubelet %s: pod %s: %s", self.name, pod.info.name, exc)

    async def _sync_pod(self, uid: str, pod: BoundPod, now: float) -> None:
        info = pod.info
        run = self._runs.setdefault(uid, _Run(seen_at=now))
        if info.deletion_timestamp is not None:
            await self._stop(uid, pod, run, now)
            return
        if info.terminal:
            return
        t = self._clock.t(now)
        if run.started_at is None and not run.pending:
            if now - run.seen_at < self._timing.pod_start_seconds:
                return
            if self.plan.active(PODS_PENDING, t) is not None:
                await self._report_pending(pod)
                run.pending = True
                return
            await self._start(pod, run, now)
            return
        if run.pending:
            if self.plan.active(PODS_PENDING, t) is None:
                run.pending = False
                await self._start(pod, run, now)
            return
        loop = self.plan.loop_fault(info.name, t)
        if loop is not None:
            await self._fail(pod, run, now, oom=loop.kind == OOM_LOOP)
        elif run.looping:
            await self._recover(pod, run, now)

    async def _start(self, pod: BoundPod, run: _Run, now: float) -> None:
        await self._runtime.run_pod(pod)
        run.started_at = self._clock.now()
        containers = [objects.running_container(c, run.started_at) for c in pod.containers]
        status = objects.pod_status("Running", self._scheduled(pod), run.started_at, containers)
        if await self._client.patch_pod_status(pod.info.namespace, pod.info.name, status):
            self._timeline.record(self.name, timeline.POD_STARTED, _pod_name(pod))

    async def _report_pending(self, pod: BoundPod) -> None:
        containers = [objects.waiting_container(c, "ContainerCreating") for c in pod.containers]
        scheduled = self._scheduled(pod)
        status = objects.pod_status("Pending", scheduled, scheduled, containers)
        if await self._client.patch_pod_status(pod.info.namespace, pod.info.name, status):
            self._timeline.record(self.name, timeline.POD_PENDING, _pod_name(pod))

    def _scheduled(self, pod: BoundPod) -> float:
        return pod.info.created_at or self._clock.now()

    async def _fail(self, pod: BoundPod, run: _Run, now: float, *, oom: bool) -> None:
        """Each container fails when its back-off is over; the status shows CrashLoopBackOff."""
        runtime = self._sim_runtime
        if runtime is None:
            return
        info = pod.info
        statuses = []
        failed = False
        for container in pod.containers:
            failures = run.failures.get(container, 0)
            if now >= run.next_failure.get(container, 0.0):
                termination = runtime.fail(info.uid, container, oom=oom, now=now)
                if termination is None:
                    return
                failures += 1
                run.failures[container] = failures
                backoff = min(
                    self._timing.crash_backoff_seconds * 2 ** (failures - 1),
                    self._timing.crash_backoff_max_seconds,
                )
                run.next_failure[container] = now + backoff
                run.looping = failed = True
                self._last_terminations[info.uid, container] = (termination, backoff)
            last = self._last_terminations.get((info.uid, container))
            if last is None:
                statuses.append(objects.running_container(container, run.started_at or now))
            else:
                statuses.append(objects.crashing_container(container, info.name, last[0], last[1]))
        if failed:
            status = objects.pod_status("Running", self._scheduled(pod), now, statuses)
            if await self._client.patch_pod_status(info.namespace, info.name, status):
                # At the failure, which the back-off counts from, not when its status landed.
                self._timeline.record(self.name, timeline.POD_FAILED, _pod_name(pod), at=now)

    async def _recover(self, pod: BoundPod, run: _Run, now: float) -> None:
        runtime = self._sim_runtime
        run.looping = False
        statuses = []
        for container in pod.containers:
            restarts = 0
            if runtime is not None:
                running = runtime.restart(pod.info.uid, container, now)
                restarts = running.attempt if running is not None else 0
            self._last_terminations.pop((pod.info.uid, container), None)
            statuses.append(objects.running_container(container, now, restarts))
        status = objects.pod_status("Running", self._scheduled(pod), now, statuses)
        await self._client.patch_pod_status(pod.info.namespace, pod.info.name, status)

    async def _stop(self, uid: str, pod: BoundPod, run: _Run, now: float) -> None:
        """A pod being deleted: stop its containers within ``pod_stop_seconds`` (never later
        than its grace period), then confirm the deletion (grace 0, this uid only), then
        remove what is left of it from the runtime. The API server waits for this: without
        the confirmation the pod stays Terminating."""
        if run.stop_at is None:
            grace = pod.info.deletion_grace_period_seconds
            limit = float(grace) if grace is not None else float(pod.grace_seconds)
            run.stop_at = now + min(self._timing.pod_stop_seconds, limit)
        if now < run.stop_at:
            return
        await self._runtime.stop_pod(uid)
        confirmed = await self._client.confirm_pod_deleted(pod.info.namespace, pod.info.name, uid)
        await self._runtime.remove_pod(uid)  # confirmed, or gone (or replaced) already
        if confirmed:
            self._timeline.record(self.name, timeline.POD_DELETED, _pod_name(pod))


def _pod_name(pod: BoundPod) -> str:
    return f"{pod.info.namespace}/{pod.info.name}"
