"""What the rollback hook decides about one alert (pure).

The controller and ``nodesync plan`` both decide with :func:`decide`, so that what ``plan``
shows is what the controller does with the same cluster and budget:

- ``plan``: a new rollback (it becomes a NodeRollback); the guards allowed it.
- ``join``: the node already has an active rollback that covers what the alert asks (another
  alert about a failing node, an eviction on a node being drained): the alert is added to that
  rollback's triggers. One rollback per node, whichever alert came first.
- ``escalate``: the node's active rollback is weaker than what the alert asks (it cleans the
  node's orphans; the alert asks to roll the node back): the guards judged the stronger action
  and allowed it; that rollback becomes the stronger one.
- ``refused``: the planner or a guard said no, for good (this alert episode).
- ``waits``: a deferring guard (correlated failure) said not now: the alert is decided again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from exporter.model.alerts import Alert, episode_start
from exporter.model.clusterview import ClusterView
from exporter.model.cohorts import CohortTable
from exporter.model.guards import (
    DEFERRING,
    GuardPolicy,
    GuardState,
    correlated_failure,
    evaluate,
    wave_budget,
)
from exporter.model.health import failing_since
from exporter.model.planner import plan_alert
from exporter.model.rollback import (
    STRENGTH,
    Action,
    NodeRollback,
    Phase,
    Plan,
    PodTarget,
    Refusal,
    RollbackSpec,
    StepKind,
    Trigger,
    Verdicts,
    rollback_name,
)
from exporter.model.rollback_state import initial_status

PLAN: Final = "plan"
JOIN: Final = "join"
ESCALATE: Final = "escalate"
REFUSED: Final = "refused"
WAITS: Final = "waits"

VERDICTS: Final = (PLAN, JOIN, ESCALATE, REFUSED, WAITS)


@dataclass(frozen=True, slots=True)
class Decision:
    alert: Alert
    outcome: Plan | Refusal
    verdict: str  # one of VERDICTS
    rollback: str = ""  # JOIN, ESCALATE: the name of the rollback joined or escalated

    @property
    def plan(self) -> Plan | None:
        return self.outcome if isinstance(self.outcome, Plan) else None

    @property
    def refusal(self) -> Refusal | None:
        return self.outcome if isinstance(self.outcome, Refusal) else None


def decide(
    alert: Alert,
    view: ClusterView,
    state: GuardState,
    policy: GuardPolicy,
    now: float,
    cohorts: CohortTable | None = None,
) -> Decision:
    """The decision about ``alert`` against the view, the rollbacks decided so far and the
    policy. Counting an accepted plan in ``state`` is the caller's part. ``cohorts``: the
    cohorts of the pass that decides it (exporter.model.guards.cohort_table), shared by its
    alerts; by default the view's as of ``now``."""
    outcome = plan_alert(alert, view, delete_nodes=policy.delete_nodes)
    if isinstance(outcome, Refusal):
        return Decision(alert, outcome, REFUSED)
    node_level = outcome.action is not Action.EVICT_POD
    pod = next(((s.namespace, s.pod) for s in outcome.steps if s.pod), ("", ""))
    active = state.active_on(outcome.node, node_level=node_level, pod=pod)
    stronger = active is not None and STRENGTH[outcome.action] > STRENGTH[active[1].action]
    if active is not None and not stronger:
        return Decision(alert, outcome, JOIN, active[0])
    refusal = evaluate(outcome, view, state, policy, now, cohorts)
    if refusal is not None:
        return Decision(alert, refusal, WAITS if refusal.reason in DEFERRING else REFUSED)
    if active is not None:
        return Decision(alert, outcome, ESCALATE, active[0])
    return Decision(alert, outcome, PLAN)


#: How long after a cleanup of orphans succeeded an alert of it that still fires asks for
#: another: longer than the drift alert keeps firing once its drift is gone (``keep_firing_for``
#: 5m in rules/drift.yml) and than Alertmanager takes to send its resolution (``group_interval``
#: 1m), so that only drift that came back or outlived the cleanup is cleaned again.
REPEAT_CLEANUP_AFTER: Final = 600.0


@dataclass(frozen=True, slots=True)
class Repeat:
    """A cleanup of orphans an alert episode may ask for again: the last one it had, the
    episode, which cleanup of that episode the new one would be (2 for the second), and when
    the last cleanup of the node (of any episode) finished: the alert must have been seen
    firing ``after`` that."""

    last: NodeRollback
    trigger: Trigger
    attempt: int
    since: float


def cleanups_to_repeat(rollbacks: Iterable[NodeRollback], now: float, after: float) -> list[Repeat]:
    """An alert episode is decided once, and a drift alert keeps its episode while drift
    lasts: drift that appeared during or after a cleanup would never be cleaned. So for each
    alert episode whose cleanups of orphans all ended, the last one having succeeded, on a
    node whose last cleanup finished at least ``after`` ago: that cleanup, to be repeated if
    the alert was seen firing since (the caller reads that from its journal). So a node has
    at most one cleanup of orphans per ``after`` for its episodes that keep firing."""
    cleanups: dict[tuple[str, str, float], list[NodeRollback]] = {}
    node_last: dict[str, float] = {}
    for r in rollbacks:
        if r.spec.action is not Action.CLEANUP_ORPHANS:
            continue
        finished = r.status.finished_at
        if finished is not None:
            node_last[r.spec.node] = max(finished, node_last.get(r.spec.node, finished))
        for t in r.status.triggers:
            key = (r.spec.node, t.fingerprint, episode_start(t.starts_at))
            cleanups.setdefault(key, []).append(r)
    repeats = []
    for (node, fingerprint, starts_at), of_episode in sorted(cleanups.items()):
        if any(r.active for r in of_episode):
            continue
        last = max(of_episode, key=lambda r: (r.status.finished_at or 0.0, r.created_at, r.name))
        since = node_last.get(node)
        if last.status.phase is not Phase.SUCCEEDED or since is None or now < since + after:
            continue
        trigger = next(
            t
            for t in last.status.triggers
            if t.fingerprint == fingerprint and episode_start(t.starts_at) == starts_at
        )
        asked = sum(
            1
            for r in of_episode
            if r.spec.trigger.fingerprint == fingerprint
            and episode_start(r.spec.trigger.starts_at) == starts_at
        )
        repeats.append(Repeat(last, trigger, asked + 1, since))
    return repeats


def new_rollback(
    plan: Plan,
    view: ClusterView,
    state: GuardState,
    policy: GuardPolicy,
    now: float,
    *,
    decided_by: str = "",
    attempt: int = 1,
) -> NodeRollback:
    """The NodeRollback a planned decision becomes: the plan, and what the guards saw (the
    budget before this rollback counted, the node's age and failure, the established nodes).
    ``attempt``: the how-manieth rollback of the alert episode this is (a repeated cleanup)."""
    node = view.node(plan.node)
    wave = wave_budget(view, state, policy, plan.wave)
    correlated = correlated_failure(view, policy, now)
    step = next((s for s in plan.steps if s.pod), None)
    spec = RollbackSpec(
        node=plan.node,
        node_uid=plan.node_uid,
        action=plan.action,
        trigger=Trigger(plan.alertname, plan.alert_fingerprint, plan.alert_starts_at),
        decision=Verdicts(
            decided_at=now,
            decided_by=decided_by,
            node_created_at=node.created_at if node is not None else 0.0,
            failing_since=(
                failing_since(node.health, now, policy.node_monitor_grace_period)
                if node is not None
                else None
            ),
            absolute_used=len(state.nodes_in_window(now, policy.max_rollbacks_window)),
            absolute_limit=policy.max_rollbacks,
            window_seconds=policy.max_rollbacks_window,
            wave_size=wave.size,
            wave_used=wave.used,
            wave_limit=wave.limit,
            established_nodes=correlated.established,
            established_failing=correlated.failing,
        ),
        wave=plan.wave,
        delete_node=StepKind.DELETE_NODE in {s.kind for s in plan.steps},
        pod=PodTarget(step.namespace, step.pod, step.pod_uid) if step is not None else None,
    )
    target = f"{step.namespace}/{step.pod}" if step is not None else ""
    name = rollback_name(
        plan.node,
        plan.node_uid,
        plan.action,
        plan.alert_fingerprint,
        plan.alert_starts_at,
        target,
        attempt=attempt,
    )
    return NodeRollback(name=name, spec=spec, status=initial_status(spec))
