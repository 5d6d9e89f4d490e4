"""The controller with its webhook (and optionally its executor) served as ``nodesync
controller`` serves it (exporter.serve.Served, the hardened listener) on 127.0.0.1, with an API
client that records every path it requests."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from exporter.controller.app import make_app
from exporter.controller.audit import Audit, EventLane
from exporter.controller.executor import REFUSAL_REASONS
from exporter.controller.intake import Intake
from exporter.controller.journal import Journal
from exporter.controller.keys import CLUSTER, JOURNAL
from exporter.controller.settings import ControllerSettings, ExecutorSettings, WebhookSettings
from exporter.controller.wiring import rollback_extensions
from exporter.kube.api import KubeAPI
from exporter.kube.config import load_configuration
from exporter.kube.writer import KubeWriter
from exporter.metrics.rollback import RollbackMetrics
from exporter.model.guards import GuardState
from exporter.model.outcomes import OUTCOMES
from exporter.model.rollback import NodeRollback
from exporter.serve import Served
from exporter.settings.server import ServerSettings
from tests.metrics.exposition import labels, series


@dataclass
class RecordingAPI:
    """The API client, and every request path it sent (watches included)."""

    api: KubeAPI
    paths: list[str] = field(default_factory=list)


async def recording_api(kubeconfig: str) -> RecordingAPI:
    api = KubeAPI(await load_configuration(kubeconfig))
    recording = RecordingAPI(api)
    send = api._send

    async def recorded(method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        recording.paths.append(path)
        return await send(method, path, *args, **kwargs)

    api._send = recorded  # type: ignore[method-assign]
    return recording


@dataclass
class ServedHook:
    served: Served
    registry: CollectorRegistry
    recording: RecordingAPI

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.served.port}"

    @property
    def journal(self) -> Journal:
        found: Journal = self.served.runner.app[JOURNAL]
        return found

    def metric(self, name: str, **lbls: str) -> float:
        text = generate_latest(self.registry).decode()
        return series(text, name).get(labels(**lbls), 0.0)


@asynccontextmanager
async def served_hook(
    settings: ControllerSettings,
    webhook: WebhookSettings,
    server: ServerSettings,
    executor: ExecutorSettings | None = None,
) -> AsyncIterator[ServedHook]:
    recording = await recording_api(settings.kubeconfig)
    registry = CollectorRegistry()
    extensions = rollback_extensions(webhook, executor)
    app = make_app(
        dataclasses.replace(settings, server=server),
        api=recording.api,
        registry=registry,
        extensions=extensions,
    )
    served = Served(app, "127.0.0.1", 0)
    await served.start()
    try:
        yield ServedHook(served, registry, recording)
    finally:
        await served.stop()
        await recording.api.close()


class _NoRollbacks:
    """The NodeRollbacks in the cluster, as the intake asks for them: none."""

    def guard_state(self) -> GuardState:
        return GuardState()

    def all(self) -> Iterator[NodeRollback]:
        return iter(())


class _NoWrites:
    """NodeRollback writes: none is expected (a test cluster without nodes plans nothing)."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"unexpected NodeRollback write: {name}")


def intake(hook: ServedHook) -> Intake:
    """The leader's intake over the hook's journal and cluster view, recording its Events
    through the hook's API client (so its requests are in ``hook.recording.paths``): what the
    executor runs after each delivery, without the executor's NodeRollback watch."""
    app = hook.served.runner.app
    audit = Audit(KubeWriter(hook.recording.api), dry_run=False)
    return Intake(
        hook.journal,
        app[CLUSTER],
        _NoRollbacks(),  # type: ignore[arg-type]
        _NoWrites(),  # type: ignore[arg-type]
        audit,
        EventLane(audit),
        RollbackMetrics(REFUSAL_REASONS, OUTCOMES),
        ExecutorSettings(),
    )
