"""From one alert to a plan: which steps, on which node or pod (pure).

The alert's ``nodesync_action`` label says what to do (nodesync's alerting rules set it):

- ``rollback_node``: cordon, taint ``nodesync.io/rollback:NoSchedule``, drain, clean up the
  runtime, verify, and delete the Node when ``delete_nodes`` is set; for the ``node`` label.
- ``evict_pod``: evict the pod named by the ``namespace`` and ``pod`` labels, on ``node``.
- ``cleanup_orphans``: clean up the runtime of ``node`` and verify.
- ``none``, a missing or an unknown action: nothing (a refusal says why).

The label values that become API names are checked first: a ``node`` that is not a DNS-1123
subdomain, a ``namespace`` that is not a DNS-1123 label, a ``pod`` that is not a DNS-1123
subdomain is refused ``invalid_name``, and never looked up.

The planner only decides what an alert asks for; whether it may be done is the guards' job
(exporter.model.guards), and whether it is still needed is re-checked before every step.
"""

from __future__ import annotations

from exporter.model.alerts import FIRING, NODE_LABEL, Alert
from exporter.model.clusterview import ClusterView
from exporter.model.names import is_dns1123_label, is_dns1123_subdomain
from exporter.model.names import shown as _shown
from exporter.model.rollback import Action, Plan, Refusal, Step, StepKind, rollback_steps

NAMESPACE_LABEL = "namespace"
POD_LABEL = "pod"

# Refusal reasons of the planner (bounded: they are metric label values).
RESOLVED = "resolved"
NO_ACTION = "no_action"
UNKNOWN_ACTION = "unknown_action"
MISSING_LABEL = "missing_label"
UNKNOWN_NODE = "unknown_node"
INVALID_NAME = "invalid_name"

REASONS = (RESOLVED, NO_ACTION, UNKNOWN_ACTION, MISSING_LABEL, INVALID_NAME, UNKNOWN_NODE)


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
    if not is_dns1123_subdomain(node_name):
        return Refusal(
            INVALID_NAME,
            f"node label {_shown(node_name)!r} is not a node name (a DNS-1123 subdomain of at "
            "most 253 characters)",
        )
    namespace = pod = ""
    if action is Action.EVICT_POD:
        namespace = alert.labels.get(NAMESPACE_LABEL, "")
        pod = alert.labels.get(POD_LABEL, "")
        if not namespace or not pod:
            return Refusal(MISSING_LABEL, "an evict_pod alert needs namespace and pod labels")
        if not is_dns1123_label(namespace):
            return Refusal(
                INVALID_NAME,
                f"namespace label {_shown(namespace)!r} is not a namespace name (a DNS-1123 "
                "label of at most 63 characters)",
            )
        if not is_dns1123_subdomain(pod):
            return Refusal(
                INVALID_NAME,
                f"pod label {_shown(pod)!r} is not a pod name (a DNS-1123 subdomain of at most "
                "253 characters)",
            )
    node = view.node(node_name)
    if node is None:
        return Refusal(UNKNOWN_NODE, f"node {_shown(node_name)!r} does not exist")
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
