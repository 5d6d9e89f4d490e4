"""Serve an aiohttp application until SIGINT or SIGTERM, then shut it down within a bound.

Both roles serve their application (/metrics, /healthz, /readyz; the controller's webhook) with
:func:`serve`, hardened against what clients do (docs/install.md, docs/metrics.md):

- Every error the framework answers by itself is JSON (``{"error": ...}``): 404, 405 and the
  other HTTP exceptions (:func:`harden`'s middleware), and the 400 for a request it cannot parse
  (exporter.serve.connections). These client mistakes are counted in
  ``nodesync_http_client_errors_total`` by reason and logged at most once a minute per reason
  (:class:`ClientErrors`), never at ERROR.
- A connection that has not sent a whole request head ``--web.idle-timeout`` after it opened or
  after its last answer is closed (aiohttp's keep-alive timer covers both); a body is read for
  at most ``--web.read-timeout`` (the handlers that read one; an unread body is drained for as
  long after the answer, then the connection is closed); TLS handshakes get the idle timeout.
- At most ``--web.max-connections`` connections are open: one more is answered 503 and closed
  (exporter.serve.connections). The soft limit of open files is raised to its hard limit at
  start, and the cap lowered below it if needed, so that clients cannot take the descriptors the
  process needs; should the accept loop still run out of them, asyncio's error is logged once a
  minute.
- On SIGTERM the listener closes, requests in progress get ``--web.shutdown-timeout`` to
  finish (their answers close their connections), then every connection is closed and what is
  left is cancelled: the process exits within about the shutdown timeout plus 2 s.

This package is the serving layer's face: the names the roles use. Its modules: ``clients``
(client mistakes counted, requests in flight), ``keys`` (the application's keys), ``middleware``
(:func:`harden`), ``connections`` (each connection's protocol, the cap), ``site`` (the
listener), ``lifecycle`` (:func:`serve`, :class:`Served`) and ``landing`` (the page at ``/``).
"""

from __future__ import annotations

from exporter.serve.clients import LOG_INTERVAL, ClientErrors, InFlight
from exporter.serve.connections import FD_RESERVE, connection_cap
from exporter.serve.keys import CLIENT_ERRORS, IN_FLIGHT, SERVER_SETTINGS
from exporter.serve.landing import landing_page
from exporter.serve.lifecycle import CANCEL_WAIT, ListenError, Served, serve
from exporter.serve.middleware import close_if_unread, error_response, harden

__all__ = [
    "CANCEL_WAIT",
    "CLIENT_ERRORS",
    "FD_RESERVE",
    "IN_FLIGHT",
    "LOG_INTERVAL",
    "SERVER_SETTINGS",
    "ClientErrors",
    "InFlight",
    "ListenError",
    "Served",
    "close_if_unread",
    "connection_cap",
    "error_response",
    "harden",
    "landing_page",
    "serve",
]
