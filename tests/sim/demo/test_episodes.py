"""The scenario library's episode checks: the counted outcomes against the expected ones, the
decisions a dry run would have taken for the episodes that outlasted its clear window, and the
story told when the counts are not the expected ones."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from exporter.controller.journal import DecisionRecord, Journal
from nodesync_sim.demo.chain import Chain
from nodesync_sim.demo.episodes import episode_problems, episode_story, would_have
from tests.controller.alert_builders import alert, payload


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


def _node(ready: str) -> dict[str, Any]:
    return {"status": {"conditions": [{"type": "Ready", "status": ready}]}}


async def test_the_story_tells_each_link_of_an_episode_that_was_not_counted(
    tmp_path: Path,
) -> None:
    started = 1_000.0
    path = tmp_path / "journal.db"
    journal = await Journal.open(str(path))
    try:
        cleared = alert("c1", node="wave-1-001", alertname="NotReady", starts_at=started + 5)
        stuck = alert("s1", node="wave-1-002", alertname="NotReady", starts_at=started + 5)
        other = alert("o1", node="wave-1-003", alertname="Other", starts_at=started + 5)
        unseen = alert("u1", node="wave-1-004", alertname="NotReady", starts_at=started + 5)
        await journal.record(payload(cleared, stuck, other, unseen), received_at=started + 7)
        for a in (cleared, stuck, other, unseen):
            decision = _decision(a.labels["node"], "rollback_node")
            await journal.save_decision(replace(decision, alert_key=a.key, decided_at=started + 7))
        resolved = alert(
            "c1", node="wave-1-001", alertname="NotReady", starts_at=started + 5, status="resolved"
        )
        await journal.record(payload(resolved), received_at=started + 15)
        await journal.write_outcome(cleared.key, "dry_run_cleared")
    finally:
        await journal.close()
    history = {
        "wave-1-001": [
            (started, "ADDED", _node("False")),
            (started + 10.5, "MODIFIED", _node("True")),
        ],
        "wave-1-002": [
            (started, "ADDED", _node("False")),
            (started + 9, "MODIFIED", _node("False")),
        ],
    }
    dropped = (
        "ts=2026-12-07T01:02:03Z caller=notifier.go:530 level=error component=notifier "
        'count=2 msg="Error sending alert" err="connection reset by peer"'
    )
    chain = SimpleNamespace(
        sim=SimpleNamespace(clock=SimpleNamespace(started_at=started)),
        journal_path=path,
        node_history=SimpleNamespace(states=history),
        prom=_Service(
            "ts=2026-12-07T01:02:00Z level=info msg=ready\n" + dropped,
            [
                {"labels": {"alertname": "NotReady", "node": "wave-1-002"}, "state": "firing"},
                {"labels": {"alertname": "Other", "node": "wave-1-003"}, "state": "firing"},
            ],
        ),
        alertmanagers=[_Service("ts=2026-12-07T01:02:00Z level=info msg=Listening")],
    )
    story = await episode_story(cast(Chain, chain), ["NotReady"])
    assert story == [
        "wave-1-001 NotReady: decided +7.0 s (dry_run), resolved +15.0 s, outcome "
        "dry_run_cleared; Ready +10.5 s",
        "wave-1-002 NotReady: decided +7.0 s (dry_run), firing, outcome -; never Ready again",
        "wave-1-004 NotReady: decided +7.0 s (dry_run), firing, outcome -; its Node never seen",
        "Prometheus' alerts now: wave-1-002 firing",
        f"Prometheus: {dropped}",
    ]


class _Service:
    """A Prometheus or an Alertmanager as the story reads them: its log, its active alerts."""

    def __init__(self, log: str, alerts: list[dict[str, Any]] | None = None) -> None:
        self._log = log
        self._alerts = alerts or []

    def log_tail(self, lines: int) -> str:
        return "\n".join(self._log.splitlines()[-lines:])

    async def alerts_async(self) -> list[dict[str, Any]]:
        return self._alerts
