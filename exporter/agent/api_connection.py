"""The agent's connection to the API server: the client, the watches of its own objects (Node,
Lease, pods: exporter.agent.node_objects), and the writer its cleanup answers through.
Imported only when the agent has an API server to talk to (its modules and the informers' state
are what an agent without one need not pay). Nothing here imports the ``kubernetes`` client
package: exporter.kube talks to the API server over aiohttp (tests/test_cli_imports.py)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from exporter.agent.node_objects import NodeObjects
from exporter.agent.settings import AgentSettings
from exporter.kube.api import KubeAPI
from exporter.kube.config import ConfigError, load_configuration
from exporter.kube.writer import KubeWriter
from exporter.metrics.kube_requests import KubeRequestMetrics

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class APIConnection:
    api: KubeAPI
    objects: NodeObjects
    writer: KubeWriter


async def connect(settings: AgentSettings, registry: CollectorRegistry) -> APIConnection | None:
    """The API side when it can be configured; the agent works without it (source down)."""
    try:
        configuration = await load_configuration(settings.kubeconfig, context=settings.context)
    except ConfigError as exc:
        log.warning("running without the API server's view: %s", exc)
        return None
    api = KubeAPI(configuration, observer=KubeRequestMetrics(registry))
    objects = NodeObjects(
        api, settings.node_name, initial_jitter_seconds=settings.api_initial_jitter
    )
    return APIConnection(api, objects, KubeWriter(api, component="nodesync-agent"))
