"""The local chain with an HA pair of Alertmanagers (``alertmanager.replicas`` 2): two real
Alertmanagers clustered with each other, Prometheus sending every alert to both, both routing
to the hook with the shipped route. Either or both may notify; nodesync acts once."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import pytest

from nodesync_sim.demo.chain import Chain
from nodesync_sim.real.prometheus import LocalAlertmanager
from tests.e2e.chainrun import POLL, controller_value, events, running, scenario
from tests.support.wait import until_async

pytestmark = [pytest.mark.prometheus]

NODE = "wave-1-002"
ALERTS = {"NodesyncNewNodeCRIDown", "NodesyncNewNodeNotReady"}


def _alerts_for(alertmanager: LocalAlertmanager) -> set[str]:
    return {
        a["labels"]["alertname"]
        for a in alertmanager.alerts()
        if a["labels"].get("node") == NODE and a["labels"].get("alertname") in ALERTS
    }


def _rollbacks(chain: Chain) -> list[dict[str, Any]]:
    return [o for o in chain.api.store.list("noderollbacks") if o["spec"]["nodeName"] == NODE]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.timeout(150)
async def test_an_ha_pair_of_alertmanagers_makes_one_rollback() -> None:
    ha = scenario("several-alerts-one-node.json")
    assert ha.alertmanager.replicas == 2
    async with running(ha) as chain:
        first, second = chain.alertmanagers
        pids = [first.pid, second.pid]
        assert None not in pids
        assert pids[0] != pids[1]
        # Prometheus sends to both; they are one cluster of two.
        await until_async(
            lambda: (
                set(chain.prom.alertmanagers())
                == {f"{am.url}/api/v2/alerts" for am in (first, second)}
            ),
            timeout=30,
            what="Prometheus to send to both Alertmanagers",
            interval=POLL,
        )
        for alertmanager in (first, second):
            await until_async(
                lambda am=alertmanager: len(am.cluster_status().get("peers") or []) == 2,
                timeout=30,
                what=f"{alertmanager.url} to see both peers",
                interval=POLL,
            )
        chain.start_waves()

        # Both Alertmanagers hold the node's alerts (Prometheus sent them to each) ...
        await until_async(
            lambda: (_alerts_for(first) and _alerts_for(second)) or None,
            timeout=60,
            what=f"both Alertmanagers to hold an alert about {NODE}",
            interval=POLL,
        )

        # ... the hook received them ...
        async def received() -> bool:
            return await controller_value(chain, "nodesync_alerts_received_total") > 0

        await until_async(
            received, timeout=30, what="the journal to record an alert", interval=POLL
        )
        assert await controller_value(chain, "nodesync_webhook_requests_total") >= 1

        # ... and the node was rolled back once, to the delete.
        def phase() -> str:
            found = _rollbacks(chain)
            return (found[0].get("status") or {}).get("phase", "") if found else ""

        await until_async(
            lambda: phase() == "Succeeded",
            timeout=60,
            what=f"{NODE}'s rollback to succeed",
            interval=POLL,
        )
        [rollback] = _rollbacks(chain)
        steps = [s["name"] for s in rollback["status"]["steps"]]
        assert len(steps) == len(set(steps)), steps
        assert "delete_node" in steps
        assert all(s["state"] in ("done", "skipped") for s in rollback["status"]["steps"])
        reasons = Counter(
            e["reason"]
            for e in events(chain)
            if e["involvedObject"]["name"] == NODE and e["reason"].startswith("Nodesync")
        )
        # Every step's Event once (the rollback's own Event may repeat when a trigger joins).
        step_events = {r: n for r, n in reasons.items() if r != "NodesyncRollback"}
        assert {"NodesyncCordon", "NodesyncDeleteNode"} <= set(step_events), reasons
        assert all(n == 1 for n in step_events.values()), reasons
        print(
            "[e2e] HA pair: webhook requests",
            await controller_value(chain, "nodesync_webhook_requests_total"),
            "duplicates",
            await controller_value(chain, "nodesync_alert_duplicates_total"),
            "events",
            dict(reasons),
        )
    # The chain stopped both by their PIDs (running() checked the leftovers).
    assert first.pid is None
    assert second.pid is None
    assert not any(_alive(pid) for pid in pids if pid is not None)
