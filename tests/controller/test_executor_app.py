"""The executor inside the controller app: Alertmanager posts to /alerts, the webhook records the
alerts, the executor acts on them, /metrics shows it. Against the test API server with the real
client; the node agents' side of the runtime cleanup is played by ``executor_harness.Agent``
(through the API server's store)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from exporter.controller.app import make_app
from exporter.controller.keys import EXECUTOR
from exporter.controller.settings import ControllerSettings, ExecutorSettings
from exporter.controller.wiring import rollback_extensions
from exporter.kube.noderollbacks import node_rollback
from exporter.model.rollback import Phase
from exporter.settings.declare import changed
from nodesync_sim.fake.apiserver import APIServer
from tests.controller.alert_builders import alert as am_alert
from tests.controller.alert_builders import body
from tests.controller.conftest import AiohttpClient, Client, SimClock, scrape
from tests.controller.executor_harness import FAST, Agent, lease_object, node_object
from tests.controller.webhook_support import hook_settings, journal, post
from tests.metrics.exposition import labels, series
from tests.support.wait import until_async

STARTS = float(int(time.time()) - 60)


@pytest.fixture
async def agent(server: APIServer) -> AsyncIterator[Agent]:
    helper = Agent(server.store)
    task = asyncio.create_task(helper.run())
    yield helper
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def add_nodes(server: APIServer, clock: SimClock, *names: str, ready: str = "False") -> None:
    now = time.time()
    clock.now = now - 120
    for name in names:
        server.store.create("nodes", node_object(name, ready=ready, since=now - 90))
        server.store.create("leases", lease_object(name, now - 3), namespace="kube-node-lease")


async def start(
    aiohttp_client: AiohttpClient,
    settings: ControllerSettings,
    tmp_path: Path,
    hook: ExecutorSettings,
) -> Client:
    app = make_app(
        settings,
        registry=CollectorRegistry(),
        extensions=rollback_extensions(hook_settings(tmp_path), hook),
    )
    return await aiohttp_client(app)


def rollback(node: str, fingerprint: str) -> dict[str, object]:
    return body(am_alert(fingerprint, node=node, starts_at=STARTS))


def rollbacks(server: APIServer, *phases: Phase) -> int:
    """NodeRollbacks in the server (in these phases)."""
    found = [node_rollback(o) for o in server.store.list("noderollbacks")]
    return sum(1 for r in found if not phases or r.status.phase in phases)


async def decisions(client: Client, verdict: str | None = None) -> int:
    return len(await journal(client).decisions(verdict))


async def test_posted_three_times_each_step_runs_once(
    aiohttp_client: AiohttpClient,
    server: APIServer,
    clock: SimClock,
    settings: ControllerSettings,
    tmp_path: Path,
    agent: Agent,
) -> None:
    add_nodes(server, clock, "new-1", "new-2")
    client = await start(aiohttp_client, settings, tmp_path, changed(FAST, delete_nodes=True))
    for _ in range(3):
        response = await post(client, rollback("new-1", "00000000000000a1"))
        assert response.status == 200

    async def done() -> bool:
        if rollbacks(server, Phase.SUCCEEDED) != 1:
            return False
        # The server holds the last status write before the executor counts its step (after
        # the answer) and before its NodeRollback watch, which the phases come from, sees it.
        text = await scrape(client)
        actions = series(text, "nodesync_actions_total")
        return (
            actions.get(labels(action="delete_node", result="done")) == 1
            and series(text, "nodesync_rollbacks").get(labels(phase="Succeeded")) == 1
        )

    await until_async(
        done, timeout=30, what="the rollback to finish, as the executor's metrics show"
    )
    assert server.store.try_get("nodes", "new-1") is None
    assert server.counters.count("patch", "nodes") == 3
    assert server.counters.count("delete", "nodes") == 1
    assert server.counters.count("create", "events") == 7  # the decision, and each step
    assert rollbacks(server) == 1
    assert await decisions(client) == 1
    text = await scrape(client)
    assert series(text, "nodesync_actions_total")[labels(action="cordon", result="done")] == 1
    assert series(text, "nodesync_actions_total")[labels(action="delete_node", result="done")] == 1
    assert series(text, "nodesync_executor_leader") == {labels(): 1.0}
    assert series(text, "nodesync_rollbacks")[labels(phase="Succeeded")] == 1
    assert series(text, "nodesync_rollbacks_paused") == {labels(): 0.0}
    assert series(text, "nodesync_rollback_budget_remaining")[labels(kind="absolute")] == 9
    assert 0 <= series(text, "nodesync_api_write_tokens")[labels()] <= 10
    assert client.app[EXECUTOR].leading


async def test_dry_run_through_the_app_writes_nothing(
    aiohttp_client: AiohttpClient,
    server: APIServer,
    clock: SimClock,
    settings: ControllerSettings,
    tmp_path: Path,
) -> None:
    add_nodes(server, clock, *(f"new-{i}" for i in range(10)))
    client = await start(aiohttp_client, settings, tmp_path, changed(FAST, dry_run=True))
    server.counters.reset()
    alerts = [am_alert(f"{i:016x}", node=f"new-{i}", starts_at=STARTS) for i in range(3)]
    assert (await post(client, body(*alerts))).status == 200

    async def planned() -> bool:
        return await decisions(client) == 3

    await until_async(planned, timeout=15.0, what="three alerts decided")
    assert await decisions(client, "dry_run") == 1
    assert await decisions(client, "refused") == 2
    assert rollbacks(server) == 0
    assert server.counters.writes() == 0
    text = await scrape(client)
    assert series(text, "nodesync_actions_total")[labels(action="cordon", result="dry_run")] == 1
    assert (
        series(text, "nodesync_guard_refusals_total")[labels(reason="blast_radius_fraction")] == 2
    )


async def test_with_leader_election_it_executes_once_it_leads(
    aiohttp_client: AiohttpClient,
    server: APIServer,
    clock: SimClock,
    settings: ControllerSettings,
    tmp_path: Path,
    agent: Agent,
) -> None:
    server.store.create("namespaces", {"metadata": {"name": "nodesync"}})
    add_nodes(server, clock, "new-1")
    hook = changed(FAST, leader_elect=True, leader_elect_identity="controller-a")
    client = await start(aiohttp_client, settings, tmp_path, hook)

    async def leading() -> bool:
        text = await scrape(client)
        return series(text, "nodesync_executor_leader") == {labels(): 1.0}

    await until_async(leading, timeout=15.0, what="the controller to lead")
    lease = server.store.get("leases", "nodesync-controller", namespace="nodesync")
    assert lease["spec"]["holderIdentity"] == "controller-a"
    assert (await post(client, rollback("new-1", "00000000000000b1"))).status == 200

    async def done() -> bool:
        return rollbacks(server, Phase.SUCCEEDED) == 1

    await until_async(done, timeout=30, what="the rollback to finish")
