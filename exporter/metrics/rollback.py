"""Metric families of the rollback hook's executor: what it did, what the guards refused, and
the budget and state it works with.

Counts are kept here as plain numbers and rendered at scrape time with the gauges, which the
executor reports through ``RollbackStatus`` (pure: no I/O, the caller hands the state in).
Every label takes values from a fixed set, and every combination exists from the start (0).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from exporter.metrics.cohorts import cohort_families
from exporter.metrics.holds import Held, held_family
from exporter.model.cohorts import Cohort, CohortPolicy

# ``action``: the step kinds (exporter.model.rollback.StepKind values), and ``undo`` for giving a
# node that recovered before it was drained back to the scheduler.
ACTIONS = (
    "cordon",
    "taint",
    "drain",
    "evict_pod",
    "cleanup_runtime",
    "verify",
    "delete_node",
    "undo",
)
# ``result``: the step's outcome; ``dry_run`` for a step planned in a dry run (nothing written).
RESULTS = ("done", "skipped", "failed", "dry_run")

BUDGET_ABSOLUTE = "absolute"
BUDGET_WAVE_FRACTION = "wave_fraction"


#: NodeRollback phases (exporter.model.rollback.Phase values), every one always exported.
PHASES = ("Pending", "Running", "Waiting", "Succeeded", "Failed", "Cancelled")


@dataclass(frozen=True, slots=True)
class ExecutorStatus:
    """The executor's state at scrape time. None: unknown now (the series is absent)."""

    phases: Mapping[str, int] | None  # NodeRollbacks by phase; None until they were listed
    reasons: Mapping[tuple[str, str], int]  # NodeRollbacks not succeeded, by (phase, reason)
    leader: bool
    paused: bool | None  # None until the cluster view is complete
    budget_absolute: int | None
    budget_wave_fraction: int | None  # the smallest budget left among the waves at risk
    api_write_tokens: float | None
    #: Per step kind, the earliest Unix time an active rollback's current step must have ended
    #: by (exporter.model.step_deadlines); only the step kinds some rollback is at.
    step_deadlines: Mapping[str, float] = field(default_factory=dict)
    #: The firing action alerts a guard holds back, as the leader's last pass found them
    #: (exporter.model.holds): (alertname, node, reason) each; None where it does not lead.
    held: tuple[Held, ...] | None = None
    #: The cohorts of the waves at risk (exporter.model.cohorts), judged by ``cohort_policy``.
    cohorts: Sequence[Cohort] = ()
    cohort_policy: CohortPolicy = field(default_factory=CohortPolicy)


class RollbackMetrics:
    """The counters; ``families(status)`` renders them with the gauges."""

    def __init__(self, refusal_reasons: Iterable[str], outcomes: Iterable[str]) -> None:
        self._actions = {(a, r): 0 for a in ACTIONS for r in RESULTS}
        self._refusals = dict.fromkeys(refusal_reasons, 0)
        self._outcomes = tuple(outcomes)  # exporter.model.outcomes.OUTCOMES
        self._episodes: dict[str, dict[str, int]] = {}  # alertname -> outcome -> count

    def rule(self, alertname: str) -> None:
        """An action alert of this name was decided: its every outcome is exported from now
        on, at 0 until an episode ends so."""
        self._episodes.setdefault(alertname, dict.fromkeys(self._outcomes, 0))

    def episode(self, alertname: str, outcome: str) -> None:
        """An alert episode of this rule ended so (exporter.model.outcomes)."""
        if outcome not in self._outcomes:
            raise ValueError(f"unknown outcome {outcome!r}")
        self.rule(alertname)
        self._episodes[alertname][outcome] += 1

    def episodes(self, alertname: str, outcome: str) -> int:
        return self._episodes.get(alertname, {}).get(outcome, 0)

    def action(self, action: str, result: str) -> None:
        key = (action, result)
        if key not in self._actions:
            raise ValueError(f"unknown action {action!r} or result {result!r}")
        self._actions[key] += 1

    def refusal(self, reason: str) -> None:
        if reason not in self._refusals:
            raise ValueError(f"unknown refusal reason {reason!r}")
        self._refusals[reason] += 1

    def actions(self, action: str, result: str) -> int:
        return self._actions[(action, result)]

    def refusals(self, reason: str) -> int:
        return self._refusals[reason]

    def families(self, status: ExecutorStatus) -> list[Metric]:
        actions = CounterMetricFamily(
            "nodesync_actions",
            "Rollback steps the executor finished, by step and outcome.",
            labels=["action", "result"],
        )
        for (action, result), n in sorted(self._actions.items()):
            actions.add_metric([action, result], n)
        refusals = CounterMetricFamily(
            "nodesync_guard_refusals",
            "Alerts the planner or a guard refused (or held back), by reason.",
            labels=["reason"],
        )
        for reason, n in sorted(self._refusals.items()):
            refusals.add_metric([reason], n)
        episodes = CounterMetricFamily(
            "nodesync_alert_episodes",
            "Alert episodes of action rules that ended, by alert name and outcome (remediated, "
            "failed, cleared, refused, held; in a dry run dry_run_cleared, dry_run_outlasted).",
            labels=["alertname", "outcome"],
        )
        for alertname, outcomes in sorted(self._episodes.items()):
            for outcome, n in outcomes.items():
                episodes.add_metric([alertname, outcome], n)
        leader = GaugeMetricFamily(
            "nodesync_executor_leader",
            "1 while this controller is the one driving rollbacks, else 0.",
            value=1.0 if status.leader else 0.0,
        )
        families: list[Metric] = [actions, refusals, episodes, leader]
        if status.phases is not None:
            phases = GaugeMetricFamily(
                "nodesync_rollbacks",
                "NodeRollbacks in the cluster by phase (finished ones until they are deleted).",
                labels=["phase"],
            )
            for phase in PHASES:
                phases.add_metric([phase], status.phases.get(phase, 0))
            reasons = GaugeMetricFamily(
                "nodesync_rollbacks_by_reason",
                "NodeRollbacks waiting, failed or cancelled, by phase and reason (only those "
                "that exist).",
                labels=["phase", "reason"],
            )
            for (phase, reason), n in sorted(status.reasons.items()):
                reasons.add_metric([phase, reason], n)
            deadlines = GaugeMetricFamily(
                "nodesync_rollback_step_deadline_timestamp_seconds",
                "Earliest Unix time an active rollback's current step must have ended by its "
                "timeouts, per step (only steps some rollback is at).",
                labels=["step"],
            )
            for step, deadline in sorted(status.step_deadlines.items()):
                deadlines.add_metric([step], deadline)
            families += [phases, reasons, deadlines]
        if status.held is not None:
            families.append(held_family(status.held))
        if status.paused is not None:
            families.append(
                GaugeMetricFamily(
                    "nodesync_rollbacks_paused",
                    "1 while the correlated-failure guard holds every rollback back, else 0.",
                    value=1.0 if status.paused else 0.0,
                )
            )
        budget = GaugeMetricFamily(
            "nodesync_rollback_budget_remaining",
            "Node rollbacks the blast-radius guards still allow (absolute: within the sliding "
            "window; wave_fraction: the smallest left among the waves at risk).",
            labels=["kind"],
        )
        if status.budget_absolute is not None:
            budget.add_metric([BUDGET_ABSOLUTE], status.budget_absolute)
        if status.budget_wave_fraction is not None:
            budget.add_metric([BUDGET_WAVE_FRACTION], status.budget_wave_fraction)
        families.append(budget)
        if status.api_write_tokens is not None:
            families.append(
                GaugeMetricFamily(
                    "nodesync_api_write_tokens",
                    "API write tokens left in the controller's token bucket (--apiserver.burst at "
                    "most, refilled at --apiserver.qps).",
                    value=status.api_write_tokens,
                )
            )
        families += cohort_families(status.cohorts, status.cohort_policy)
        return families
