"""Prometheus' part of the storm: the alerts its rules fire, as bench.storm_alertmanager takes
them (one JSON object per line on its stdin).

A failing node's ``NodesyncNewNodeNotReady`` (``nodesync_action=rollback_node``) fires a few
seconds after it failed; noise rides along: ``NodesyncNewNodeLeaseStaleWhileReady`` with
``nodesync_action=none`` (as from a route without the allow list), and alerts that arrive
already resolved (nodes that flapped).
"""

from __future__ import annotations

import json

from bench.harness.apiserver import JSONObject
from nodesync_sim.real.process import ChildProcess


def not_ready_alert(node: str, starts_at: float, ends_at: float | None = None) -> JSONObject:
    return {
        "labels": {
            "alertname": "NodesyncNewNodeNotReady",
            "node": node,
            "nodesync_action": "rollback_node",
            "severity": "critical",
        },
        "annotations": {
            "summary": f"New node {node} is not Ready: rolling it back.",
            "description": f"Node {node} joined recently and has not been Ready (or has not "
            "renewed its Lease) for 2m 5s.",
            "runbook_url": "docs/runbooks.md#nodesyncnewnodenotready",
        },
        "startsAt": starts_at,
        "endsAt": ends_at,
        "generatorURL": "http://prometheus-0:9090/graph?g0.expr=node%3Anodesync_node_not_ready"
        "_seconds%3Amax+%3E+scalar%28nodesync%3Anode_not_ready_threshold_seconds%29&g0.tab=1",
    }


def lease_stale_alert(node: str, starts_at: float) -> JSONObject:
    return {
        "labels": {
            "alertname": "NodesyncNewNodeLeaseStaleWhileReady",
            "node": node,
            "nodesync_action": "none",
            "severity": "warning",
        },
        "annotations": {
            "summary": f"New node {node} has a stale Lease but is still Ready.",
            "description": f"The Lease of node {node} was last renewed 1m 10s ago, yet its "
            "Ready condition is still true: the node-lifecycle controller lags. nodesync takes "
            "no action.",
            "runbook_url": "docs/runbooks.md#nodesyncnewnodeleasestalewhileready",
        },
        "startsAt": starts_at,
        "endsAt": None,
        "generatorURL": "http://prometheus-0:9090/graph?g0.expr=node%3Anodesync_node_lease_age"
        "_seconds%3Amax&g0.tab=1",
    }


class AlertFeed:
    """Alerts to the Alertmanager process, one JSON line each on its stdin."""

    def __init__(self, alertmanager: ChildProcess) -> None:
        self._alertmanager = alertmanager
        self.sent = 0

    def send(self, message: JSONObject) -> None:
        pipe = self._alertmanager.stdin
        assert pipe is not None, "the Alertmanager process has no stdin pipe (any more)"
        pipe.write(json.dumps(message).encode() + b"\n")
        pipe.flush()
        self.sent += 1

    def finish(self) -> None:
        """Ask Alertmanager to stop pacing, replay everything (the flood) and exit."""
        self.send({"cmd": "finish"})
