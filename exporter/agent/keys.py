"""Every key of the agent's aiohttp application, in one place: what the app holds (put there by
exporter.agent.app), for its handlers, its cleanup contexts and tests that look inside a running
agent. The serving layer's keys are exporter.serve.keys."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry

from exporter.agent.settings import AgentSettings
from exporter.agent.sync import AgentSync

if TYPE_CHECKING:  # imported only by an agent that answers cleanup requests (exporter.agent.app)
    from exporter.agent.cleanup import NodeCleanup

SETTINGS = web.AppKey("settings", AgentSettings)
REGISTRY = web.AppKey("registry", CollectorRegistry)
SYNC = web.AppKey("sync", AgentSync)
#: Set when the agent answers cleanup requests.
CLEANUP: web.AppKey[NodeCleanup] = web.AppKey("cleanup")
