"""What the acceptance tests send a controller and where they stop it
(tests/support/controllers.py): Alertmanager's alerts and payloads, and the predicates of
the proxied requests a :class:`~tests.support.kubeproxy.KubeProxy` gates."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from exporter.model.rfc3339 import format_time
from tests.support.acceptance import CLEANUP_REQUEST, NODEROLLBACKS, ROLLBACK_TAINT
from tests.support.kubeproxy import Predicate, ProxiedRequest

#: When the test alerts began firing (one value for the session: every re-send is one episode).
STARTED = float(int(time.time()) - 60)


def alert(node: str, action: str = "rollback_node", **labels: str) -> dict[str, Any]:
    """One firing alert as Alertmanager sends it; its fingerprint derives from its labels."""
    all_labels = {
        "alertname": "NodesyncNewNodeNotReady",
        "node": node,
        "nodesync_action": action,
        **labels,
    }
    fingerprint = hashlib.sha256(json.dumps(all_labels, sort_keys=True).encode()).hexdigest()[:16]
    return {
        "status": "firing",
        "labels": all_labels,
        "annotations": {},
        "startsAt": format_time(STARTED),
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "",
        "fingerprint": fingerprint,
    }


def payload(*alerts: dict[str, Any]) -> dict[str, Any]:
    return {
        "version": "4",
        "groupKey": '{}:{alertname="NodesyncNewNodeNotReady"}',
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "nodesync",
        "groupLabels": {"alertname": "NodesyncNewNodeNotReady"},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager.invalid",
        "alerts": list(alerts),
    }


# ---------------------------------------------------------------- where to stop a controller


def _spec(request: ProxiedRequest) -> dict[str, Any]:
    body = request.body if isinstance(request.body, dict) else {}
    spec = body.get("spec")
    return spec if isinstance(spec, dict) else {}


def cordon_of(node: str) -> Predicate:
    """The cordon patch of ``node``."""
    return lambda r: (
        r.method == "PATCH"
        and r.path == f"/api/v1/nodes/{node}"
        and _spec(r).get("unschedulable") is True
    )


def uncordon_of(node: str) -> Predicate:
    """The patch that lifts the cordon of ``node``."""
    return lambda r: (
        r.method == "PATCH"
        and r.path == f"/api/v1/nodes/{node}"
        and "unschedulable" in _spec(r)
        and _spec(r)["unschedulable"] is not True
    )


def taint_of(node: str) -> Predicate:
    """The patch that adds nodesync's taint to ``node``."""
    return lambda r: (
        r.method == "PATCH"
        and r.path == f"/api/v1/nodes/{node}"
        and ROLLBACK_TAINT in {t.get("key") for t in _spec(r).get("taints") or ()}
    )


def eviction_in(namespace: str) -> Predicate:
    """The first eviction of a pod in ``namespace``."""
    prefix = f"/api/v1/namespaces/{namespace}/pods/"
    return lambda r: (
        r.method == "POST" and r.path.startswith(prefix) and r.path.endswith("/eviction")
    )


def cleanup_request_on(node: str) -> Predicate:
    """The patch that asks ``node``'s agent for a cleanup."""

    def match(r: ProxiedRequest) -> bool:
        body = r.body if isinstance(r.body, dict) else {}
        annotations = (body.get("metadata") or {}).get("annotations") or {}
        return (
            r.method == "PATCH"
            and r.path == f"/api/v1/nodes/{node}"
            and (CLEANUP_REQUEST in annotations)
        )

    return match


def delete_of(node: str) -> Predicate:
    return lambda r: r.method == "DELETE" and r.path == f"/api/v1/nodes/{node}"


def rollback_created() -> Predicate:
    """The first NodeRollback create."""
    return lambda r: r.method == "POST" and r.path == NODEROLLBACKS


def step_recorded(step: str, state: str) -> Predicate:
    """A NodeRollback status write that records ``step`` in ``state``."""

    def match(r: ProxiedRequest) -> bool:
        body = r.body if isinstance(r.body, dict) else {}
        steps = (body.get("status") or {}).get("steps") or ()
        return (
            r.method == "PUT"
            and r.path.startswith(NODEROLLBACKS + "/")
            and r.path.endswith("/status")
            and any(s.get("name") == step and s.get("state") == state for s in steps)
        )

    return match


def steps(rollback: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A NodeRollback's steps by name."""
    return {s["name"]: s for s in rollback.get("status", {}).get("steps") or ()}
