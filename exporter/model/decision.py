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

from dataclasses import dataclass
from typing import Final

from exporter.model.alerts import Alert
from exporter.model.clusterview import ClusterView
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
    alert: Alert, view: ClusterView, state: GuardState, policy: GuardPolicy, now: float
) -> Decision:
    """The decision about ``alert`` against the view, the rollbacks decided so far and the
    policy. Counting an accepted plan in ``state`` is the caller's part."""
    outcome = plan_alert(alert, view, delete_nodes=policy.delete_nodes)
    if isinstance(outcome, Refusal):
        return Decision(alert, outcome, REFUSED)
    node_level = outcome.action is not Action.EVICT_POD
    pod = next(((s.namespace, s.pod) for s in outcome.steps if s.pod), ("", ""))
    active = state.active_on(outcome.node, node_level=node_level, pod=pod)
    stronger = active is not None and STRENGTH[outcome.action] > STRENGTH[active[1].action]
    if active is not None and not stronger:
        return Decision(alert, outcome, JOIN, active[0])
    refusal = evaluate(outcome, view, state, policy, now)
    if refusal is not None:
        return Decision(alert, refusal, WAITS if refusal.reason in DEFERRING else REFUSED)
    if active is not None:
        return Decision(alert, outcome, ESCALATE, active[0])
    return Decision(alert, outcome, PLAN)


def new_rollback(
    plan: Plan,
    view: ClusterView,
    state: GuardState,
    policy: GuardPolicy,
    now: float,
    *,
    decided_by: str = "",
) -> NodeRollback:
    """The NodeRollback a planned decision becomes: the plan, and what the guards saw (the
    budget before this rollback counted, the node's age and failure, the established nodes)."""
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
    )
    return NodeRollback(name=name, spec=spec, status=initial_status(spec))
