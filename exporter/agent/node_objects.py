"""The agent's own objects as the API server has them (read only): its Node, its Lease, its pods.

Three informers with field selectors, so each agent reads only what concerns its node: 100+
joining nodes add watches, not writes, and each first list is spread by a random delay.
"""

from __future__ import annotations

import asyncio

from exporter.kube.api import KubeAPI
from exporter.kube.convert import lease_info, node_info, pod_info
from exporter.kube.informer import Informer
from exporter.kube.resources import LEASES, NODES, PODS
from exporter.model.kube import LEASE_NAMESPACE, LeaseInfo, NodeInfo, PodInfo


class NodeObjects:
    def __init__(self, api: KubeAPI, node_name: str, *, initial_jitter_seconds: float) -> None:
        self.node_name = node_name
        self._node = Informer(
            api,
            NODES,
            node_info,
            field_selector=f"metadata.name={node_name}",
            initial_jitter_seconds=initial_jitter_seconds,
        )
        self._lease = Informer(
            api,
            LEASES,
            lease_info,
            namespace=LEASE_NAMESPACE,
            field_selector=f"metadata.name={node_name}",
            initial_jitter_seconds=initial_jitter_seconds,
        )
        self._pods = Informer(
            api,
            PODS,
            pod_info,
            field_selector=f"spec.nodeName={node_name}",
            initial_jitter_seconds=initial_jitter_seconds,
        )
        self._informers: tuple[Informer[NodeInfo] | Informer[LeaseInfo] | Informer[PodInfo], ...]
        self._informers = (self._node, self._lease, self._pods)

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            for informer in self._informers:
                group.create_task(informer.run(), name=f"informer {informer.name}")

    async def wait_synced(self) -> None:
        for informer in self._informers:
            await informer.wait_synced()

    @property
    def synced(self) -> bool:
        return all(i.synced for i in self._informers)

    @property
    def up(self) -> bool:
        return all(i.up and i.synced for i in self._informers)

    @property
    def last_success(self) -> float | None:
        times = [i.last_success for i in self._informers]
        return None if None in times else min(t for t in times if t is not None)

    @property
    def error(self) -> str:
        errors = [f"{i.name}: {i.last_error}" for i in self._informers if not i.up]
        return "; ".join(errors) if errors else ""

    def pods(self) -> tuple[PodInfo, ...] | None:
        """The pods bound to this node, or None while that view is not trustworthy (not synced,
        or the watch is failing): drift must never be computed from a partial list."""
        if not (self._pods.synced and self._pods.up):
            return None
        return tuple(self._pods.store.values())

    def node(self) -> NodeInfo | None:
        return self._node.store.get(self.node_name)

    def lease(self) -> LeaseInfo | None:
        return self._lease.store.get(f"{LEASE_NAMESPACE}/{self.node_name}")
