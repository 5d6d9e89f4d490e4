"""When each active rollback's current step must have ended (exporter.model.step_deadlines),
as a table: the step, its state, the rollback's phase and pause, and the deadline."""

from __future__ import annotations

import dataclasses

import pytest

from exporter.model.rollback import (
    Action,
    NodeRollback,
    Phase,
    Plan,
    Step,
    StepKind,
    StepState,
)
from exporter.model.rollback_state import start_step
from exporter.model.step_deadlines import StepTimeouts, earliest_deadlines, step_deadline
from tests.model.rollbacks import node_rollback

T0 = 1_700_000_000.0
TIMEOUTS = StepTimeouts(eviction=1800.0, cleanup=300.0)
NODE_STEPS = (
    StepKind.CORDON,
    StepKind.TAINT,
    StepKind.DRAIN,
    StepKind.CLEANUP_RUNTIME,
    StepKind.VERIFY,
)


def _plan(node: str = "new-1", action: Action = Action.ROLLBACK_NODE) -> Plan:
    if action is Action.EVICT_POD:
        steps: tuple[Step, ...] = (Step(StepKind.EVICT_POD, node, "default", "web", "u-web"),)
    else:
        steps = tuple(Step(k, node) for k in NODE_STEPS)
    return Plan(action, node, steps, f"fp-{node}", T0 - 600, wave="w1", alertname="A")


def _at(
    index: int | None,
    started: float,
    *,
    phase: Phase = Phase.RUNNING,
    paused: bool = False,
    node: str = "new-1",
    action: Action = Action.ROLLBACK_NODE,
) -> NodeRollback:
    """A rollback whose steps before ``index`` are done and whose step ``index`` started at
    ``started`` (None: none started)."""
    rollback = node_rollback(_plan(node, action), T0 - 900, Phase.PENDING)
    status = rollback.status
    if index is not None:
        done = tuple(
            dataclasses.replace(s, state=StepState.DONE, started_at=started - 1)
            for s in status.steps[:index]
        )
        status = dataclasses.replace(status, steps=(*done, *status.steps[index:]))
        status = start_step(status, index, started)
    status = dataclasses.replace(status, phase=phase)
    spec = dataclasses.replace(rollback.spec, paused=paused)
    return dataclasses.replace(rollback, spec=spec, status=status)


@pytest.mark.parametrize(
    ("case", "rollback", "expected"),
    [
        ("a cordon is one call: its start", _at(0, T0), (StepKind.CORDON, T0)),
        ("a taint likewise", _at(1, T0 - 5), (StepKind.TAINT, T0 - 5)),
        ("a drain: its eviction timeout", _at(2, T0), (StepKind.DRAIN, T0 + 1800)),
        (
            "a drain waiting for a PodDisruptionBudget",
            _at(2, T0 - 60, phase=Phase.WAITING),
            (StepKind.DRAIN, T0 + 1740),
        ),
        ("a cleanup: its cleanup timeout", _at(3, T0), (StepKind.CLEANUP_RUNTIME, T0 + 300)),
        ("a verification is one call", _at(4, T0), (StepKind.VERIFY, T0)),
        (
            "an eviction: the eviction timeout",
            _at(0, T0, action=Action.EVICT_POD),
            (StepKind.EVICT_POD, T0 + 1800),
        ),
        ("decided, no step started", _at(None, T0, phase=Phase.PENDING), None),
        ("paused by a person", _at(2, T0, phase=Phase.WAITING, paused=True), None),
        ("finished", _at(4, T0, phase=Phase.SUCCEEDED), None),
        ("failed", _at(2, T0, phase=Phase.FAILED), None),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_the_deadline_of_the_current_step(
    case: str, rollback: NodeRollback, expected: tuple[StepKind, float] | None
) -> None:
    assert step_deadline(rollback, TIMEOUTS) == expected, case


def test_a_queued_rollback_has_no_deadline() -> None:
    """Fenced, its drain waits for a slot: not started, no timeout by design."""
    fenced = _at(1, T0 - 30)
    steps = list(fenced.status.steps)
    steps[1] = dataclasses.replace(steps[1], state=StepState.DONE)
    status = dataclasses.replace(fenced.status, phase=Phase.WAITING, steps=tuple(steps))
    assert step_deadline(dataclasses.replace(fenced, status=status), TIMEOUTS) is None


def test_the_earliest_deadline_per_step() -> None:
    rollbacks = [
        _at(2, T0, node="new-1"),
        _at(2, T0 - 100, node="new-2"),
        _at(3, T0 - 10, node="new-3"),
        _at(2, T0 - 500, node="new-4", paused=True),
        _at(None, T0, node="new-5", phase=Phase.PENDING),
    ]
    assert earliest_deadlines(rollbacks, TIMEOUTS) == {
        "drain": T0 - 100 + 1800,
        "cleanup_runtime": T0 - 10 + 300,
    }
    assert earliest_deadlines([], TIMEOUTS) == {}
