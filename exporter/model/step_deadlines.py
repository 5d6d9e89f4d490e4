"""When the current step of each active rollback must have ended by its timeouts (pure).

A step's timeout counts from its first attempt (``started_at``, kept across retries and
restarts of the controller): a drain or a pod eviction that a PodDisruptionBudget refuses fails
``--drain.eviction-timeout`` after it, a runtime cleanup the agent does not finish fails
``--cleanup.timeout`` after it; a cordon, a taint, a verification or a deletion is one API call
(retried a few times) and has no wait of its own, so its deadline is its start. A rollback still
at that step well past its deadline is one the executor does not drive: the controller's own
trouble (rules/controller.yml, ``NodesyncRollbackStepOverdue``).

Left out: a step not started yet (a rollback queued for a slot, one held by the correlated-
failure guard before its next step: neither has a timeout by design), and every step of a
rollback a person paused (``spec.paused``: held on purpose, for as long as that person wants).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from exporter.model.rollback import NodeRollback, StepKind
from exporter.model.rollback_state import current_step


@dataclass(frozen=True, slots=True)
class StepTimeouts:
    """The timeouts of the steps that wait (the controller's flags)."""

    eviction: float  # --drain.eviction-timeout: drain, evict_pod
    cleanup: float  # --cleanup.timeout: cleanup_runtime

    def of(self, kind: StepKind) -> float:
        """How long a step of ``kind`` may last after its first attempt."""
        if kind in (StepKind.DRAIN, StepKind.EVICT_POD):
            return self.eviction
        if kind is StepKind.CLEANUP_RUNTIME:
            return self.cleanup
        return 0.0


def step_deadline(rollback: NodeRollback, timeouts: StepTimeouts) -> tuple[StepKind, float] | None:
    """The rollback's current step and the Unix time by which it must have ended; None when it
    has none (finished, paused by a person, its current step not started)."""
    if not rollback.active or rollback.spec.paused:
        return None
    index = current_step(rollback.status)
    if index is None:
        return None
    step = rollback.status.steps[index]
    if step.started_at is None:
        return None
    return step.kind, step.started_at + timeouts.of(step.kind)


def earliest_deadlines(
    rollbacks: Iterable[NodeRollback], timeouts: StepTimeouts
) -> dict[str, float]:
    """Per step kind (its value), the earliest deadline among the rollbacks at that step."""
    earliest: dict[str, float] = {}
    for rollback in rollbacks:
        found = step_deadline(rollback, timeouts)
        if found is None:
            continue
        kind, deadline = found
        earliest[kind.value] = min(deadline, earliest.get(kind.value, deadline))
    return earliest
