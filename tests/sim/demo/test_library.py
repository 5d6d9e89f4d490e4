"""The scenario library's scoring: precision and recall of the decisions taken against the
expected ones, the report lines, and which scenarios a run takes."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from nodesync_sim.demo.chain import CONTROLLER_USER, Chain
from nodesync_sim.demo.library import (
    Outcome,
    bucket_excess,
    library,
    report,
    timing_problems,
    total,
    write_budget_problems,
)
from nodesync_sim.fake.scaleout.audit import WriteAudit
from nodesync_sim.fake.scaleout.scenario import Expectation, ScenarioError

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


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


def test_a_first_step_too_late_or_before_its_hold_ended_is_a_problem() -> None:
    steps = {"early": 40.0, "held": 104.0, "late": 130.0}
    both = Expectation(within_seconds=125, not_before_seconds=100)
    assert timing_problems(both, steps) == [
        "early: first step 40.0 s after its fault (not before 100 s expected)",
        "late: first step 130.0 s after its fault (at most 125 s expected)",
    ]
    assert timing_problems(Expectation(), steps) == []  # neither bound: nothing checked
    assert timing_problems(Expectation(not_before_seconds=100), {"held": 104.0}) == []


def test_writes_within_the_token_bucket_have_no_excess() -> None:
    # qps 2, burst 3: a burst of three at once, then one every half second.
    paced = [0.0, 0.0, 0.0, 0.5, 1.0, 1.5, 2.0]
    assert bucket_excess(paced, qps=2.0, burst=3) == 0.0
    # After a quiet stretch the bucket is full again (capped at the burst, not more).
    assert bucket_excess([*paced, 10.0, 10.0, 10.0], qps=2.0, burst=3) == 0.0
    assert bucket_excess([], qps=2.0, burst=3) == 0.0


def test_writes_past_the_token_bucket_show_by_how_many() -> None:
    assert bucket_excess([0.0] * 5, qps=2.0, burst=3) == pytest.approx(2.0)
    # The refill is capped: a long quiet stretch buys a burst, not a backlog.
    assert bucket_excess([0.0, 100.0, 100.0, 100.0, 100.0], qps=2.0, burst=3) == pytest.approx(1.0)
    # Paced too fast after the burst: 4 a second where 2 are allowed.
    fast = [0.0, 0.0, 0.0] + [0.25 * i for i in range(1, 9)]
    assert bucket_excess(fast, qps=2.0, burst=3) == pytest.approx(4.0)


def test_a_controller_started_again_has_a_full_bucket() -> None:
    # Burst spent at 0; the process starts again at 1.0 with a full bucket of 3.
    writes = [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    assert bucket_excess(writes, qps=0.5, burst=3) == pytest.approx(2.5)
    assert bucket_excess(writes, qps=0.5, burst=3, refills=[1.0]) == 0.0


def _chain_that_wrote(times: list[float]) -> Chain:
    audit = WriteAudit(clock=iter(times).__next__)
    for n, _ in enumerate(times):
        audit(CONTROLLER_USER, "patch", "nodes", "", "", f"node-{n}")
    settings = SimpleNamespace(api_qps=5.0, api_burst=10)
    return cast(
        Chain, SimpleNamespace(audit=audit, executor_settings=settings, controller_restarts=[])
    )


def test_writes_that_arrive_bunched_by_a_busy_loop_are_within_the_budget() -> None:
    # qps 5, burst 10: the burst, then one write each 0.2 s. A held-back loop delivers the
    # burst 0.4 s late, together with the two writes whose tokens came at 0.2 and 0.4 s: as
    # they arrived, 12 writes at once where the bucket holds 10.
    paced = [0.0] * 10 + [0.2 * i for i in range(1, 11)]
    bunched = [0.4] * 12 + paced[12:]
    assert bucket_excess(bunched, qps=5.0, burst=10) == pytest.approx(2.0)
    assert write_budget_problems(_chain_that_wrote(bunched)) == []


def test_writes_that_bypass_the_limiter_are_a_problem() -> None:
    [problem] = write_budget_problems(_chain_that_wrote([0.0] * 20))
    assert problem == "the controller's 20 writes went 10.0 past its token bucket (qps 5, burst 10)"


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
        "join-slo",
        "readiness-hold",
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
