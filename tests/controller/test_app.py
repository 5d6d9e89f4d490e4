"""The controller against the test API server, through the real client: what the API holds shows
up in /metrics, changes follow, and a failing API server is reported, then recovers."""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)

from exporter.commandline import parse_settings
from exporter.controller.app import make_app
from exporter.controller.keys import CLUSTER
from exporter.controller.settings import ControllerSettings
from exporter.kube.api import KubeAPI
from exporter.kube.config import ConfigError, token_configuration
from exporter.kube.resources import NODES
from exporter.metrics.nodes import NodeCollectors
from exporter.model.waves import time_wave_id
from nodesync_sim.fake.apiserver import APIServer
from tests.controller.builders import T0
from tests.controller.conftest import (
    LEASES,
    AiohttpClient,
    Client,
    SimClock,
    lease_object,
    node_object,
    scrape,
    value,
)
from tests.metrics.exposition import labels, series
from tests.metrics.pages import check_landing_page_and_process_metrics
from tests.support.wait import until_async


async def nodes_total(client: Client) -> float | None:
    return await value(client, "nodesync_nodes")


async def test_nodes_and_leases_appear(
    server: APIServer, clock: SimClock, controller: Client
) -> None:
    server.store.create("nodes", node_object("n1", transition=T0 - 5))
    server.store.create("leases", lease_object("n1", T0 + 7.25), namespace=LEASES)
    clock.now = T0 + 30
    server.store.create("nodes", node_object("n2", ready="False", transition=T0 + 31))
    clock.now = T0 + 1000
    server.store.create("nodes", node_object("n3", labels={"example.com/scale-out": "batch-7"}))

    async def three_and_watching() -> bool:
        # the watch is counted once its stream opens, which comes after the list that finds the
        # three nodes: wait for both before asserting on one scrape
        text = await scrape(controller)
        watches = series(text, "nodesync_kube_watches_total")
        return (
            series(text, "nodesync_nodes").get(frozenset()) == 3.0
            and labels(resource="nodes") in watches
        )

    await until_async(
        three_and_watching, timeout=15.0, what="three nodes and an open nodes watch in /metrics"
    )
    text = await scrape(controller)
    # by default Ready only: the other conditions are behind --collector.conditions
    assert series(text, "nodesync_node_condition") == {
        labels(node=n, condition="Ready", status=s): 1.0 if s == ready else 0.0
        for n, ready in (("n1", "true"), ("n2", "false"), ("n3", "true"))
        for s in ("true", "false", "unknown")
    }
    assert (
        series(text, "nodesync_node_condition_transition_timestamp_seconds")[
            labels(node="n1", condition="Ready")
        ]
        == T0 - 5
    )
    assert series(text, "nodesync_node_created_timestamp_seconds") == {
        labels(node="n1"): T0,
        labels(node="n2"): T0 + 30,
        labels(node="n3"): T0 + 1000,
    }
    assert series(text, "nodesync_node_lease_renew_timestamp_seconds") == {
        labels(node="n1"): T0 + 7.25
    }
    first = time_wave_id(T0)
    assert series(text, "nodesync_node_wave") == {
        labels(node="n1", wave=first): 1.0,
        labels(node="n2", wave=first): 1.0,
        labels(node="n3", wave="batch-7"): 1.0,
    }
    assert series(text, "nodesync_wave_nodes") == {
        labels(wave=first): 2.0,
        labels(wave="batch-7"): 1.0,
    }
    assert series(text, "nodesync_source_up") == {labels(source="apiserver"): 1.0}
    assert labels(source="apiserver") in series(text, "nodesync_last_sync_timestamp_seconds")
    assert len(series(text, "nodesync_build_info")) == 1
    # the controller's own client reports its requests in the same registry
    lists = series(text, "nodesync_kube_request_duration_seconds_count")
    assert lists[labels(resource="nodes", verb="list")] >= 1
    assert lists[labels(resource="leases", verb="list")] >= 1
    assert series(text, "nodesync_kube_watches_total")[labels(resource="nodes")] >= 1


async def test_collector_switches_from_the_command_line(
    aiohttp_client: AiohttpClient, server: APIServer, settings: ControllerSettings
) -> None:
    """``--collector.conditions --collector.spec --no-collector.waves``: kubelet's other
    conditions and the cordon are served, the wave series are not."""
    switches = parse_settings(
        ControllerSettings,
        ["--collector.conditions", "--collector.spec", "--no-collector.waves"],
        {},
    ).collectors
    assert switches == NodeCollectors(node=True, waves=False, conditions=True, spec=True)
    client = await aiohttp_client(
        make_app(dataclasses.replace(settings, collectors=switches), registry=CollectorRegistry())
    )
    server.store.create("nodes", node_object("n1"))

    async def listed() -> bool:
        return await nodes_total(client) == 1.0

    await until_async(listed, timeout=15.0, what="the node in /metrics")
    text = await scrape(client)
    assert {dict(k)["condition"] for k in series(text, "nodesync_node_condition")} == {
        "Ready",
        "DiskPressure",
    }
    assert series(text, "nodesync_node_unschedulable") == {labels(node="n1"): 0.0}
    assert series(text, "nodesync_node_wave") == {}
    assert series(text, "nodesync_wave_nodes") == {}
    assert "# TYPE nodesync_node_wave " not in text


async def test_openmetrics_scrape_is_one_exposition(server: APIServer, controller: Client) -> None:
    """Prometheus asks for OpenMetrics first: the node text (kept per node) and the registry's
    families make one exposition with one ``# EOF``, at its end."""
    server.store.create("nodes", node_object("n1"))
    server.store.create("leases", lease_object("n1", T0 + 3), namespace=LEASES)

    async def listed() -> bool:
        return await nodes_total(controller) == 1.0

    await until_async(listed, timeout=15.0, what="the node in /metrics")
    response = await controller.get(
        "/metrics",
        headers={"Accept": "application/openmetrics-text;version=1.0.0,text/plain;q=0.5"},
    )
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("application/openmetrics-text")
    text = await response.text()
    assert text.endswith("# EOF\n")
    assert text.count("# EOF") == 1
    families = {f.name: f for f in openmetrics_families(text)}
    renew = families["nodesync_node_lease_renew_timestamp_seconds"].samples
    assert [(s.labels, s.value) for s in renew] == [({"node": "n1"}, T0 + 3)]
    assert "nodesync_kube_watches" in families


async def test_lease_renewal_updates_the_timestamp(server: APIServer, controller: Client) -> None:
    server.store.create("nodes", node_object("n1"))
    server.store.create("leases", lease_object("n1", T0 + 10), namespace=LEASES)

    async def renewed_at(t: float) -> bool:
        return (
            await value(controller, "nodesync_node_lease_renew_timestamp_seconds", node="n1") == t
        )

    await until_async(lambda: renewed_at(T0 + 10), timeout=15.0, what="first renew time")
    lease = server.store.get("leases", "n1", namespace=LEASES)
    lease["spec"]["renewTime"] = lease_object("n1", T0 + 20.5)["spec"]["renewTime"]
    server.store.replace("leases", lease, namespace=LEASES)
    await until_async(lambda: renewed_at(T0 + 20.5), timeout=15.0, what="renewed time")


async def test_deleted_node_disappears_and_its_open_wave_keeps_its_size(
    server: APIServer, clock: SimClock, controller: Client
) -> None:
    server.store.create("nodes", node_object("n1"))
    server.store.create("leases", lease_object("n1", T0), namespace=LEASES)
    clock.now = T0 + 10
    server.store.create("nodes", node_object("n2"))

    async def count(n: float) -> bool:
        return await nodes_total(controller) == n

    await until_async(lambda: count(2.0), timeout=15.0, what="two nodes")
    server.store.delete("nodes", "n1")
    await until_async(lambda: count(1.0), timeout=15.0, what="one node after the delete")
    text = await scrape(controller)
    assert all(("node", "n1") not in lbls for (lbls) in series(text, "nodesync_node_condition"))
    assert series(text, "nodesync_node_created_timestamp_seconds") == {labels(node="n2"): T0 + 10}
    # the lease is still there, but the node is gone: no series for it
    assert series(text, "nodesync_node_lease_renew_timestamp_seconds") == {}
    assert series(text, "nodesync_wave_nodes") == {labels(wave=time_wave_id(T0)): 2.0}


async def test_readyz_turns_ready_after_the_first_list(
    aiohttp_client: AiohttpClient, server: APIServer, settings: ControllerSettings
) -> None:
    server.faults.add_latency(1.0, path_prefix="/api/v1/nodes", verb="list")
    client = await aiohttp_client(make_app(settings, registry=CollectorRegistry()))
    response = await client.get("/readyz")
    assert response.status == 503
    assert (await response.json())["nodes_synced"] is False
    # an unfinished list is not "no nodes": node series are absent, the source is not up
    text = await scrape(client)
    assert series(text, "nodesync_nodes") == {}
    assert series(text, "nodesync_source_up") == {labels(source="apiserver"): 0.0}

    async def ready() -> bool:
        return (await client.get("/readyz")).status == 200

    await until_async(ready, timeout=15.0, what="/readyz 200")
    health = await client.get("/healthz")
    assert health.status == 200
    assert await health.json() == {"status": "ok", "apiserver_up": True}


async def test_apiserver_failure_then_recovery(server: APIServer, controller: Client) -> None:
    server.store.create("nodes", node_object("n1"))

    async def up_is(v: float) -> bool:
        return await value(controller, "nodesync_source_up", source="apiserver") == v

    async def one_node() -> bool:
        return await nodes_total(controller) == 1.0

    await until_async(one_node, timeout=15.0, what="the node")
    await until_async(lambda: up_is(1.0), timeout=15.0, what="source up")
    server.faults.fail_next(10_000, 500, path_prefix="/api/v1/nodes")
    server.drop_watches()  # the informers must ask again, and get 500
    await until_async(
        lambda: up_is(0.0), timeout=15.0, what="source down while the API server fails"
    )
    errors = series(await scrape(controller), "nodesync_kube_request_errors_total")
    assert sum(v for k, v in errors.items() if ("code", "500") in k) >= 1
    # the last state stays visible
    assert await nodes_total(controller) == 1.0
    assert (await controller.get("/healthz")).status == 200
    server.faults.clear()
    server.store.create("nodes", node_object("n2"))

    async def recovered() -> bool:
        return await up_is(1.0) and await nodes_total(controller) == 2.0

    await until_async(recovered, timeout=40, what="source up again with the node created meanwhile")


async def test_given_client_is_used_and_left_open(
    aiohttp_client: AiohttpClient, server: APIServer, settings: ControllerSettings
) -> None:
    server.store.create("nodes", node_object("n1"))
    api = KubeAPI(token_configuration(server.url, server.token))
    try:
        client = await aiohttp_client(
            make_app(
                ControllerSettings(kubeconfig="/nonexistent/kubeconfig"), api=api, registry=None
            )
        )

        async def one_node() -> bool:
            return await nodes_total(client) == 1.0

        await until_async(one_node, timeout=15.0, what="the node through the given client")
        await client.close()
        page = await api.list(NODES)
        assert [item["metadata"]["name"] for item in page.items] == ["n1"]
    finally:
        await api.close()


async def test_unreadable_kubeconfig_fails_the_start(tmp_path: Path) -> None:
    settings = ControllerSettings(kubeconfig=str(tmp_path / "missing"))
    runner = web.AppRunner(make_app(settings, registry=CollectorRegistry()))
    try:
        with pytest.raises(ConfigError, match="cannot load the kubeconfig"):
            await runner.setup()
    finally:
        await runner.cleanup()


async def test_extensions_add_routes_and_resources_after_the_cluster_watch(
    aiohttp_client: AiohttpClient, server: APIServer, settings: ControllerSettings
) -> None:
    """Room for the webhook: an extension's resources start with the API client and the
    cluster watch ready, and stop before them."""
    seen: list[str] = []

    async def extra_ctx(app: web.Application) -> AsyncIterator[None]:
        seen.append(f"start running={app[CLUSTER].running}")
        yield
        seen.append(f"stop running={app[CLUSTER].running}")

    async def extra(request: web.Request) -> web.Response:
        return web.json_response({"synced": request.app[CLUSTER].synced})

    def install(app: web.Application) -> None:
        app.cleanup_ctx.append(extra_ctx)
        app.router.add_get("/extra", extra)

    client = await aiohttp_client(
        make_app(settings, registry=CollectorRegistry(), extensions=[install])
    )
    assert seen == ["start running=True"]
    response = await client.get("/extra")
    assert response.status == 200
    await client.close()
    assert seen == ["start running=True", "stop running=True"]


@pytest.mark.prometheus
async def test_landing_page_and_process_metrics(server: APIServer, controller: Client) -> None:
    server.store.create("nodes", node_object("n1"))
    server.store.create("leases", lease_object("n1", T0 + 3), namespace=LEASES)

    async def listed() -> bool:
        return await nodes_total(controller) == 1.0

    await until_async(listed, timeout=15.0, what="the node in /metrics")
    await check_landing_page_and_process_metrics(controller, "controller")


async def test_what_the_listed_controller_holds_is_left_out_of_full_collections(
    aiohttp_client: AiohttpClient, server: APIServer, settings: ControllerSettings
) -> None:
    """A full garbage collection holds the event loop while it walks every object: once the
    view is listed, what exists is frozen out of those passes (exporter.heap), and given back
    when the controller stops."""
    server.faults.add_latency(0.5, path_prefix="/api/v1/nodes", verb="list")
    assert gc.get_freeze_count() == 0
    client = await aiohttp_client(make_app(settings, registry=CollectorRegistry()))
    assert gc.get_freeze_count() == 0  # not before the view is listed

    async def frozen() -> bool:
        return gc.get_freeze_count() > 0

    await until_async(frozen, timeout=15.0, what="the heap to be frozen once the view is listed")
    assert (await client.get("/readyz")).status == 200
    await client.close()
    assert gc.get_freeze_count() == 0
