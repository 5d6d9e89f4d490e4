"""The fixture of the steps' tests: the test API server with one node and a StepRunner on it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from exporter.controller.coordination import Pause
from exporter.controller.steps import StepRunner
from exporter.kube.api import KubeAPI
from exporter.kube.writer import KubeWriter
from nodesync_sim.fake.apiserver import APIServer
from tests.controller.executor_harness import node_object
from tests.controller.steps.stage import NODE, SETTINGS, Env


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    async with APIServer() as server:
        api = KubeAPI(server.aio_configuration())
        leases: dict[str, float] = {}
        paused = Pause()
        runner = StepRunner(
            KubeWriter(api),
            SETTINGS,
            lease_renew_time=leases.get,
            correlated_failure=paused,
            poll_interval=0.5,
        )
        server.store.create("nodes", node_object(NODE))
        try:
            yield Env(server, runner, leases, paused)
        finally:
            await api.close()
