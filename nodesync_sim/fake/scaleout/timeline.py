"""The scenario's clock, and the record of what the simulated nodes did and when.

Scenario time ``t`` is seconds since the waves started (:meth:`ScenarioClock.start`); before that
it is minus infinity, so no fault is active while old nodes register. The timeline keeps wall
clock times (Unix seconds): tests and the demo compare them with when nodesync acted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

# What the timeline records (``TimelineEntry.what``).
REGISTERED = "registered"
READY = "ready"  # the kubelet posted Ready=True (first time, or again after a failure)
NOT_READY = "not_ready"  # the kubelet posted Ready=False (detail: the reason)
LEASE_STOPPED = "lease_stopped"  # the kubelet stopped renewing (detail: the last renewal time)
LEASE_RESUMED = "lease_resumed"
READY_UNKNOWN = "ready_unknown"  # the node lifecycle controller set Ready=Unknown
FAULT_STARTED = "fault_started"  # detail: the fault's kind
FAULT_ENDED = "fault_ended"
POD_STARTED = "pod_started"  # detail: namespace/name
POD_PENDING = "pod_pending"
POD_FAILED = "pod_failed"  # a looping container failed again (detail: namespace/name)
POD_DELETED = "pod_deleted"  # the kubelet confirmed a graceful deletion
NODE_GONE = "node_gone"  # the Node was deleted under the kubelet
PDB_RELAXED = "pdb_relaxed"  # "node": the PodDisruptionBudget's name (detail: what it allows)


class ScenarioClock:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self.started_at: float | None = None

    def now(self) -> float:
        return self._clock()

    def start(self) -> float:
        self.started_at = self._clock()
        return self.started_at

    def t(self, now: float | None = None) -> float:
        """Seconds since the scenario started (minus infinity before)."""
        if self.started_at is None:
            return float("-inf")
        return (self._clock() if now is None else now) - self.started_at

    def at(self, t: float) -> float:
        """The wall clock time of scenario time ``t``."""
        if self.started_at is None:
            raise RuntimeError("the scenario has not started")
        return self.started_at + t


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    at: float
    node: str
    what: str
    detail: str = ""


class Timeline:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self.entries: list[TimelineEntry] = []

    def record(self, node: str, what: str, detail: str = "", at: float | None = None) -> None:
        self.entries.append(TimelineEntry(self._clock() if at is None else at, node, what, detail))

    def of(self, node: str, what: str | None = None) -> list[TimelineEntry]:
        return [e for e in self.entries if e.node == node and (what is None or e.what == what)]

    def first(self, node: str, what: str) -> TimelineEntry | None:
        found = self.of(node, what)
        return found[0] if found else None
