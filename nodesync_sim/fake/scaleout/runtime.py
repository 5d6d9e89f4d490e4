"""What a simulated node "runs", as its container runtime would list it over CRI.

A simulated kubelet that starts a pod adds a READY sandbox and one RUNNING container per
container name; a crash or OOM loop adds exited attempts (exit code 1, reason Error; or 137,
OOMKilled), keeping the latest two attempts of each container, as kubelet's garbage collection
does; a pod being deleted is stopped (sandbox NOTREADY, containers EXITED), and removed once
its deletion is confirmed. :meth:`SimRuntime.snapshot` is a
:class:`~exporter.model.runtime.RuntimeSnapshot`, the same type the agent reads from containerd,
so the agent's own code (phases, terminations, loops, drift) turns it into metrics.

No process runs: there are no resource statistics and no image filesystem.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final

from exporter.model.runtime import (
    Container,
    ContainerState,
    PodSandbox,
    RuntimeCondition,
    RuntimeSnapshot,
    RuntimeVersion,
    SandboxState,
)

IMAGE: Final = "registry.k8s.io/pause:3.9"
VERSION: Final = RuntimeVersion("nodesync-sim", "0.0.0", "v1")
CONDITIONS: Final = (RuntimeCondition("RuntimeReady", True), RuntimeCondition("NetworkReady", True))
KEEP_ATTEMPTS: Final = 2
APP: Final = "app"

EXIT_ERROR: Final = 1
EXIT_OOM: Final = 137


@dataclass(frozen=True, slots=True)
class Termination:
    """One failed attempt of a looping container (for the pod's lastState)."""

    container_id: str
    attempt: int
    started_at: float
    finished_at: float
    exit_code: int
    reason: str


def _id() -> str:
    return uuid.uuid4().hex


class SimRuntime:
    """The sandboxes and containers of one simulated node."""

    def __init__(self) -> None:
        self._sandboxes: dict[str, PodSandbox] = {}  # pod uid -> its sandbox
        self._containers: dict[str, list[Container]] = {}  # pod uid -> every kept attempt
        #: A frozen runtime answers nothing: every read and call times out (``cri_timeouts``).
        self.frozen = False

    def add_orphans(self, count: int, namespace: str, now: float) -> list[str]:
        """``count`` running sandboxes of pods the API server does not know (left by an
        earlier attempt); their pod uids."""
        uids = []
        for i in range(count):
            uid = str(uuid.uuid4())
            self.run(uid, namespace, f"leftover-{i}", (APP,), now)
            uids.append(uid)
        return uids

    def sandbox_by_id(self, sandbox_id: str) -> PodSandbox | None:
        return next((s for s in self._sandboxes.values() if s.id == sandbox_id), None)

    def container_by_id(self, container_id: str) -> Container | None:
        return next(
            (c for attempts in self._containers.values() for c in attempts if c.id == container_id),
            None,
        )

    def remove_sandbox(self, sandbox_id: str) -> None:
        sandbox = self.sandbox_by_id(sandbox_id)
        if sandbox is not None:
            self.remove(sandbox.uid)

    def remove_container(self, container_id: str) -> None:
        for uid, attempts in self._containers.items():
            self._containers[uid] = [c for c in attempts if c.id != container_id]

    def has(self, uid: str) -> bool:
        return uid in self._sandboxes

    def pod_uids(self) -> frozenset[str]:
        return frozenset(self._sandboxes)

    def run(
        self, uid: str, namespace: str, name: str, containers: Sequence[str], now: float
    ) -> None:
        """A READY sandbox and a RUNNING first attempt of each container (idempotent)."""
        if uid in self._sandboxes:
            return
        sandbox = PodSandbox(
            id=_id(),
            name=name,
            namespace=namespace,
            uid=uid,
            attempt=0,
            state=SandboxState.READY,
            created_at=now,
            config_source="api",
        )
        self._sandboxes[uid] = sandbox
        self._containers[uid] = [
            self._container(sandbox, container, 0, now, ContainerState.RUNNING)
            for container in containers
        ]

    def _container(
        self, sandbox: PodSandbox, name: str, attempt: int, now: float, state: ContainerState
    ) -> Container:
        return Container(
            id=_id(),
            pod_sandbox_id=sandbox.id,
            name=name,
            attempt=attempt,
            state=state,
            created_at=now,
            pod_uid=sandbox.uid,
            pod_namespace=sandbox.namespace,
            pod_name=sandbox.name,
            started_at=now,
        )

    def latest(self, uid: str, name: str) -> Container | None:
        attempts = [c for c in self._containers.get(uid, ()) if c.name == name]
        return max(attempts, key=lambda c: c.attempt, default=None)

    def fail(self, uid: str, name: str, *, oom: bool, now: float) -> Termination | None:
        """The container fails once more: a running attempt exits; else (it waits in back-off)
        the next attempt starts and fails at once. None when the pod does not run here."""
        sandbox = self._sandboxes.get(uid)
        current = self.latest(uid, name)
        if sandbox is None or current is None:
            return None
        exit_code, reason = (EXIT_OOM, "OOMKilled") if oom else (EXIT_ERROR, "Error")
        if current.state is ContainerState.RUNNING:
            failing = current
        else:
            failing = self._container(
                sandbox, name, current.attempt + 1, now, ContainerState.RUNNING
            )
        started = failing.started_at if failing.started_at is not None else now
        exited = replace(
            failing,
            state=ContainerState.EXITED,
            finished_at=now,
            exit_code=exit_code,
            reason=reason,
        )
        others = [c for c in self._containers[uid] if c.name != name]
        kept = [c for c in self._containers[uid] if c.name == name and c.id != failing.id]
        kept = sorted([*kept, exited], key=lambda c: c.attempt)[-KEEP_ATTEMPTS:]
        self._containers[uid] = [*others, *kept]
        return Termination(exited.id, exited.attempt, started, now, exit_code, reason)

    def restart(self, uid: str, name: str, now: float) -> Container | None:
        """The loop is over: the next attempt runs (and keeps running)."""
        sandbox = self._sandboxes.get(uid)
        current = self.latest(uid, name)
        if sandbox is None or current is None or current.state is ContainerState.RUNNING:
            return current
        running = self._container(sandbox, name, current.attempt + 1, now, ContainerState.RUNNING)
        kept = [*self._containers[uid], running]
        others = [c for c in kept if c.name != name]
        mine = sorted((c for c in kept if c.name == name), key=lambda c: c.attempt)
        self._containers[uid] = [*others, *mine[-KEEP_ATTEMPTS:]]
        return running

    def stop(self, uid: str, now: float) -> None:
        """Stop the pod, as kubelet does before it confirms a deletion: the sandbox NOTREADY,
        every running container EXITED (exit code 0, ``Completed``); idempotent."""
        sandbox = self._sandboxes.get(uid)
        if sandbox is None or sandbox.state is SandboxState.NOTREADY:
            return
        self._sandboxes[uid] = replace(sandbox, state=SandboxState.NOTREADY)
        self._containers[uid] = [
            replace(
                c, state=ContainerState.EXITED, finished_at=now, exit_code=0, reason="Completed"
            )
            if c.state is ContainerState.RUNNING
            else c
            for c in self._containers[uid]
        ]

    def remove(self, uid: str) -> None:
        """Stop and remove the pod's sandbox and containers (idempotent)."""
        self._sandboxes.pop(uid, None)
        self._containers.pop(uid, None)

    def snapshot(self, now: float) -> RuntimeSnapshot:
        return RuntimeSnapshot(
            taken_at=now,
            version=VERSION,
            conditions=CONDITIONS,
            sandboxes=tuple(self._sandboxes.values()),
            containers=tuple(c for attempts in self._containers.values() for c in attempts),
        )
