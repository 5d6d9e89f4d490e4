"""The executor's metric families as tables, and docs/metrics.md's "Controller: rollback"
section against them: the same names, every label value listed, accepted by promtool."""

from __future__ import annotations

import re

import pytest

from exporter.controller.executor import OTHER_REASON, REFUSAL_REASONS, ROLLBACK_REASONS
from exporter.metrics.rollback import ACTIONS, PHASES, RESULTS, ExecutorStatus, RollbackMetrics
from exporter.model import guards, planner
from exporter.model.holds import HOLD_REASONS
from exporter.model.outcomes import OUTCOMES
from exporter.model.rollback import Phase, StepKind, StepState
from tests.metrics.exposition import labels, render, series
from tests.metrics.promtool import check_metrics
from tests.support.docs import (
    METRICS_DOC,
    documented_metric_names,
    exposed_metric_names,
    metric_rows,
    section,
)

SECTION = "Controller: rollback"

HELD = (
    ("NodesyncNewNodeNotReady", "new-7", "budget"),
    ("NodesyncNewNodePodPending", "new-8", "exemption"),
    ("NodesyncNewNodePodPending", "new-8", "exemption"),
    ("NodesyncNewNodeNotReady", "new-9", "dry_run"),
)

FULL = ExecutorStatus(
    phases={"Pending": 1, "Running": 2, "Waiting": 1, "Succeeded": 5, "Failed": 1},
    reasons={("Waiting", "waiting_for_agent"): 1, ("Failed", "pdb_blocked"): 1},
    leader=True,
    paused=True,
    budget_absolute=7,
    budget_wave_fraction=1,
    api_write_tokens=4.5,
    step_deadlines={"drain": 1_700_001_800.0, "cleanup_runtime": 1_700_000_300.0},
    held=HELD,
)


def exposition(status: ExecutorStatus = FULL) -> str:
    metrics = RollbackMetrics(REFUSAL_REASONS, OUTCOMES)
    metrics.action("cordon", "done")
    metrics.action("cordon", "done")
    metrics.action("drain", "failed")
    metrics.refusal("blast_radius_fraction")
    metrics.episode("NodesyncNewNodeNotReady", "remediated")
    metrics.episode("NodesyncNewNodeNotReady", "remediated")
    metrics.episode("NodesyncNewNodePodPending", "dry_run_cleared")
    return render(metrics.families(status))


def test_counts_and_gauges() -> None:
    text = exposition()
    actions = series(text, "nodesync_actions_total")
    assert len(actions) == len(ACTIONS) * len(RESULTS)
    assert actions[labels(action="cordon", result="done")] == 2
    assert actions[labels(action="drain", result="failed")] == 1
    assert sum(actions.values()) == 3
    refusals = series(text, "nodesync_guard_refusals_total")
    assert set(refusals) == {labels(reason=r) for r in REFUSAL_REASONS}
    assert refusals[labels(reason="blast_radius_fraction")] == 1
    assert sum(refusals.values()) == 1
    assert series(text, "nodesync_rollbacks") == {
        labels(phase=p): n
        for p, n in {"Pending": 1, "Running": 2, "Waiting": 1, "Succeeded": 5, "Failed": 1,
                     "Cancelled": 0}.items()
    }  # fmt: skip
    assert series(text, "nodesync_rollbacks_by_reason") == {
        labels(phase="Waiting", reason="waiting_for_agent"): 1,
        labels(phase="Failed", reason="pdb_blocked"): 1,
    }
    assert series(text, "nodesync_executor_leader") == {labels(): 1}
    assert series(text, "nodesync_rollbacks_paused") == {labels(): 1}
    assert series(text, "nodesync_rollback_budget_remaining") == {
        labels(kind="absolute"): 7,
        labels(kind="wave_fraction"): 1,
    }
    assert series(text, "nodesync_api_write_tokens") == {labels(): 4.5}
    # One series per alert name, node and reason while held; two pods' alerts on one node: 2.
    assert series(text, "nodesync_alert_held") == {
        labels(alertname="NodesyncNewNodeNotReady", node="new-7", reason="budget"): 1,
        labels(alertname="NodesyncNewNodePodPending", node="new-8", reason="exemption"): 2,
        labels(alertname="NodesyncNewNodeNotReady", node="new-9", reason="dry_run"): 1,
    }
    assert series(text, "nodesync_rollback_step_deadline_timestamp_seconds") == {
        labels(step="drain"): 1_700_001_800.0,
        labels(step="cleanup_runtime"): 1_700_000_300.0,
    }
    # Every outcome of each alert name that ended an episode, from its first end on.
    episodes = series(text, "nodesync_alert_episodes_total")
    assert len(episodes) == 2 * len(OUTCOMES)
    assert episodes[labels(alertname="NodesyncNewNodeNotReady", outcome="remediated")] == 2
    assert episodes[labels(alertname="NodesyncNewNodePodPending", outcome="dry_run_cleared")] == 1
    assert sum(episodes.values()) == 3


def test_unknown_state_leaves_series_out() -> None:
    text = exposition(
        ExecutorStatus(
            phases=None,
            reasons={},
            leader=False,
            paused=None,
            budget_absolute=None,
            budget_wave_fraction=None,
            api_write_tokens=None,
        )
    )
    assert series(text, "nodesync_executor_leader") == {labels(): 0}
    for name in (
        "nodesync_rollbacks",
        "nodesync_rollbacks_paused",
        "nodesync_rollback_budget_remaining",
        "nodesync_rollback_step_deadline_timestamp_seconds",
        "nodesync_alert_held",
        "nodesync_api_write_tokens",
    ):
        assert series(text, name) == {}


def test_label_values_are_the_code_s() -> None:
    assert [k.value for k in StepKind] == list(ACTIONS[:-1])
    unfinished = (StepState.PENDING, StepState.RUNNING)
    assert [s.value for s in StepState if s not in unfinished] == list(RESULTS[:-1])
    assert [p.value for p in Phase] == list(PHASES)
    assert set(REFUSAL_REASONS) == {*planner.REASONS, *guards.REASONS}
    metrics = RollbackMetrics(REFUSAL_REASONS, OUTCOMES)
    with pytest.raises(ValueError, match="unknown"):
        metrics.action("reboot", "done")
    with pytest.raises(ValueError, match="unknown"):
        metrics.refusal("because")
    with pytest.raises(ValueError, match="unknown"):
        metrics.episode("NodesyncNewNodeNotReady", "fixed")


def section_text() -> str:
    return section(METRICS_DOC.read_text(), SECTION)


def test_the_section_names_exactly_the_rollback_metrics() -> None:
    documented = documented_metric_names(METRICS_DOC.read_text(), SECTION)
    exposed = exposed_metric_names(exposition())
    assert sorted(exposed - documented) == [], "exposed but not documented"
    assert sorted(documented - exposed) == [], "documented but not exposed"


def test_the_section_lists_every_label_value() -> None:
    rows = metric_rows(section_text())
    values = re.findall(r"`([a-z_]+)`", rows["nodesync_actions_total"])
    assert values == ["action", *ACTIONS, "result", *RESULTS]
    values = re.findall(r"`([a-z_]+)`", rows["nodesync_guard_refusals_total"])
    assert values == ["reason", *REFUSAL_REASONS]
    values = re.findall(r"`([a-z_]+)`", rows["nodesync_rollback_budget_remaining"])
    assert values == ["kind", "absolute", "wave_fraction"]
    values = re.findall(r"`([a-z_]+)`", rows["nodesync_alert_held"])
    assert values == ["alertname", "node", "reason", *HOLD_REASONS]
    values = re.findall(r"`([a-z_]+)`", rows["nodesync_alert_episodes_total"])
    assert values == ["alertname", "outcome", *OUTCOMES]
    values = re.findall(r"`([A-Za-z_]+)`", rows["nodesync_rollbacks"])
    assert values == ["phase", *PHASES]
    values = re.findall(r"`([A-Za-z_]+)`", rows["nodesync_rollbacks_by_reason"])
    assert values == ["phase", "reason", *ROLLBACK_REASONS, OTHER_REASON]


@pytest.mark.prometheus
def test_promtool_accepts_the_exposition() -> None:
    check_metrics(exposition())
