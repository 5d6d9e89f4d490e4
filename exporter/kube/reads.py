"""Reads of single objects and small lists that the writers and the steps make, live from the
API server (no cache): a Node, a pod, the pods bound to a node. A read takes no token of the
write budget. An object the API server answers that cannot be read raises InvalidResponse
naming the field (exporter.kube.convert); "not found" is None.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from exporter.kube.api import KubeAPI
from exporter.kube.convert import ConversionError, decoded, node_info, pod_info
from exporter.kube.errors import InvalidResponse, NotFound
from exporter.kube.objects import ApiStruct
from exporter.kube.resources import NODES, PODS, Resource
from exporter.model.kube import NodeInfo, PodInfo

log = logging.getLogger(__name__)

T = TypeVar("T")


class WritableMeta(ApiStruct, frozen=True, gc=False):
    uid: str = ""
    resource_version: str = ""
    annotations: dict[str, str] | None = None
    deletion_timestamp: str | None = None


class WritableNodeSpec(ApiStruct, frozen=True, gc=False):
    unschedulable: bool | None = None
    #: Written back whole (the API replaces the list): each taint kept as it was read.
    taints: list[dict[str, Any]] | None = None


class WritableNode(ApiStruct, frozen=True, gc=False):
    """What the Node writers read of a Node before they write it."""

    metadata: WritableMeta = WritableMeta()
    spec: WritableNodeSpec = WritableNodeSpec()


class ObjectReads:
    def __init__(self, api: KubeAPI) -> None:
        self._api = api

    async def raw(self, resource: Resource, name: str, namespace: str | None = None) -> Any:
        """The object as the API server answers it; None when it does not exist."""
        try:
            return await self._api.get(resource, name, namespace)
        except NotFound:
            return None

    async def get_node(self, name: str) -> NodeInfo | None:
        raw = await self.raw(NODES, name)
        return None if raw is None else _read(node_info, raw, f"node {name}")

    async def get_pod(self, namespace: str, name: str) -> PodInfo | None:
        raw = await self.raw(PODS, name, namespace)
        return None if raw is None else _read(pod_info, raw, f"pod {namespace}/{name}")

    async def writable_node(self, name: str) -> WritableNode | None:
        """What a Node writer needs of the Node: its version, uid, annotations, deletion,
        unschedulable and taints."""
        raw = await self.raw(NODES, name)
        if raw is None:
            return None
        return _read(lambda obj: decoded(obj, WritableNode), raw, f"node {name}")

    async def list_pods_on_node(self, node: str) -> list[PodInfo]:
        """The pods bound to ``node``, read from the API server now (a consistent read, not
        the watch cache). A pod that cannot be read is left out and logged."""
        page = await self._api.list(PODS, field_selector=f"spec.nodeName={node}")
        pods: list[PodInfo] = []
        for item in page.items:
            try:
                pods.append(pod_info(item))
            except ConversionError as exc:
                log.warning("skipping a pod that cannot be read", extra={"error": str(exc)})
        return pods


def _read(convert: Callable[[Any], T], raw: Any, what: str) -> T:
    try:
        return convert(raw)
    except ConversionError as exc:
        raise InvalidResponse(200, "InvalidResponse", f"{what}: {exc}") from exc
