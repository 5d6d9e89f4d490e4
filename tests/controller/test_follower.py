"""With leader election, a replica that does not lead refuses webhooks with 503 and closes the
connection: its journal is its own intake, so Alertmanager (which retries 5xx) must reconnect and
reach the leader. It is ready all the same, so that a rolling update can go on."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from exporter.controller.app import make_app
from exporter.controller.coordination import Lead
from exporter.controller.settings import ControllerSettings
from exporter.controller.wiring import webhook_extension
from tests.controller.alert_builders import body
from tests.controller.conftest import AiohttpClient
from tests.controller.webhook_support import assert_nothing_recorded, hook_settings, post
from tests.support.wait import until_async


async def test_a_follower_refuses_with_503_and_closes_the_connection(
    aiohttp_client: AiohttpClient, settings: ControllerSettings, tmp_path: Path
) -> None:
    lead = Lead(elected=True)
    app = make_app(
        settings,
        registry=CollectorRegistry(),
        extensions=[webhook_extension(hook_settings(tmp_path), lead=lead)],
    )
    client = await aiohttp_client(app)

    async def ready() -> bool:
        return (await client.get("/readyz")).status == 200

    await until_async(
        ready, timeout=15.0, what="ready as a follower once the cluster view is synced"
    )
    response = await post(client, body())
    assert response.status == 503
    assert response.headers["Connection"] == "close"
    assert "leader" in (await response.json())["error"]
    await assert_nothing_recorded(client)

    lead.leading = True
    response = await post(client, body())
    assert response.status == 200
    assert (await client.get("/readyz")).status == 200
