"""Every key of the controller's aiohttp application, in one place: what the app holds, who
puts it there (exporter.controller.app, exporter.controller.wiring), and nothing else.

The webhook and the executor read none of them: they are objects built with what they need
(exporter.controller.wiring). The keys are for the app's own handlers, its cleanup contexts,
and tests that look inside a running controller. The serving layer's keys (exporter.serve) are
shared with the agent and stay with it.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CollectorRegistry

from exporter.controller.cluster import ClusterWatch
from exporter.controller.coordination import Lead, Schedule
from exporter.controller.executor import Executor
from exporter.controller.journal import Journal
from exporter.controller.settings import ControllerSettings
from exporter.controller.webhook import Webhook
from exporter.kube.api import KubeAPI
from exporter.metrics.kube_requests import KubeRequestMetrics

SETTINGS = web.AppKey("settings", ControllerSettings)
REGISTRY = web.AppKey("registry", CollectorRegistry)
KUBE_API = web.AppKey("kube_api", KubeAPI)
#: True when the caller gave the API client (the caller closes it).
GIVEN_API = web.AppKey("given_api", bool)
#: API requests counted in the app's registry (only when the app connects by itself).
KUBE_METRICS = web.AppKey("kube_metrics", KubeRequestMetrics)
CLUSTER = web.AppKey("cluster", ClusterWatch)
#: The cohort keys the executor's guards group nodes by (absent without an executor: none).
COHORT_KEYS: web.AppKey[tuple[str, ...]] = web.AppKey("cohort_keys")
#: Further conditions of readiness: each returns None when ready, else why not (the webhook's:
#: the journal takes writes).
READINESS: web.AppKey[list[Callable[[], str | None]]] = web.AppKey("readiness")
#: Whether this replica executes rollbacks now; absent without an executor (never a follower).
LEAD = web.AppKey("lead", Lead)
#: When the executor's next pass runs; the webhook trips it after a delivery.
SCHEDULE = web.AppKey("schedule", Schedule)
WEBHOOK = web.AppKey("webhook", Webhook)
JOURNAL = web.AppKey("journal", Journal)
EXECUTOR = web.AppKey("rollback_executor", Executor)
