"""Deliveries to the controller's webhook as Alertmanager 0.25 sends them:
``NodesyncNewNodeNotReady`` alerts of one group (``nodesync_action=rollback_node``), and a
keep-alive client that times each answer."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import aiohttp

from bench.storm_alertmanager import HOOK_ROUTE, ZERO_TIME, fingerprint, go_time, label_string

ALERTNAME = "NodesyncNewNodeNotReady"
GROUP_LABELS = {"alertname": ALERTNAME, "nodesync_action": "rollback_node"}


def alert(node: str, starts_at: float) -> dict[str, Any]:
    labels = {**GROUP_LABELS, "node": node, "severity": "critical"}
    return {
        "status": "firing",
        "labels": labels,
        "annotations": {"summary": f"New node {node} is not Ready: rolling it back."},
        "startsAt": go_time(starts_at),
        "endsAt": ZERO_TIME,
        "generatorURL": "http://prometheus-0:9090/graph",
        "fingerprint": fingerprint(labels),
    }


def delivery(alerts: Sequence[dict[str, Any]]) -> bytes:
    return json.dumps(
        {
            "receiver": "nodesync",
            "status": "firing",
            "alerts": list(alerts),
            "groupLabels": GROUP_LABELS,
            "commonLabels": GROUP_LABELS,
            "commonAnnotations": {},
            "externalURL": "http://alertmanager-0:9093",
            "version": "4",
            "groupKey": f"{HOOK_ROUTE}:{label_string(GROUP_LABELS)}",
            "truncatedAlerts": 0,
        }
    ).encode()


class Hook:
    """POSTs to a webhook with a keep-alive session; the latency of each whole answer."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self._headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))

    async def post(self, body: bytes) -> tuple[int, float]:
        started = time.perf_counter()
        async with self._session.post(self.url, data=body, headers=self._headers) as response:
            await response.read()
            return response.status, time.perf_counter() - started

    async def close(self) -> None:
        await self._session.close()
