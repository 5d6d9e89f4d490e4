"""The test API server's application keys, in one place, as the product keeps its own
(exporter/*/keys.py): what :func:`nodesync_sim.fake.apiserver.app.create_app` puts into the
application, for the middlewares and handlers that read it, and for
:class:`nodesync_sim.fake.apiserver.server.APIServer`.

The types come from the modules that use the keys, so they are named for the type checker only:
a key's type parameter is all it needs of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from nodesync_sim.fake.apiserver.app import ServerSettings
    from nodesync_sim.fake.apiserver.audit import AuditLog
    from nodesync_sim.fake.apiserver.auth import TokenAuthenticator
    from nodesync_sim.fake.apiserver.counters import RequestCounters
    from nodesync_sim.fake.apiserver.faults import Faults
    from nodesync_sim.fake.apiserver.store import Store
    from nodesync_sim.fake.apiserver.watch import WatchHub

STORE: web.AppKey[Store] = web.AppKey("store")
HUB: web.AppKey[WatchHub] = web.AppKey("hub")
FAULTS: web.AppKey[Faults] = web.AppKey("faults")
COUNTERS: web.AppKey[RequestCounters] = web.AppKey("counters")
AUDIT: web.AppKey[AuditLog] = web.AppKey("audit")
AUTHENTICATOR: web.AppKey[TokenAuthenticator] = web.AppKey("authenticator")
SETTINGS: web.AppKey[ServerSettings] = web.AppKey("settings")
