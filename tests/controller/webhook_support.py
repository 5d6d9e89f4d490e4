"""The controller with its webhook, served by pytest-aiohttp against the test API server, and
small helpers to post to it and look into its journal."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from aiohttp import ClientResponse
from prometheus_client import CollectorRegistry

from exporter.controller.app import make_app
from exporter.controller.journal import Journal
from exporter.controller.keys import JOURNAL
from exporter.controller.settings import ControllerSettings, WebhookSettings
from exporter.controller.wiring import webhook_extension
from tests.controller.conftest import AiohttpClient, Client

TOKEN = "a-token-for-tests-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def hook_settings(tmp_path: Path, **changes: Any) -> WebhookSettings:
    settings = WebhookSettings(
        journal_path=str(tmp_path / "journal" / "journal.db"),
        token=TOKEN,
    )
    return replace(settings, **changes)


async def start_hook(
    aiohttp_client: AiohttpClient, settings: ControllerSettings, webhook: WebhookSettings
) -> Client:
    app = make_app(settings, registry=CollectorRegistry(), extensions=[webhook_extension(webhook)])
    return await aiohttp_client(app)


def journal(client: Client) -> Journal:
    found: Journal = client.app[JOURNAL]
    return found


async def post(client: Client, body: object, **kwargs: Any) -> ClientResponse:
    headers = kwargs.pop("headers", AUTH)
    return await client.post("/alerts", json=body, headers=headers, **kwargs)


async def assert_nothing_recorded(client: Client) -> None:
    counts = await journal(client).counts()
    assert counts.deliveries == 0
    assert counts.alerts == {"firing": 0, "resolved": 0}
    assert await journal(client).deliveries() == []
