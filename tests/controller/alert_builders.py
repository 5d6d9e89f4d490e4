"""Alertmanager webhook payloads for tests: as the model holds them, and as JSON on the wire."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from exporter.model.alerts import Alert, WebhookPayload
from tests.controller.builders import T0

ZERO_TIME = "0001-01-01T00:00:00Z"


def alert(
    fingerprint: str = "0123456789abcdef",
    *,
    status: str = "firing",
    starts_at: float = T0,
    ends_at: float | None = None,
    node: str = "worker-1",
    action: str = "rollback_node",
    alertname: str = "NodesyncNodeJoinFailed",
) -> Alert:
    return Alert(
        fingerprint=fingerprint,
        status=status,
        labels={"alertname": alertname, "node": node, "nodesync_action": action},
        starts_at=starts_at,
        ends_at=ends_at,
        annotations={"summary": f"{node} failed to join"},
        generator_url="http://prometheus.example/graph?g0.expr=up",
    )


def payload(
    *alerts: Alert, status: str | None = None, truncated: int = 0, group_key: str = "{}:{}"
) -> WebhookPayload:
    alerts = alerts or (alert(),)
    if status is None:
        status = "firing" if any(a.status == "firing" for a in alerts) else "resolved"
    return WebhookPayload(
        version="4",
        group_key=group_key,
        status=status,
        receiver="nodesync-hook",
        alerts=tuple(alerts),
        truncated_alerts=truncated,
        group_labels={"alertname": "NodesyncNodeJoinFailed"},
        common_labels={"alertname": "NodesyncNodeJoinFailed"},
        common_annotations={},
        external_url="http://alertmanager.example",
    )


def rfc3339(t: float | None) -> str:
    if t is None:
        return ZERO_TIME
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def alert_json(a: Alert) -> dict[str, Any]:
    return {
        "status": a.status,
        "labels": dict(a.labels),
        "annotations": dict(a.annotations),
        "startsAt": rfc3339(a.starts_at),
        "endsAt": rfc3339(a.ends_at),
        "generatorURL": a.generator_url,
        "fingerprint": a.fingerprint,
    }


def payload_json(p: WebhookPayload) -> dict[str, Any]:
    """What Alertmanager 0.25 posts for ``p``."""
    return {
        "version": p.version,
        "groupKey": p.group_key,
        "truncatedAlerts": p.truncated_alerts,
        "status": p.status,
        "receiver": p.receiver,
        "groupLabels": dict(p.group_labels),
        "commonLabels": dict(p.common_labels),
        "commonAnnotations": dict(p.common_annotations),
        "externalURL": p.external_url,
        "alerts": [alert_json(a) for a in p.alerts],
    }


def body(*alerts: Alert, **kwargs: Any) -> dict[str, Any]:
    return payload_json(payload(*alerts, **kwargs))


def fingerprints(n: int) -> Sequence[str]:
    return [f"{i:016x}" for i in range(1, n + 1)]
