"""The HTTP server settings both roles share (the agent's and the controller's listener, which
serve /metrics and, on the controller, the webhook), declared once; exporter.serve applies them.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.settings.declare import setting
from exporter.settings.values import POSITIVE_COUNT, POSITIVE_DURATION


@dataclass(frozen=True, slots=True)
class ServerSettings:
    idle_timeout: float = setting(
        "--web.idle-timeout",
        "30s",
        "close a connection that has not sent a whole request head (request line and headers) "
        "this long after it opened or after its last answer: idle keep-alive connections and "
        "slow clients alike",
        POSITIVE_DURATION,
    )
    read_timeout: float = setting(
        "--web.read-timeout",
        "10s",
        "a request body that has not fully arrived this long after its head is answered 408 "
        "and its connection closed",
        POSITIVE_DURATION,
    )
    max_connections: int = setting(
        "--web.max-connections",
        "1000",
        "open connections at most; a connection over the limit is answered 503 and closed "
        "(the soft limit of open files is raised to fit, up to the hard limit)",
        POSITIVE_COUNT,
    )
    shutdown_timeout: float = setting(
        "--web.shutdown-timeout",
        "5s",
        "on SIGTERM, requests in progress get this long to finish before they are cancelled; "
        "the process exits within about this plus 2 s, whatever the clients do: keep the pod's "
        "terminationGracePeriodSeconds above it",
        POSITIVE_DURATION,
    )
