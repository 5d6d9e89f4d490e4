"""The scenario library's episode checks: the counted outcomes against the expected ones, and
the decisions a dry run would have taken for the episodes that outlasted its clear window."""

from __future__ import annotations

from exporter.controller.journal import DecisionRecord
from nodesync_sim.demo.episodes import episode_problems, would_have


def _decision(node: str, action: str) -> DecisionRecord:
    return DecisionRecord(
        alert_key=(f"fp-{node}-{action}", 1.0),
        verdict="dry_run",
        reason="plan",
        detail="",
        rollback=f"{node}-r",
        node=node,
        action=action,
        decided_at=2.0,
    )


def test_the_expected_counts_pass_and_any_other_is_a_problem() -> None:
    expected = {"NotReady": {"dry_run_cleared": 2, "dry_run_outlasted": 2}}
    right = {"NotReady": {"dry_run_cleared": 2, "dry_run_outlasted": 2, "held": 0}}
    assert episode_problems(expected, right) == []
    # An outcome the scenario does not name must count none; a missing one counts as 0.
    wrong = {"NotReady": {"dry_run_cleared": 3, "held": 1}, "Other": {"cleared": 5}}
    assert episode_problems(expected, wrong) == [
        "NotReady: 1 episodes held (0 expected)",
        "NotReady: 3 episodes dry_run_cleared (2 expected)",
        "NotReady: 0 episodes dry_run_outlasted (2 expected)",
    ]
    assert episode_problems({}, wrong) == []  # nothing expected: nothing checked


def test_a_dry_run_decides_only_the_episodes_that_outlasted_its_window() -> None:
    ended = [
        (_decision("cleared", "rollback_node"), "dry_run_cleared"),
        (_decision("outlasted", "rollback_node"), "dry_run_outlasted"),
        (_decision("pod", "evict_pod"), "dry_run_outlasted"),
        (_decision("orphans", "cleanup_orphans"), "dry_run_outlasted"),
    ]
    assert would_have(ended, delete=False) == {
        "outlasted": "rollback",
        "pod": "evict",
        "orphans": "cleanup",
    }
    # With node deletion on, the rollback would have gone to the delete.
    assert would_have(ended, delete=True)["outlasted"] == "delete"
