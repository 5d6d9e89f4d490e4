"""The scenario library's scoring: precision and recall of the decisions taken against the
expected ones, the report lines, and which scenarios a run takes."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodesync_sim.library import Outcome, library, report, total
from nodesync_sim.scaleout.scenario import ScenarioError

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _outcome(expected: set[tuple[str, str]], observed: set[tuple[str, str]]) -> Outcome:
    steps = {n: 4.0 + i for i, (n, _) in enumerate(sorted(expected & observed))}
    return Outcome("s", frozenset(expected), frozenset(observed), steps)


def test_precision_counts_wrong_actions_and_recall_missed_ones() -> None:
    right = _outcome({("a", "delete"), ("b", "evict")}, {("a", "delete"), ("b", "evict")})
    assert (right.precision, right.recall, right.passed) == (1.0, 1.0, True)
    wrong = _outcome({("a", "delete")}, {("a", "delete"), ("c", "rollback")})
    assert (wrong.precision, wrong.recall, wrong.passed) == (0.5, 1.0, False)
    missed = _outcome({("a", "delete"), ("b", "evict")}, {("a", "delete")})
    assert (missed.precision, missed.recall) == (1.0, 0.5)
    # A rollback that stopped short of the expected delete is wrong and missed at once.
    short = _outcome({("a", "delete")}, {("a", "rollback")})
    assert (short.precision, short.recall) == (0.0, 0.0)
    nothing = _outcome(set(), set())
    assert (nothing.precision, nothing.recall, nothing.passed) == (1.0, 1.0, True)


def test_a_missed_pause_or_deadline_fails_the_scenario() -> None:
    outcome = Outcome("s", frozenset(), frozenset(), {}, ("rollbacks were never paused",))
    assert outcome.precision == outcome.recall == 1.0
    assert not outcome.passed
    assert "rollbacks were never paused" in report(outcome)


def test_report_and_total_name_every_figure() -> None:
    outcomes = [
        _outcome({("a", "delete"), ("b", "delete")}, {("a", "delete"), ("b", "delete")}),
        _outcome({("a", "delete")}, {("a", "delete"), ("c", "evict")}),
    ]
    line = report(outcomes[1])
    assert line.startswith("s: precision 0.50 recall 1.00 (1 of 1 expected actions, 1 unexpected)")
    assert "fault to first step 4.0 s" in line
    assert "\n  unexpected evict of c" in line
    assert total(outcomes) == (
        "total: 1 of 2 scenarios as expected; precision 0.75 recall 1.00 (3 of 3 expected "
        "actions, 1 unexpected); fault to first step 4.0-5.0 s"
    )


def test_the_library_has_every_kind_and_only_picks_by_name() -> None:
    every = library(SCENARIOS, [])
    names = {s.name for s in every}
    assert len(names) >= 12
    assert {
        "failed-join",
        "control-plane-blip",
        "slow-join",
        "memory-pressure",
        "oom-loop",
        "orphan-sandboxes",
        "foreign-owned",
        "pdb-blocks-then-allows",
        "frozen-runtime",
        "two-waves",
        "wave-200",
        "half-scrapes",
    } <= names
    for scenario in every:  # time compressed only through the documented overrides
        assert scenario.expect is not None
        assert scenario.expect.run_seconds <= 180, scenario.name  # the library stays runnable
    assert [s.name for s in library(SCENARIOS, ["oom-loop", "failed-join"])] == [
        "oom-loop",
        "failed-join",
    ]
    with pytest.raises(ScenarioError, match="--only: no scenario named 'nope'"):
        library(SCENARIOS, ["nope"])
