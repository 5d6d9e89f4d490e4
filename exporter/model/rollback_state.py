"""A NodeRollback's status as a state machine: pure transitions, each returning a new status.

Steps run in order. Starting a step records it ``running`` (with what the step observed right
before its effect) *before* the effect, so that after a crash the next leader knows the effect
may have happened and re-checks it instead of skipping it. Finishing records the outcome; a
result may stop the rollback (skipping the rest) in a final phase. A step that must wait (for
the node's agent, a PodDisruptionBudget, a pause) stays ``running`` while the rollback is
``Waiting``, with the time of its next attempt. A node rollback fenced (cordoned, tainted)
while every concurrency slot is held is ``Waiting`` too, reason ``queued``, its next step
pending, until a slot frees (``finish_step(queued=True)``: no write of its own).

Timestamps are Unix seconds passed in; nothing here reads a clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from exporter.model.alerts import same_episode
from exporter.model.rollback import (
    FENCING_STEPS,
    FINISHED_STEP_STATES,
    QUEUED,
    NodeRollback,
    Phase,
    PodTarget,
    RollbackSpec,
    RollbackStatus,
    StepKind,
    StepState,
    StepStatus,
    Trigger,
    rollback_steps,
)

# ``observed`` keys (and values) a step records with its intent.
OBSERVED_BEFORE = "before"
BEFORE_ABSENT = "absent"  # the node was not cordoned / did not carry the taint
BEFORE_PRESENT = "present"


@dataclass(frozen=True, slots=True)
class StepResult:
    """How a step ended. ``stop`` ends the rollback in that phase (the later steps are skipped).
    ``made_change``: the step itself changed the node (cordoned, tainted it). ``pod``: the pod
    the step was about, when not the node (its Event goes there)."""

    state: StepState
    message: str
    reason: str = ""
    made_change: bool = False
    stop: Phase | None = None
    action_required: str = ""
    pod: PodTarget | None = None

    def __post_init__(self) -> None:
        if self.state not in FINISHED_STEP_STATES:
            raise ValueError(f"a step ends done, skipped or failed, not {self.state.value}")


def initial_status(spec: RollbackSpec, generation: int = 1) -> RollbackStatus:
    """Pending, every step of the spec's action pending, the spec's trigger recorded."""
    steps = tuple(StepStatus(k) for k in rollback_steps(spec.action, delete_node=spec.delete_node))
    return RollbackStatus(
        phase=Phase.PENDING,
        steps=steps,
        triggers=(spec.trigger,),
        observed_generation=generation,
    )


def current_step(status: RollbackStatus) -> int | None:
    """The index of the first unfinished step (pending or running), None when all finished."""
    return next(
        (i for i, s in enumerate(status.steps) if s.state not in FINISHED_STEP_STATES), None
    )


def fencing_next(status: RollbackStatus) -> bool:
    """The rollback has not begun, or its next step is a fencing one (cordon, taint)."""
    index = current_step(status)
    return not status.steps or (index is not None and status.steps[index].kind in FENCING_STEPS)


def _with_step(status: RollbackStatus, index: int, step: StepStatus) -> tuple[StepStatus, ...]:
    return (*status.steps[:index], step, *status.steps[index + 1 :])


def start_step(
    status: RollbackStatus, index: int, now: float, observed: Mapping[str, str] | None = None
) -> RollbackStatus:
    """The intent: step ``index`` runs (another attempt). Its first start time is kept, so its
    timeout counts from the first attempt across retries and restarts."""
    step = status.steps[index]
    started = dataclasses.replace(
        step,
        state=StepState.RUNNING,
        attempts=step.attempts + 1,
        started_at=step.started_at if step.started_at is not None else now,
        observed=dict(observed) if observed is not None else dict(step.observed),
        not_before=None,
    )
    return dataclasses.replace(
        status,
        phase=Phase.RUNNING,
        reason="",
        message="",
        steps=_with_step(status, index, started),
        started_at=status.started_at if status.started_at is not None else now,
    )


def set_request(status: RollbackStatus, index: int, request: str) -> RollbackStatus:
    """Record the cleanup request id step ``index`` sent to the agent."""
    step = dataclasses.replace(status.steps[index], request=request)
    return dataclasses.replace(status, steps=_with_step(status, index, step))


def wait_step(
    status: RollbackStatus,
    index: int,
    reason: str,
    message: str,
    until: float | None,
    *,
    failed_attempt: bool = False,
) -> RollbackStatus:
    """Step ``index`` waits (it stays running): the rollback is Waiting until ``until``.
    ``failed_attempt``: the wait follows a failed attempt (an API error), which counts."""
    step = status.steps[index]
    step = dataclasses.replace(
        step,
        reason=reason,
        message=message,
        not_before=until,
        attempts=step.attempts + 1 if failed_attempt else step.attempts,
    )
    return dataclasses.replace(
        status,
        phase=Phase.WAITING,
        reason=reason,
        message=message,
        steps=_with_step(status, index, step),
    )


#: The message of a queued rollback (reason ``queued``).
QUEUED_MESSAGE = "fenced; its next step waits for a slot (--guard.max-concurrent-rollbacks)"


def finish_step(
    status: RollbackStatus, index: int, result: StepResult, now: float, *, queued: bool = False
) -> RollbackStatus:
    """Step ``index`` ended as ``result`` says; the rollback goes on, stops, or succeeds.
    ``queued``: it was driven without a concurrency slot; if it goes on with a step that is not
    a fencing one, it is ``Waiting`` (``queued``) until the executor drives it with a slot."""
    step = status.steps[index]
    finished = dataclasses.replace(
        step,
        state=result.state,
        reason=result.reason,
        message=result.message,
        finished_at=now,
        made_change=step.made_change or result.made_change,
        not_before=None,
    )
    status = dataclasses.replace(status, steps=_with_step(status, index, finished))
    if result.stop is not None:
        return _end(status, result.stop, result.reason, result.message, now, result)
    following = current_step(status)
    if following is None:
        return _end(status, Phase.SUCCEEDED, "", result.message, now, result)
    if queued and status.steps[following].kind not in FENCING_STEPS:
        return dataclasses.replace(
            status, phase=Phase.WAITING, reason=QUEUED, message=QUEUED_MESSAGE
        )
    return dataclasses.replace(status, phase=Phase.RUNNING, reason="", message="")


def record_outcome(
    rollback: NodeRollback, index: int, result: StepResult, now: float, *, queued: bool = False
) -> RollbackStatus | None:
    """The status with step ``index`` ended as ``result`` says (:func:`finish_step`); None when
    it ended already (another writer recorded it). A rollback escalated since its steps were
    planned (its spec's generation is newer than the plan's) is replanned with the outcome, for
    the stronger action: it never ends on the weaker plan's last step, so an escalation that
    lands while that step runs is carried out, not only recorded."""
    if rollback.status.steps[index].state in FINISHED_STEP_STATES:
        return None
    status = finish_step(rollback.status, index, result, now, queued=queued)
    if rollback.generation > rollback.status.observed_generation:
        return replan(status, rollback.spec, rollback.generation)
    return status


def _end(
    status: RollbackStatus,
    phase: Phase,
    reason: str,
    message: str,
    now: float,
    result: StepResult | None = None,
) -> RollbackStatus:
    steps = tuple(
        dataclasses.replace(
            s,
            state=StepState.SKIPPED,
            reason=reason or "stopped",
            message=f"rollback stopped: {reason or phase.value.lower()}",
            finished_at=now,
            not_before=None,
        )
        if s.state is StepState.PENDING
        else s
        for s in status.steps
    )
    return dataclasses.replace(
        status,
        phase=phase,
        reason=reason,
        message=message,
        steps=steps,
        finished_at=now,
        action_required=result.action_required if result is not None else "",
    )


def cancel(status: RollbackStatus, reason: str, message: str, now: float) -> RollbackStatus:
    """Stop the rollback (the node recovered, became protected ...). A step found running is
    recorded as interrupted: skipped, its ``made_change`` kept for the undo."""
    steps = tuple(
        dataclasses.replace(
            s,
            state=StepState.SKIPPED,
            reason=reason,
            message=f"interrupted: {message}",
            finished_at=now,
            not_before=None,
        )
        if s.state is StepState.RUNNING
        else s
        for s in status.steps
    )
    return _end(dataclasses.replace(status, steps=steps), Phase.CANCELLED, reason, message, now)


def add_trigger(status: RollbackStatus, trigger: Trigger) -> RollbackStatus:
    """Another alert joined the rollback (recorded once: one episode, however its startsAt
    was written)."""
    if any(
        t.fingerprint == trigger.fingerprint and same_episode(t.starts_at, trigger.starts_at)
        for t in status.triggers
    ):
        return status
    return dataclasses.replace(status, triggers=(*status.triggers, trigger))


def replan(status: RollbackStatus, spec: RollbackSpec, generation: int) -> RollbackStatus:
    """The spec changed (a stronger alert escalated the rollback): the steps of the new action,
    keeping what the steps that remain have done. The cleanup and its verification run again
    after the new steps (a drain comes before them), with a new request. The rollback runs
    again: an end the weaker plan reached meanwhile (:func:`record_outcome`) is not kept."""
    kinds = rollback_steps(spec.action, delete_node=spec.delete_node)
    before = {s.kind: s for s in status.steps}
    redo = {StepKind.CLEANUP_RUNTIME, StepKind.VERIFY}
    steps = tuple(
        before[k] if k in before and k not in redo and before[k].state is StepState.DONE
        else StepStatus(k, attempts=before[k].attempts if k in before else 0)
        for k in kinds
    )  # fmt: skip
    return dataclasses.replace(
        status,
        steps=steps,
        observed_generation=generation,
        phase=Phase.RUNNING,
        reason="",
        message="",
        finished_at=None,
        action_required="",
    )


def may_have_changed(step: StepStatus) -> bool:
    """The step changed the node, or may have: it started with the node as it was before (the
    intent says the change was absent) and the rollback stopped before recording its end."""
    if step.made_change:
        return True
    return (
        step.state in (StepState.RUNNING, StepState.SKIPPED, StepState.FAILED)
        and step.observed.get(OBSERVED_BEFORE) == BEFORE_ABSENT
    )


def to_undo(status: RollbackStatus) -> frozenset[StepKind]:
    """The cordon and the taint this rollback made (or may have made): what a cancellation
    gives back."""
    return frozenset(
        s.kind
        for s in status.steps
        if s.kind in (StepKind.CORDON, StepKind.TAINT) and may_have_changed(s)
    )


def touched(status: RollbackStatus) -> bool:
    """Some step started (so the node counts against the blast radius even if cancelled)."""
    return any(s.state is not StepState.PENDING and s.attempts > 0 for s in status.steps)
