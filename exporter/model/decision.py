"""What the rollback hook decides about one alert: a plan to run, a refusal, or a wait (pure).

The controller's executor and ``nodesync plan`` both decide with :func:`decide`, so that what
``plan`` shows is what the controller does with the same cluster and budget. The planner says
what the alert asks for (exporter.model.planner); the guards whether it may be done now
(exporter.model.guards). A refusal for a deferring reason (correlated failure, concurrency) is
a wait: the alert is decided again later.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from exporter.model.alerts import Alert
from exporter.model.clusterview import ClusterView
from exporter.model.guards import DEFERRING, GuardPolicy, GuardState, evaluate
from exporter.model.planner import plan_alert
from exporter.model.rollback import Plan, Refusal

PLAN: Final = "plan"
REFUSED: Final = "refused"
WAITS: Final = "waits"


@dataclass(frozen=True, slots=True)
class Decision:
    alert: Alert
    outcome: Plan | Refusal
    verdict: str  # PLAN, REFUSED or WAITS

    @property
    def plan(self) -> Plan | None:
        return self.outcome if isinstance(self.outcome, Plan) else None

    @property
    def refusal(self) -> Refusal | None:
        return self.outcome if isinstance(self.outcome, Refusal) else None


def decide(
    alert: Alert, view: ClusterView, state: GuardState, policy: GuardPolicy, now: float
) -> Decision:
    """The decision about ``alert`` against the view, the rollbacks accepted so far and the
    policy. Accepting a plan (counting it in ``state``) is the caller's part."""
    outcome = plan_alert(alert, view, delete_nodes=policy.delete_nodes)
    if isinstance(outcome, Refusal):
        return Decision(alert, outcome, REFUSED)
    refusal = evaluate(outcome, view, state, policy, now)
    if refusal is None:
        return Decision(alert, outcome, PLAN)
    return Decision(alert, refusal, WAITS if refusal.reason in DEFERRING else REFUSED)
