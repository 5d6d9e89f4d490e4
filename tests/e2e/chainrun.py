"""Running the local chain (nodesync_sim.demo.chain) in a test: start it from a scenario file, poll
conditions with deadlines, read the controller's metrics and the real containerd, and measure how
long nodesync took from a node failing to its rollback starting."""

from __future__ import annotations

import json
import math
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest

from exporter.cri.client import CRIClient
from nodesync_sim.demo.chain import CONTROLLER_USER, Chain
from nodesync_sim.fake.scaleout import timeline
from nodesync_sim.fake.scaleout.scenario import Scenario
from nodesync_sim.fake.scaleout.scenario_file import load
from nodesync_sim.real.containerd import missing_binaries as missing_containerd
from nodesync_sim.real.prometheus import missing_binaries as missing_prometheus
from tests.metrics.exposition import series

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"
POLL = 0.2

T = TypeVar("T")


def scenario(name: str) -> Scenario:
    return load(SCENARIOS / name)


@asynccontextmanager
async def running(scenario: Scenario) -> AsyncIterator[Chain]:
    """A started chain (Prometheus scraping every target); stopped after, and checked to have
    left nothing behind. Missing binaries fail the test, never skip it."""
    missing = missing_prometheus() + missing_containerd()
    if missing:
        pytest.fail(f"the local chain needs these, missing: {', '.join(missing)}", pytrace=False)
    chain = Chain(scenario)
    await chain.start()
    try:
        yield chain
    finally:
        leftovers = await chain.stop()
        assert not leftovers, f"the local chain left things behind: {leftovers}"


async def controller_metrics(chain: Chain) -> str:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{chain.controller_port}/metrics") as response,
    ):
        assert response.status == 200
        return await response.text()


async def controller_value(chain: Chain, name: str, **labels: str) -> float:
    """The sum of a controller metric's samples that carry ``labels``."""
    text = await controller_metrics(chain)
    wanted = set(labels.items())
    return sum(v for key, v in series(text, name).items() if wanted <= set(key))


async def sandbox_ids(chain: Chain) -> set[str]:
    """The pod sandboxes the real containerd holds now, asked over the CRI."""
    assert chain.containerd is not None
    async with CRIClient(chain.containerd.endpoint, timeout=5.0) as client:
        return {s.id for s in await client.list_pod_sandboxes()}


def controller_writes(chain: Chain) -> list[str]:
    """``verb target`` of every write the controller sent to the API server."""
    return [f"{e.verb} {e.target}" for e in chain.audit.by(CONTROLLER_USER)]


def events(chain: Chain) -> list[dict[str, Any]]:
    return chain.api.store.list("events")


def alert_for(scenario: Scenario, alert: str) -> float:
    """The ``for:`` the scenario gives ``alert`` (every e2e scenario sets one)."""
    value = scenario.rules.for_alert.get(alert, scenario.rules.for_all)
    assert value is not None, f"the scenario sets no for: for {alert}"
    return value


def rule_expr(chain: Chain, alert: str) -> str:
    """The expression of ``alert`` as the chain's Prometheus loaded it."""
    assert chain.workdir is not None
    for path in sorted((chain.workdir / "rules").glob("*.yml")):
        for group in json.loads(path.read_text())["groups"]:
            for rule in group["rules"]:
                if rule.get("alert") == alert:
                    return str(rule["expr"])
    raise AssertionError(f"no alert {alert} in the chain's rules")


def without_pause(expr: str) -> str:
    """An alert expression without its ``unless`` on the correlated-failure pause."""
    pause = r"\s*unless on \(cluster\) cluster:nodesync_actions_paused:bool\s*"
    stripped, found = re.subn(pause, "\n", expr)
    assert found == 1, f"no pause clause in {expr!r}"
    return stripped


@dataclass(frozen=True)
class Reaction:
    """From a node failing to nodesync's first write for it.

    ``failed_at``: when the API server first showed the node failing (Ready no longer True);
    ``condition_at``: when the alert's condition became true (the failure plus what was left of
    the not-ready threshold, counted from the last Lease renewal, like the rule);
    ``acted_at``: the controller's first write to the node (the cordon)."""

    stopped_at: float | None  # when the kubelet went silent (its Lease stopped), if it did
    failed_at: float
    condition_at: float
    acted_at: float
    rule_for: float

    @property
    def seconds(self) -> float:
        """The reaction time less the rule's ``for:`` (which is a chosen delay, not latency)."""
        return self.acted_at - self.condition_at - self.rule_for


def reaction(chain: Chain, node: str, alert: str) -> Reaction:
    """How fast nodesync reacted to ``node``'s fault (the first one of the node)."""
    record = chain.sim.timeline
    fault = record.first(node, timeline.FAULT_STARTED)
    assert fault is not None, f"{node} had no fault"
    failures = [
        e.at
        for e in record.of(node)
        if e.what in (timeline.READY_UNKNOWN, timeline.NOT_READY) and e.at >= fault.at
    ]
    assert failures, f"the timeline shows no failure of {node} after its fault"
    failed_at = failures[0]
    stopped = record.first(node, timeline.LEASE_STOPPED)
    # The rule counts not-ready time from the earlier of the Ready transition and the last
    # Lease renewal: the threshold may have run out before Ready changed.
    since = float(stopped.detail) if stopped is not None and stopped.detail else failed_at
    threshold = chain.scenario.rules.thresholds.get("node_not_ready_threshold_seconds", 600.0)
    condition_at = max(failed_at, since + threshold)
    writes = [
        e.at for e in chain.audit.by(CONTROLLER_USER) if e.resource == "nodes" and e.name == node
    ]
    assert writes, f"the controller never wrote to node {node}"
    return Reaction(
        stopped.at if stopped is not None else None,
        failed_at,
        condition_at,
        writes[0],
        alert_for(chain.scenario, alert),
    )


def acceptance_budget(chain: Chain) -> float:
    """Scrape interval + evaluation interval + the longer of Alertmanager's group_wait and
    group_interval + 5 s. An alert that opens its group waits group_wait; one that joins a
    group Alertmanager already notified waits for the group's next flush, up to group_interval."""
    spec = chain.scenario
    group_wait, group_interval = spec.alertmanager.group_wait, spec.alertmanager.group_interval
    assert group_wait is not None, "the e2e scenarios set group_wait"
    assert group_interval is not None, "the e2e scenarios set group_interval"
    return (
        spec.prometheus.scrape_interval
        + spec.prometheus.evaluation_interval
        + max(group_wait, group_interval)
        + 5.0
    )


PAUSE_ALERT = "NodesyncControlPlaneSuspected"


@dataclass(frozen=True)
class PauseStart:
    """From the established nodes failing to the rules pausing every action.

    ``failed_at``: when the API server showed enough of the old nodes failing to trip the
    correlated-failure guard (the last of the fewest that are enough); ``paused_at``: the first
    evaluation at which ``cluster:nodesync_actions_paused:bool`` was 1."""

    failed_at: float
    paused_at: float

    @property
    def seconds(self) -> float:
        return self.paused_at - self.failed_at


async def pause_start(chain: Chain) -> PauseStart:
    """When the old nodes failed, and when the rules' pause began (it has begun)."""
    old = [plan.name for plan in chain.sim.layout.of_role("old")]
    thresholds = chain.scenario.rules.thresholds
    ratio = thresholds.get("correlated_failure_ratio", 0.3)
    min_nodes = thresholds.get("correlated_failure_min_nodes", 2.0)
    enough = max(int(min_nodes), math.ceil(ratio * len(old) - 1e-9), 1)
    record = chain.sim.timeline
    failures = sorted(
        e.at for name in old if (e := record.first(name, timeline.READY_UNKNOWN)) is not None
    )
    assert len(failures) >= enough, f"only {len(failures)} of {len(old)} old nodes failed"
    window = f"{math.ceil(chain.sim.clock.now() - failures[0]) + 60}s"
    result = await chain.prom.query_async(f"cluster:nodesync_actions_paused:bool[{window}]")
    assert result, "the rules never paused"
    first = min(float(t) for series in result for t, _ in series["values"])
    return PauseStart(failures[enough - 1], first)


def pause_budget(chain: Chain) -> float:
    """Scrape interval + evaluation interval + the pause alert's for: + one evaluation interval
    (the pause reads the alert as of its last evaluation) + 5 s."""
    spec = chain.scenario
    evaluation = spec.prometheus.evaluation_interval
    return (
        spec.prometheus.scrape_interval
        + evaluation
        + alert_for(spec, PAUSE_ALERT)
        + evaluation
        + 5.0
    )
