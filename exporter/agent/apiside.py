"""The agent's API side: the client, the view of its own Node/Lease/pods, and the writer its
cleanup answers through. Imported only when the agent has an API server to talk to: the
kubernetes client is a third of the agent's memory, which an agent without one need not pay."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from exporter.agent.apiview import AgentAPIView
from exporter.kube.api import KubeAPI
from exporter.kube.config import ConfigError, load_configuration
from exporter.kube.writer import KubeWriter
from exporter.metrics.kube_requests import KubeRequestMetrics
from exporter.settings import AgentSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class APISide:
    api: KubeAPI
    view: AgentAPIView
    writer: KubeWriter


async def connect(settings: AgentSettings, registry: CollectorRegistry) -> APISide | None:
    """The API side when it can be configured; the agent works without it (source down)."""
    try:
        configuration = await load_configuration(settings.kubeconfig)
    except ConfigError as exc:
        log.warning("running without the API server's view: %s", exc)
        return None
    api = KubeAPI(configuration, observer=KubeRequestMetrics(registry))
    view = AgentAPIView(api, settings.node_name, initial_jitter_seconds=settings.api_initial_jitter)
    return APISide(api, view, KubeWriter(api, component="nodesync-agent"))
