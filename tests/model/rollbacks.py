"""NodeRollbacks for model tests, made from plans as the controller makes them."""

from __future__ import annotations

import dataclasses

from exporter.model.rollback import (
    NodeRollback,
    Phase,
    Plan,
    PodTarget,
    RollbackSpec,
    StepState,
    Trigger,
    Verdicts,
    rollback_name,
)
from exporter.model.rollback_state import initial_status


def node_rollback(
    plan: Plan, decided_at: float, phase: Phase = Phase.PENDING, *, attempted: bool = False
) -> NodeRollback:
    """The rollback of ``plan``, in ``phase``; ``attempted``: its first step was started."""
    pod = next((s for s in plan.steps if s.pod), None)
    spec = RollbackSpec(
        node=plan.node,
        node_uid=plan.node_uid or f"uid-{plan.node}",
        action=plan.action,
        trigger=Trigger(plan.alertname, plan.alert_fingerprint, plan.alert_starts_at),
        decision=Verdicts(decided_at=decided_at),
        wave=plan.wave,
        pod=None if pod is None else PodTarget(pod.namespace, pod.pod),
    )
    status = initial_status(spec)
    if attempted:
        first = dataclasses.replace(status.steps[0], state=StepState.DONE, attempts=1)
        status = dataclasses.replace(status, steps=(first, *status.steps[1:]))
    name = rollback_name(
        spec.node, spec.node_uid, spec.action, plan.alert_fingerprint, plan.alert_starts_at
    )
    return NodeRollback(name, spec, dataclasses.replace(status, phase=phase), uid=f"uid-{name}")
