"""A NodeRollback's status as a state machine: intent before effect, outcomes, stops, waits,
escalation, and what a cancellation gives back."""

from __future__ import annotations

import dataclasses

import pytest

from exporter.model.rollback import (
    QUEUED,
    Action,
    NodeRollback,
    Phase,
    RollbackSpec,
    StepKind,
    StepState,
    Trigger,
    Verdicts,
)
from exporter.model.rollback_state import (
    BEFORE_ABSENT,
    BEFORE_PRESENT,
    OBSERVED_BEFORE,
    QUEUED_MESSAGE,
    StepResult,
    add_trigger,
    cancel,
    current_step,
    finish_step,
    initial_status,
    may_have_changed,
    record_outcome,
    replan,
    start_step,
    to_undo,
    touched,
    wait_step,
)

T = 1_700_000_000.0
TRIGGER = Trigger("NodesyncNewNodeNotReady", "aa", T)
SPEC = RollbackSpec("n1", "uid-n1", Action.ROLLBACK_NODE, TRIGGER, Verdicts(decided_at=T))
DONE = StepResult(StepState.DONE, "ok")


def kinds(status: object) -> list[str]:
    return [s.kind.value for s in status.steps]  # type: ignore[attr-defined]


def test_a_new_rollback_is_pending_with_every_step_of_its_action() -> None:
    status = initial_status(SPEC)
    assert status.phase is Phase.PENDING
    assert kinds(status) == ["cordon", "taint", "drain", "cleanup_runtime", "verify"]
    assert status.triggers == (TRIGGER,)
    assert status.step == "cordon"
    deleting = initial_status(dataclasses.replace(SPEC, delete_node=True))
    assert kinds(deleting)[-1] == "delete_node"
    assert kinds(initial_status(dataclasses.replace(SPEC, action=Action.EVICT_POD))) == [
        "evict_pod"
    ]


def test_the_intent_is_recorded_before_the_effect_and_the_first_start_is_kept() -> None:
    status = start_step(initial_status(SPEC), 0, T + 1, {OBSERVED_BEFORE: BEFORE_ABSENT})
    step = status.steps[0]
    assert (status.phase, step.state, step.attempts, step.started_at) == (
        Phase.RUNNING,
        StepState.RUNNING,
        1,
        T + 1,
    )
    again = start_step(status, 0, T + 50)  # a retry, or a resume after a restart
    assert (again.steps[0].attempts, again.steps[0].started_at) == (2, T + 1)
    assert again.steps[0].observed == {OBSERVED_BEFORE: BEFORE_ABSENT}  # what it saw first
    assert current_step(again) == 0
    assert touched(again)
    assert not touched(initial_status(SPEC))


def test_steps_finish_in_order_and_the_last_one_succeeds_the_rollback() -> None:
    status = initial_status(SPEC)
    for i in range(len(status.steps)):
        assert current_step(status) == i
        status = finish_step(start_step(status, i, T + i), i, DONE, T + i + 0.5)
    assert current_step(status) is None
    assert (status.phase, status.finished_at, status.step) == (Phase.SUCCEEDED, T + 4.5, "verify")


def test_a_stopping_result_skips_the_rest() -> None:
    status = start_step(initial_status(SPEC), 0, T)
    status = finish_step(status, 0, DONE, T)
    stop = StepResult(StepState.FAILED, "refused", reason="pdb_blocked", stop=Phase.FAILED)
    status = finish_step(start_step(status, 1, T), 1, stop, T + 1)
    assert status.phase is Phase.FAILED
    assert status.reason == "pdb_blocked"
    assert [s.state for s in status.steps] == [
        StepState.DONE,
        StepState.FAILED,
        StepState.SKIPPED,
        StepState.SKIPPED,
        StepState.SKIPPED,
    ]


def test_a_wait_keeps_the_step_running_and_the_rollback_waiting() -> None:
    status = start_step(initial_status(SPEC), 0, T)
    waiting = wait_step(status, 0, "waiting_for_agent", "no answer yet", T + 10)
    assert waiting.phase is Phase.WAITING
    assert waiting.reason == "waiting_for_agent"
    assert waiting.steps[0].state is StepState.RUNNING
    assert waiting.steps[0].not_before == T + 10
    resumed = start_step(waiting, 0, T + 10)
    assert (resumed.phase, resumed.reason, resumed.steps[0].not_before) == (
        Phase.RUNNING,
        "",
        None,
    )


def test_a_rollback_fenced_without_a_slot_waits_queued_until_one_takes_it() -> None:
    status = finish_step(start_step(initial_status(SPEC), 0, T), 0, DONE, T, queued=True)
    assert (status.phase, status.reason) == (Phase.RUNNING, "")  # the taint is still fencing
    status = finish_step(start_step(status, 1, T), 1, DONE, T + 1, queued=True)
    assert (status.phase, status.reason, status.step) == (Phase.WAITING, QUEUED, "drain")
    assert status.message == QUEUED_MESSAGE
    assert [s.state for s in status.steps][2:] == [StepState.PENDING] * 3
    assert status.steps[2].not_before is None  # no attempt is due: a slot takes it
    driven = start_step(status, 2, T + 5)
    assert (driven.phase, driven.reason, driven.message) == (Phase.RUNNING, "", "")
    with_a_slot = finish_step(start_step(initial_status(SPEC), 1, T), 1, DONE, T)
    assert with_a_slot.phase is Phase.RUNNING


def test_a_queued_rollback_that_stops_or_ends_is_not_queued() -> None:
    stop = StepResult(StepState.SKIPPED, "gone", reason="node_gone", stop=Phase.CANCELLED)
    stopped = finish_step(start_step(initial_status(SPEC), 1, T), 1, stop, T, queued=True)
    assert (stopped.phase, stopped.reason) == (Phase.CANCELLED, "node_gone")
    evict = initial_status(dataclasses.replace(SPEC, action=Action.EVICT_POD))
    ended = finish_step(start_step(evict, 0, T), 0, DONE, T, queued=True)
    assert ended.phase is Phase.SUCCEEDED


def test_an_action_required_reaches_the_final_status() -> None:
    status = initial_status(dataclasses.replace(SPEC, action=Action.CLEANUP_ORPHANS))
    status = finish_step(start_step(status, 0, T), 0, DONE, T)
    last = StepResult(StepState.DONE, "cordoned", action_required="delete the node")
    status = finish_step(start_step(status, 1, T), 1, last, T)
    assert (status.phase, status.action_required) == (Phase.SUCCEEDED, "delete the node")


def test_a_trigger_joins_once() -> None:
    other = Trigger("NodesyncNewNodeCRITimeouts", "bb", T + 5)
    status = add_trigger(add_trigger(initial_status(SPEC), other), other)
    assert status.triggers == (TRIGGER, other)
    # the same episode, its startsAt written to another precision (rounded a millisecond off)
    again = Trigger("NodesyncNewNodeCRITimeouts", "bb", T + 5.001)
    assert add_trigger(status, again).triggers == (TRIGGER, other)
    later = Trigger("NodesyncNewNodeCRITimeouts", "bb", T + 65)  # another episode
    assert add_trigger(status, later).triggers == (TRIGGER, other, later)


@pytest.mark.parametrize(
    ("state", "observed", "made", "undo"),
    [
        pytest.param(StepState.DONE, BEFORE_ABSENT, True, True, id="made-it"),
        pytest.param(StepState.DONE, BEFORE_PRESENT, False, False, id="was-cordoned-before"),
        pytest.param(StepState.RUNNING, BEFORE_ABSENT, False, True, id="may-have-made-it"),
        pytest.param(StepState.RUNNING, BEFORE_PRESENT, False, False, id="was-so-before"),
        pytest.param(StepState.PENDING, "", False, False, id="never-started"),
    ],
)
def test_a_cancellation_gives_back_what_the_record_says_it_made(
    state: StepState, observed: str, made: bool, undo: bool
) -> None:
    status = initial_status(SPEC)
    cordon = dataclasses.replace(
        status.steps[0],
        state=state,
        made_change=made,
        observed={OBSERVED_BEFORE: observed} if observed else {},
        attempts=0 if state is StepState.PENDING else 1,
    )
    status = dataclasses.replace(status, steps=(cordon, *status.steps[1:]))
    assert may_have_changed(cordon) is undo
    cancelled = cancel(status, "recovered", "the node recovered", T)
    assert cancelled.phase is Phase.CANCELLED
    assert all(s.state is not StepState.RUNNING for s in cancelled.steps)
    assert (StepKind.CORDON in to_undo(cancelled)) is undo


def test_an_escalation_replans_and_cleans_up_again_after_the_drain() -> None:
    spec = dataclasses.replace(SPEC, action=Action.CLEANUP_ORPHANS)
    status = initial_status(spec)
    status = finish_step(start_step(status, 0, T), 0, DONE, T)  # the cleanup done
    escalated = replan(status, dataclasses.replace(spec, action=Action.ROLLBACK_NODE), 2)
    assert kinds(escalated) == ["cordon", "taint", "drain", "cleanup_runtime", "verify"]
    assert all(s.state is StepState.PENDING for s in escalated.steps)
    assert escalated.observed_generation == 2
    assert escalated.steps[3].attempts == 1  # the earlier cleanup's attempt is kept
    assert current_step(escalated) == 0


STOP = StepResult(StepState.FAILED, "runtime unavailable", "cleanup_failed", stop=Phase.FAILED)


@pytest.mark.parametrize(
    ("generation", "index", "result", "phase", "steps"),
    [
        pytest.param(1, 1, DONE, Phase.SUCCEEDED, ["done", "done"], id="last-step-ends-it"),
        pytest.param(1, 0, STOP, Phase.FAILED, ["failed", "skipped"], id="a-stop-ends-it"),
        pytest.param(1, 0, DONE, Phase.RUNNING, ["done", "pending"], id="goes-on"),
        pytest.param(2, 1, DONE, Phase.RUNNING, ["pending"] * 5, id="escalated-last-step"),
        pytest.param(2, 0, STOP, Phase.RUNNING, ["pending"] * 5, id="escalated-stop"),
    ],
)
def test_an_outcome_never_ends_a_rollback_escalated_since_its_plan(
    generation: int, index: int, result: StepResult, phase: Phase, steps: list[str]
) -> None:
    """A cleanup of orphans whose step ends as the escalation to a node rollback lands (its
    spec at generation 2, its steps still the cleanup's): the outcome replans it for the node
    rollback, which is driven to its end, instead of ending it on the cleanup's plan."""
    cleanup = dataclasses.replace(SPEC, action=Action.CLEANUP_ORPHANS)
    status = initial_status(cleanup)
    if index == 1:
        status = finish_step(start_step(status, 0, T), 0, DONE, T)
    status = start_step(status, index, T)
    spec = SPEC if generation == 2 else cleanup
    rollback = NodeRollback("r", spec, status, generation=generation)
    recorded = record_outcome(rollback, index, result, T + 1)
    assert recorded is not None
    assert recorded.phase is phase
    assert [s.state.value for s in recorded.steps] == steps
    assert recorded.observed_generation == generation
    if phase is Phase.RUNNING:
        assert (recorded.reason, recorded.finished_at, recorded.action_required) == ("", None, "")
    if generation == 1:  # recorded once: a second writer finds the step ended
        again = dataclasses.replace(rollback, status=recorded)
        assert record_outcome(again, index, DONE, T) is None


def test_a_result_is_a_finished_state() -> None:
    with pytest.raises(ValueError, match="done, skipped or failed"):
        StepResult(StepState.RUNNING, "not an outcome")
