"""kube-controller-manager's node lifecycle controller, for the nodes the simulator manages.

Without it a node whose kubelet went silent would stay Ready forever in the API server. It
watches Nodes and the Leases in kube-node-lease; once a managed node's Lease has not been renewed,
and its Ready condition has had no heartbeat, for ``node_monitor_grace_seconds``, it sets every
condition of the node to Unknown (reason ``NodeStatusUnknown``, "Kubelet stopped posting node
status."), keeping the last heartbeat, and turns the Ready condition of every pod bound to it
False (its MarkPodsNotReady), as the real controller does. It adds no taints and evicts
nothing (the real one taints node.kubernetes.io/unreachable; nodesync's rules do not read it).
Nodes it does not manage are never written.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from exporter.kube.errors import KubeError, NotFound
from exporter.kube.informer import Informer
from exporter.model.kube import LEASE_NAMESPACE, LeaseInfo, NodeInfo
from exporter.model.rfc3339 import format_time
from nodesync_sim.fake.scaleout import objects, timeline
from nodesync_sim.fake.scaleout.client import KubeletClient
from nodesync_sim.fake.scaleout.pods import PodIndex
from nodesync_sim.fake.scaleout.timeline import ScenarioClock, Timeline

log = logging.getLogger(__name__)


def silent_since(node: NodeInfo, lease: LeaseInfo | None) -> float:
    """The last sign of life of a node's kubelet: its Lease renewal or its Ready heartbeat,
    whichever is later (the Node's creation when there is neither)."""
    ready = node.condition("Ready")
    signs = [node.created_at]
    if lease is not None and lease.renew_time is not None:
        signs.append(lease.renew_time)
    if ready is not None and ready.last_heartbeat is not None:
        signs.append(ready.last_heartbeat)
    return max(signs)


def needs_unknown(node: NodeInfo, lease: LeaseInfo | None, now: float, grace: float) -> bool:
    ready = node.condition("Ready")
    if ready is not None and ready.status == "Unknown":
        return False
    return now - silent_since(node, lease) > grace


class NodeLifecycle:
    def __init__(
        self,
        managed: Iterable[str],
        client: KubeletClient,
        nodes: Informer[NodeInfo],
        leases: Informer[LeaseInfo],
        *,
        grace_seconds: float,
        clock: ScenarioClock,
        timeline: Timeline,
        pods: PodIndex | None = None,
    ) -> None:
        self._pods = pods
        self._managed = frozenset(managed)
        self._client = client
        self.nodes = nodes
        self.leases = leases
        self._grace = grace_seconds
        self._clock = clock
        self._timeline = timeline
        self.period = min(1.0, grace_seconds / 5)

    async def run(self) -> None:
        """Check every ``period`` until cancelled (the informers run elsewhere)."""
        await self.nodes.wait_synced()
        await self.leases.wait_synced()
        while True:
            try:
                await self.check_once()
            except KubeError as exc:
                log.warning("simulated node lifecycle controller: %s", exc)
            await asyncio.sleep(self.period)

    async def check_once(self) -> list[str]:
        """Mark the silent managed nodes Unknown; the names marked."""
        now = self._clock.now()
        marked = []
        for name in sorted(self._managed):
            node = self.nodes.store.get(name)
            if node is None:
                continue
            lease = self.leases.store.get(f"{LEASE_NAMESPACE}/{name}")
            if not needs_unknown(node, lease, now, self._grace):
                continue
            conditions = objects.unknown_conditions()
            transitions = {c.type: now for c in conditions}
            status = {"conditions": objects.conditions_json(conditions, transitions, None)}
            try:
                await self._client.patch_node_status(name, status)
            except NotFound:
                continue
            self._timeline.record(name, timeline.READY_UNKNOWN, at=self._clock.now())
            marked.append(name)
            await self._pods_not_ready(name, now)
        return marked

    async def _pods_not_ready(self, node: str, now: float) -> None:
        """The node's pods are not ready any more (kube-controller-manager's MarkPodsNotReady:
        only the Ready condition changes)."""
        if self._pods is None:
            return
        condition = {
            "type": "Ready",
            "status": "False",
            "lastTransitionTime": format_time(now),
        }
        for pod in list(self._pods.on(node).values()):
            if pod.info.terminal:
                continue
            await self._client.patch_pod_status(
                pod.info.namespace, pod.info.name, {"conditions": [condition]}
            )
