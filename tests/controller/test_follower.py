"""With leader election, a replica that does not lead is not ready and refuses webhooks with 503:
its journal is its own, so Alertmanager (which retries 5xx) must reach the leader instead."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from exporter.controller.app import LEADING, make_app
from exporter.controller.settings import ControllerSettings
from exporter.controller.webhook import webhook_extension
from tests.controller.alert_builders import body
from tests.controller.conftest import AiohttpClient, eventually
from tests.controller.webhook_support import assert_nothing_recorded, hook_settings, post


async def test_a_follower_refuses_with_503_and_is_not_ready_until_it_leads(
    aiohttp_client: AiohttpClient, settings: ControllerSettings, tmp_path: Path
) -> None:
    leading = False
    app = make_app(
        settings,
        registry=CollectorRegistry(),
        extensions=[webhook_extension(hook_settings(tmp_path))],
    )
    app[LEADING] = lambda: leading
    client = await aiohttp_client(app)

    response = await post(client, body())
    assert response.status == 503
    assert "leader" in (await response.json())["error"]
    await assert_nothing_recorded(client)
    assert (await client.get("/readyz")).status == 503

    leading = True
    response = await post(client, body())
    assert response.status == 200

    async def ready() -> bool:
        return (await client.get("/readyz")).status == 200

    await eventually(ready, "ready once leading")
