"""containerd's task events as the agent uses them: what each says, and when the runtime's
listing shows it.

The agent subscribes to containerd's events service (exporter.cri.events) for the topics below
in the CRI's namespace. An exit or OOM kill is published from the event at once
(exporter.model.told_exits: it carries all the CRI's exited record will say); every event also
has the agent read the runtime's state through the CRI, the same read as a periodic relist,
whose record then stands. containerd's CRI plugin handles the same events on its own, so a read
made at once may not show the change yet: :func:`shown` says when it does, and the agent reads
again until then (:data:`SHOWN_WITHIN_SECONDS` at most; the periodic relist remains the safety
net).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from exporter.model.runtime import ContainerState, RuntimeSnapshot, SandboxState

TOPIC_START: Final = "/tasks/start"
TOPIC_EXIT: Final = "/tasks/exit"
TOPIC_OOM: Final = "/tasks/oom"
TOPICS: Final = (TOPIC_START, TOPIC_EXIT, TOPIC_OOM)
TOPIC_LABELS: Final = tuple(topic.rsplit("/", 1)[-1] for topic in TOPICS)
"""``start``, ``exit``, ``oom``: the topics as metric label values."""

#: The namespace containerd's CRI plugin keeps kubelet's pods in.
CRI_NAMESPACE: Final = "k8s.io"

#: How long after an event the agent keeps reading until the listing shows it: longer than
#: the reader waits for an exit 137's OOMKilled (exporter.cri.snapshot's grace, 10 s), and
#: than containerd's CRI plugin takes to work through a storm of exits on a loaded node (seen:
#: tens of seconds for 110 on a 2-core machine under a load of 30).
SHOWN_WITHIN_SECONDS: Final = 60.0

#: containerd publishes /tasks/oom more than once for one OOM kill (seen: twice, ~10 ms
#: apart); another OOM event for the same container within this is the same kill.
OOM_DUPLICATE_SECONDS: Final = 1.0


@dataclass(frozen=True, slots=True)
class TaskEvent:
    """One task event. ``container_id`` is a container's or a pod sandbox's id."""

    topic: str
    container_id: str
    published_at: float
    """containerd's timestamp of the event, Unix seconds."""
    process_id: str = ""
    """For /tasks/exit: the exited process (the container's id for its init process)."""
    exit_status: int | None = None
    """For /tasks/exit: the process's exit status (128 + the signal that ended it)."""
    exited_at: float | None = None
    """For /tasks/exit: when the process exited, Unix seconds."""

    @property
    def short_topic(self) -> str:
        """``start``, ``exit`` or ``oom``: the metric label."""
        return self.topic.rsplit("/", 1)[-1]

    @property
    def of_init_process(self) -> bool:
        """False for an exec'd process's exit, which changes nothing the CRI lists."""
        return self.process_id in ("", self.container_id)


def shown(event: TaskEvent, snapshot: RuntimeSnapshot) -> bool:
    """Whether ``snapshot`` shows what ``event`` says: a started task running (or already
    exited), an exited or OOM-killed one exited with its final record (or gone)."""
    cid = event.container_id
    for container in snapshot.containers:
        if container.id == cid:
            if event.topic == TOPIC_START:
                return container.state in (ContainerState.RUNNING, ContainerState.EXITED)
            return container.state is ContainerState.EXITED and container.settled
    for sandbox in snapshot.sandboxes:
        if sandbox.id == cid:
            return (sandbox.state is SandboxState.READY) == (event.topic == TOPIC_START)
    # Not listed: an ended task's container may be removed already; a started one's may not
    # be listed yet (the CRI stores it after containerd starts the task).
    return event.topic != TOPIC_START


class OomDeduplicator:
    """Drops the repeats of one OOM kill's /tasks/oom events (:data:`OOM_DUPLICATE_SECONDS`)."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}

    def is_repeat(self, event: TaskEvent) -> bool:
        if event.topic != TOPIC_OOM:
            return False
        cutoff = event.published_at - OOM_DUPLICATE_SECONDS
        self._last = {cid: at for cid, at in self._last.items() if at >= cutoff}
        previous = self._last.get(event.container_id)
        self._last[event.container_id] = event.published_at
        return previous is not None and abs(event.published_at - previous) < OOM_DUPLICATE_SECONDS
