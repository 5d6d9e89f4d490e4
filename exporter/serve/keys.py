"""The serving layer's keys, in one place: what :func:`exporter.serve.harden` and
:func:`exporter.serve.serve` put into either role's application, for the handlers that read them.
The roles' own keys are exporter.agent.keys and exporter.controller.keys.

The types come from the modules that use the keys (exporter.serve.clients), so they are named
for the type checker only: a key's type parameter is all it needs of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from exporter.serve.clients import ClientErrors, InFlight
    from exporter.settings.server import ServerSettings

CLIENT_ERRORS: web.AppKey[ClientErrors] = web.AppKey("client_errors")
IN_FLIGHT: web.AppKey[InFlight] = web.AppKey("in_flight")
#: The listener's settings: the timeouts handlers apply (the webhook's body read) and serve's.
SERVER_SETTINGS: web.AppKey[ServerSettings] = web.AppKey("server_settings")
