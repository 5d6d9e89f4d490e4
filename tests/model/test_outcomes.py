"""How an alert episode ended (exporter.model.outcomes), as a table: the episode as the journal
and its NodeRollback tell it -> its outcome, or None while it goes on."""

from __future__ import annotations

from dataclasses import replace

import pytest

from exporter.controller.steps import ALERT_RESOLVED, RECOVERED
from exporter.model import guards, planner
from exporter.model.outcomes import (
    CLEARED,
    CLEARING_REASONS,
    DRY_RUN_CLEARED,
    DRY_RUN_OUTLASTED,
    FAILED,
    HELD,
    OUTCOME_REFUSED,
    OUTCOMES,
    REMEDIATED,
    Episode,
    outcome,
)
from exporter.model.rollback import Phase

T = 600.0  # clear_within
DECIDED = 1000.0
RESOLVED_AT = DECIDED + 120

PLANNED = Episode("rollback_node", DECIDED, RESOLVED_AT, "plan", phase=Phase.SUCCEEDED)


def ep(**changes: object) -> Episode:
    return replace(PLANNED, **changes)  # type: ignore[arg-type]


CASES = [
    # (what, episode, outcome)
    ("a rollback ran and succeeded", ep(), REMEDIATED),
    ("a joined rollback succeeded", ep(verdict="join"), REMEDIATED),
    ("an escalated rollback succeeded", ep(verdict="escalate"), REMEDIATED),
    ("its rollback failed", ep(phase=Phase.FAILED, rollback_reason="cleanup_failed"), FAILED),
    (
        "its rollback gave the node back: it recovered",
        ep(phase=Phase.CANCELLED, rollback_reason=RECOVERED),
        CLEARED,
    ),
    (
        "its rollback was cancelled before its first step: its alerts resolved",
        ep(phase=Phase.CANCELLED, rollback_reason=ALERT_RESOLVED),
        CLEARED,
    ),
    (
        "its rollback stopped: the node was labelled protected meanwhile",
        ep(phase=Phase.CANCELLED, rollback_reason=guards.PROTECTED),
        HELD,
    ),
    (
        "its rollback stopped for another reason",
        ep(phase=Phase.CANCELLED, rollback_reason="api_error"),
        FAILED,
    ),
    ("resolved, its rollback still running", ep(phase=Phase.RUNNING), None),
    ("resolved, its rollback still pending", ep(phase=Phase.PENDING), None),
    ("resolved, its rollback waiting", ep(phase=Phase.WAITING), None),
    ("its rollback is no longer found", ep(phase=None), None),
    ("still firing", ep(resolved_at=None), None),
    (
        "resolved before it was decided",
        ep(verdict="refused", reason=planner.RESOLVED, phase=None),
        CLEARED,
    ),
    (
        "resolved while the correlated-failure guard held it back",
        ep(
            verdict="refused",
            reason=planner.RESOLVED,
            waited=guards.CORRELATED_FAILURE,
            phase=None,
        ),
        HELD,
    ),
    (
        "refused by the planner: unknown node",
        ep(verdict="refused", reason=planner.UNKNOWN_NODE, phase=None),
        OUTCOME_REFUSED,
    ),
    (
        "refused by the planner: a label missing",
        ep(verdict="refused", reason=planner.MISSING_LABEL, phase=None),
        OUTCOME_REFUSED,
    ),
    (
        "refused by the blast radius",
        ep(verdict="refused", reason=guards.BLAST_RADIUS_ABSOLUTE, phase=None),
        HELD,
    ),
    (
        "refused: the node joined before the scale-out window",
        ep(verdict="refused", reason=guards.SCALE_OUT_WINDOW, phase=None),
        HELD,
    ),
    (
        "refused: a control-plane node",
        ep(verdict="refused", reason=guards.CONTROL_PLANE, phase=None),
        HELD,
    ),
    (
        "dry run: cleared by itself within T",
        ep(verdict="dry_run", phase=None, resolved_at=DECIDED + T),
        DRY_RUN_CLEARED,
    ),
    (
        "dry run: lasted longer than T",
        ep(verdict="dry_run", phase=None, resolved_at=DECIDED + T + 1),
        DRY_RUN_OUTLASTED,
    ),
    ("dry run: still firing", ep(verdict="dry_run", phase=None, resolved_at=None), None),
    ("an alert with no action", ep(action=""), None),
    ("an alert whose action is none", ep(action="none"), None),
]


@pytest.mark.parametrize(("what", "episode", "expected"), CASES, ids=[c[0] for c in CASES])
def test_an_episode_ends_as(what: str, episode: Episode, expected: str | None) -> None:
    assert outcome(episode, T) == expected


def test_every_outcome_is_reached_by_some_episode() -> None:
    assert {c[2] for c in CASES} - {None} == set(OUTCOMES)


def test_the_clearing_reasons_are_the_executors() -> None:
    """The model names the executor's reasons without importing the controller."""
    assert {RECOVERED, ALERT_RESOLVED} == CLEARING_REASONS
