"""What containerd's task events told about a container's end before the runtime's listing
shows it.

containerd's CRI plugin records a container's exit from the same /tasks/exit event the agent
receives, tens of milliseconds later (it deletes the task first, under load longer), and its
OOMKilled from the same /tasks/oom events. An event carries everything the CRI's exited record
will say: the exit status, when the process exited and, from any /tasks/oom of that container
while it ran, the reason. So the agent publishes an exit the moment the event comes, over the
listing it last read (:meth:`ToldExits.apply`), and keeps it over every later listing that
does not show the container exited yet. Once a listing shows it exited, the runtime's own record
stands; one taken after the event that no longer lists the container ends what was told of it;
an exit told :data:`~exporter.model.runtime_events.SHOWN_WITHIN_SECONDS` ago and never shown is
dropped: the listing wins.

Reasons are the CRI plugin's: ``OOMKilled`` when a /tasks/oom of the container came (even with
exit status 0: the OOM killer chose a child of it), else ``Completed`` for 0 and ``Error`` for
any other status. A told exit is ``settled`` (its termination counted at once) only when no OOM
event of it can be missing or still to come: not for a status 137 without one (the OOM event may
follow, as :func:`~exporter.model.runtime.oom_reason_may_follow` says of the CRI's records),
nor for a container created before the subscription last held, whose earlier OOM events the
agent may have missed. Those wait for the runtime's record, as without events.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from exporter.model.runtime import (
    OOM_KILLED,
    Container,
    ContainerState,
    RuntimeSnapshot,
    oom_reason_may_follow,
)
from exporter.model.runtime_events import SHOWN_WITHIN_SECONDS, TOPIC_EXIT, TOPIC_OOM, TaskEvent
from exporter.model.terminations import bucket_reason


@dataclass(frozen=True, slots=True)
class _Exit:
    status: int
    exited_at: float
    told_at: float


class ToldExits:
    """Exits and OOM kills told by events and not yet shown by a listing. Pure: the caller
    passes the time (Unix seconds, the clock of :attr:`RuntimeSnapshot.taken_at`)."""

    def __init__(self) -> None:
        self._exits: dict[str, _Exit] = {}
        self._ooms: dict[str, float] = {}  # container id -> when told
        self._complete_since: float | None = None

    def subscribed(self, since: float | None) -> None:
        """Every OOM event after ``since`` reaches the agent (the subscription that holds was
        asked for then); None while not subscribed."""
        self._complete_since = since

    def tell(self, event: TaskEvent, now: float) -> bool:
        """Take in an event; whether it may change what a listing is published as."""
        if event.topic == TOPIC_OOM:
            self._ooms[event.container_id] = now
            return True
        if event.topic != TOPIC_EXIT or not event.of_init_process or event.exit_status is None:
            return False
        self._exits[event.container_id] = _Exit(
            event.exit_status, event.exited_at or event.published_at, now
        )
        return True

    @property
    def pending(self) -> bool:
        return bool(self._exits or self._ooms)

    def apply(self, snapshot: RuntimeSnapshot, now: float) -> RuntimeSnapshot:
        """``snapshot`` with what was told and it does not show; ``snapshot`` itself when that
        is nothing."""
        if not self._exits and not self._ooms:
            return snapshot
        self._forget(snapshot, now)
        containers = tuple(self._told(c) for c in snapshot.containers)
        if all(a is b for a, b in zip(containers, snapshot.containers, strict=True)):
            return snapshot
        return dataclasses.replace(snapshot, containers=containers)

    def _forget(self, snapshot: RuntimeSnapshot, now: float) -> None:
        listed = {c.id: c for c in snapshot.containers}
        for cid, told in list(self._exits.items()):
            container = listed.get(cid)
            shown = container is not None and container.state is ContainerState.EXITED
            gone = container is None and snapshot.taken_at > told.told_at
            if shown or gone or now - told.told_at > SHOWN_WITHIN_SECONDS:
                del self._exits[cid]
        for cid, told_at in list(self._ooms.items()):
            container = listed.get(cid)
            if container is None:
                if snapshot.taken_at > told_at:
                    del self._ooms[cid]
            elif container.state is ContainerState.EXITED and container.reason == OOM_KILLED:
                del self._ooms[cid]

    def _told(self, container: Container) -> Container:
        oom = container.id in self._ooms
        if container.state is ContainerState.EXITED:
            if oom and oom_reason_may_follow(container):  # the CRI has not taken the OOM in yet
                return dataclasses.replace(container, reason=OOM_KILLED, settled=True)
            return container
        told = self._exits.get(container.id)
        if told is None:
            return container
        reason = OOM_KILLED if oom else bucket_reason("", told.status)  # Completed or Error
        exited = dataclasses.replace(
            container,
            state=ContainerState.EXITED,
            exit_code=told.status,
            finished_at=told.exited_at,
            reason=reason,
        )
        complete = self._complete_since is not None and container.created_at >= self._complete_since
        settled = oom or (complete and not oom_reason_may_follow(exited))
        return dataclasses.replace(exited, settled=settled)
