"""From one alert to a plan: which steps, on which node or pod (pure).

The alert's ``nodesync_action`` label says what to do (nodesync's alerting rules set it):

- ``rollback_node``: cordon, taint ``nodesync.io/rollback:NoSchedule``, drain, clean up the
  runtime, verify, and delete the Node when ``delete_nodes`` is set; for the ``node`` label.
- ``evict_pod``: evict the pod named by the ``namespace`` and ``pod`` labels, on ``node``.
- ``cleanup_orphans``: clean up the runtime of ``node`` and verify.
- ``none``, a missing or an unknown action: nothing (a refusal says why).

The planner only decides what an alert asks for; whether it may be done is the guards' job
(exporter.model.guards), and whether it is still needed is re-checked before every step.
"""

from __future__ import annotations

from exporter.model.alerts import FIRING, NODE_LABEL, Alert
from exporter.model.clusterview import ClusterView
from exporter.model.rollback import Action, Plan, Refusal, Step, StepKind, rollback_steps

NAMESPACE_LABEL = "namespace"
POD_LABEL = "pod"

# Refusal reasons of the planner (bounded: they are metric label values).
RESOLVED = "resolved"
NO_ACTION = "no_action"
UNKNOWN_ACTION = "unknown_action"
MISSING_LABEL = "missing_label"
UNKNOWN_NODE = "unknown_node"

REASONS = (RESOLVED, NO_ACTION, UNKNOWN_ACTION, MISSING_LABEL, UNKNOWN_NODE)

_MAX_DETAIL_VALUE = 80


def _shown(value: str) -> str:
    """A label value as it appears in a detail message, cut to a bounded length."""
    return value if len(value) <= _MAX_DETAIL_VALUE else value[: _MAX_DETAIL_VALUE - 3] + "..."


def plan_alert(alert: Alert, view: ClusterView, *, delete_nodes: bool) -> Plan | Refusal:
    """The plan for one alert, or a refusal with a bounded reason and a human detail."""
    if alert.status != FIRING:
        return Refusal(RESOLVED, f"the alert is {_shown(alert.status) or 'not firing'}")
    raw_action = alert.action
    if not raw_action:
        return Refusal(NO_ACTION, "the alert has no nodesync_action label")
    try:
        action = Action(raw_action)
    except ValueError:
        return Refusal(UNKNOWN_ACTION, f"unknown nodesync_action {_shown(raw_action)!r}")
    if action is Action.NONE:
        return Refusal(NO_ACTION, "nodesync_action is 'none': report only")
    node_name = alert.labels.get(NODE_LABEL, "")
    if not node_name:
        return Refusal(MISSING_LABEL, "the alert has no node label")
    node = view.node(node_name)
    if node is None:
        return Refusal(UNKNOWN_NODE, f"node {_shown(node_name)!r} does not exist")
    namespace = pod = ""
    if action is Action.EVICT_POD:
        namespace = alert.labels.get(NAMESPACE_LABEL, "")
        pod = alert.labels.get(POD_LABEL, "")
        if not namespace or not pod:
            return Refusal(MISSING_LABEL, "an evict_pod alert needs namespace and pod labels")
    kinds = rollback_steps(action, delete_node=delete_nodes)
    return Plan(
        action=action,
        node=node_name,
        steps=tuple(
            Step(kind=k, node=node_name, namespace=namespace, pod=pod)
            if k is StepKind.EVICT_POD
            else Step(kind=k, node=node_name)
            for k in kinds
        ),
        alert_fingerprint=alert.fingerprint,
        alert_starts_at=alert.starts_at,
        wave=node.wave_id,
        node_uid=node.uid,
        alertname=alert.labels.get("alertname", ""),
    )
