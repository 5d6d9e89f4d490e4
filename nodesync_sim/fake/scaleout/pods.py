"""The pods bound to each simulated node, from one watch of all pods.

One informer (list + watch, exporter.kube.informer) serves every simulated kubelet and every
simulated agent: a kubelet watches the pods bound to its node, and so does the agent; here the
watch is shared and split by ``spec.nodeName``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from exporter.kube.convert import decoded, pod_info
from exporter.kube.informer import DELETED, Informer
from exporter.kube.objects import ApiStruct
from exporter.model.kube import PodInfo

_EMPTY: Mapping[str, BoundPod] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class BoundPod:
    """A pod as its kubelet needs it: the agent's view plus the spec's container names."""

    info: PodInfo
    containers: tuple[str, ...]
    grace_seconds: int


class _Container(ApiStruct, frozen=True, gc=False):
    name: str


class _Spec(ApiStruct, frozen=True, gc=False):
    containers: list[_Container] | None = None
    termination_grace_period_seconds: int | None = None


class _PodSpec(ApiStruct, frozen=True, gc=False):
    """What a kubelet reads of a pod beyond the agent's view."""

    spec: _Spec | None = None


def bound_pod(obj: dict[str, Any]) -> BoundPod:
    """ConversionError (with the field's path) for a pod without the API's types."""
    info = pod_info(obj)
    spec = decoded(obj, _PodSpec).spec or _Spec()
    grace = spec.termination_grace_period_seconds
    names = tuple(c.name for c in spec.containers or ())
    return BoundPod(info, names, 30 if grace is None else grace)


class PodIndex:
    """Pods by node name and uid, kept current by the informer's handler."""

    def __init__(self, informer: Informer[BoundPod]) -> None:
        self.informer = informer
        self._by_node: dict[str, dict[str, BoundPod]] = {}
        informer.add_handler(self._changed)

    def _changed(self, type_: str, old: BoundPod | None, new: BoundPod | None) -> None:
        if old is not None:
            self._by_node.get(old.info.node_name, {}).pop(old.info.uid, None)
        if new is not None and type_ != DELETED and new.info.node_name:
            self._by_node.setdefault(new.info.node_name, {})[new.info.uid] = new

    def on(self, node: str) -> Mapping[str, BoundPod]:
        """The pods bound to ``node`` now, by uid (a live read-only view)."""
        pods = self._by_node.get(node)
        return MappingProxyType(pods) if pods is not None else _EMPTY

    @property
    def synced(self) -> bool:
        return self.informer.synced and self.informer.up


class NodeAPIView:
    """One node's view of the API server, as the agent's ``NodeObjects`` gives it to the
    agent's sync (exporter.agent.sync.APIView)."""

    def __init__(self, index: PodIndex, node: str) -> None:
        self._index = index
        self._node = node

    @property
    def up(self) -> bool:
        return self._index.synced

    @property
    def last_success(self) -> float | None:
        return self._index.informer.last_success

    @property
    def error(self) -> str:
        err = self._index.informer.last_error
        return "" if self.up or err is None else str(err)

    def pods(self) -> tuple[PodInfo, ...] | None:
        if not self._index.synced:
            return None
        return tuple(p.info for p in self._index.on(self._node).values())
