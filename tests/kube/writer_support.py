"""What the writer's contract suite (test_writer.py, test_writer_eviction.py) shares: pods and
PodDisruptionBudgets on either server, a client that lets the test act between a read and a
write, and a clock. (Its fixtures, ``controller_api`` and ``node``, are in conftest.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from exporter.kube.api import JSONObject, KubeAPI
from exporter.kube.resources import Resource
from nodesync_sim.fake.apiserver.disruption import compute_budget
from nodesync_sim.fake.apiserver.objects import StoredObject
from nodesync_sim.real.kube_apiserver import CONTROLLER
from tests.kube.cluster import REAL, Cluster


def node_path(cluster: Cluster, name: str) -> str:
    return cluster.path("nodes", name)


def spec(cluster: Cluster, name: str) -> dict[str, Any]:
    found: dict[str, Any] = cluster.get(node_path(cluster, name))["spec"]
    return found


def pod(
    cluster: Cluster,
    name: str,
    node: str,
    *,
    labels: dict[str, str] | None = None,
    **meta: Any,
) -> JSONObject:
    """A pod in the test's namespace bound to ``node``, Running and Ready."""
    body = {
        "metadata": {"name": name, "labels": labels or {}, **meta},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    return cluster.create(cluster.path("pods", namespace=cluster.namespace), body)


def pod_path(cluster: Cluster, name: str) -> str:
    return cluster.path("pods", name, cluster.namespace)


def terminating(cluster: Cluster, name: str) -> bool:
    return bool(cluster.get(pod_path(cluster, name))["metadata"].get("deletionTimestamp"))


def budget(cluster: Cluster, name: str, min_available: int, **selector: str) -> JSONObject:
    """A PodDisruptionBudget in the test's namespace, with its status up to date."""
    body = {
        "metadata": {"name": name},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": selector}},
    }
    collection = cluster.path("poddisruptionbudgets", namespace=cluster.namespace)
    created = cluster.create(collection, body)
    update_budget(cluster, name)
    return created


def update_budget(cluster: Cluster, name: str) -> None:
    """Do what the disruption controller does after the pods changed: on a real server (where
    none runs) write the budget's status from the pods; the test server computes it itself at
    each eviction."""
    if cluster.kind != REAL:
        return
    path = cluster.path("poddisruptionbudgets", name, cluster.namespace)
    pdb = cluster.get(path)
    pods = cluster.get(cluster.path("pods", namespace=cluster.namespace))["items"]
    computed = compute_budget(pdb, [StoredObject(p) for p in pods])
    status = {
        "observedGeneration": pdb["metadata"]["generation"],
        "disruptionsAllowed": computed.allowed,
        "currentHealthy": computed.healthy,
        "desiredHealthy": computed.desired,
        "expectedPods": computed.expected,
    }
    cluster.patch(f"{path}/status", {"status": status})


class AfterRead(KubeAPI):
    """The real client, plus a hook that runs right after each GET returned: lets a test change
    the object between the writer's read and its write, deterministically."""

    def __init__(self, configuration: Any, hook: Callable[[int], None]) -> None:
        super().__init__(configuration)
        self._hook = hook
        self.reads = 0

    async def get(
        self, resource: Resource, name: str, namespace: str | None = None, **kw: Any
    ) -> JSONObject:
        obj = await super().get(resource, name, namespace, **kw)
        self.reads += 1
        self._hook(self.reads)
        return obj


async def after_read(cluster: Cluster, hook: Callable[[int], None]) -> AfterRead:
    return AfterRead(await cluster.configuration(CONTROLLER), hook)


class Recording(KubeAPI):
    """The real client, keeping the method, path and body of every request it sends."""

    def __init__(self, configuration: Any) -> None:
        super().__init__(configuration)
        self.sent: list[tuple[str, str, Any]] = []

    async def request(
        self, method: str, resource: Resource, verb: str, path: str, **kw: Any
    ) -> Any:
        self.sent.append((method, path, kw.get("body")))
        return await super().request(method, resource, verb, path, **kw)


class FakeClock:
    """Monotonic time that moves only when the writer sleeps; ``on_sleep`` runs each time."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self.on_sleep: Callable[[int], None] = lambda n: None

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        self.on_sleep(len(self.sleeps))
        await asyncio.sleep(0)
