"""The few API writes a kubelet (and the node lifecycle controller) makes, over the real client.

Everything goes through :class:`exporter.kube.api.KubeAPI`, so the simulated nodes talk REST to
the API server exactly as nodesync's own components do, and show up in its request counters.
"""

from __future__ import annotations

from typing import Any, Final

from exporter.kube.api import JSONObject, KubeAPI
from exporter.kube.errors import Conflict, NotFound
from exporter.kube.resources import LEASES, NODES, PODS, Resource
from exporter.model.kube import LEASE_NAMESPACE
from exporter.model.rfc3339 import format_micro_time

STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"


def _status_path(resource: Resource, name: str, namespace: str | None = None) -> str:
    return resource.path(namespace, name) + "/status"


class KubeletClient:
    """Node, Lease and Pod writes of a kubelet, and the status writes of the node lifecycle
    controller."""

    def __init__(self, api: KubeAPI) -> None:
        self.api = api

    async def _call(
        self,
        method: str,
        resource: Resource,
        verb: str,
        path: str,
        body: Any = None,
        content_type: str | None = None,
    ) -> JSONObject:
        answer = await self.api.request(
            method, resource, verb, path, body=body, content_type=content_type
        )
        return answer if isinstance(answer, dict) else {}

    # ------------------------------------------------------------------ nodes

    async def register_node(self, body: JSONObject) -> JSONObject:
        """Create the Node; when it exists already, take it over (as kubelet does)."""
        try:
            return await self._call("POST", NODES, "create", NODES.path(), body)
        except Conflict:
            return await self.api.get(NODES, body["metadata"]["name"])

    async def patch_node_status(self, name: str, status: JSONObject) -> JSONObject:
        """Strategic merge patch of nodes/status: conditions merge by type."""
        return await self._call(
            "PATCH",
            NODES,
            "patch",
            _status_path(NODES, name),
            {"status": status},
            STRATEGIC_MERGE_PATCH,
        )

    # ------------------------------------------------------------------ leases

    async def create_lease(self, node: str, node_uid: str, duration: int, now: float) -> JSONObject:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": node,
                "namespace": LEASE_NAMESPACE,
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}
                ],
            },
            "spec": {
                "holderIdentity": node,
                "leaseDurationSeconds": duration,
                "renewTime": format_micro_time(now),
            },
        }
        try:
            return await self._call("POST", LEASES, "create", LEASES.path(LEASE_NAMESPACE), body)
        except Conflict:
            return await self.api.get(LEASES, node, LEASE_NAMESPACE)

    async def renew_lease(self, lease: JSONObject, now: float) -> JSONObject:
        """Update the Lease's renewTime with the version last seen (kubelet's way); on a
        conflict, read it again and retry once."""
        name = lease["metadata"]["name"]
        path = LEASES.path(LEASE_NAMESPACE, name)
        for attempt in range(2):
            body = {**lease, "spec": {**lease.get("spec", {}), "renewTime": format_micro_time(now)}}
            try:
                return await self._call("PUT", LEASES, "update", path, body)
            except Conflict:
                if attempt:
                    raise
                lease = await self.api.get(LEASES, name, LEASE_NAMESPACE)
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------ pods

    async def create_pod(self, body: JSONObject) -> JSONObject | None:
        """Create a pod bound to its node; None when one of that name exists already."""
        namespace = body["metadata"]["namespace"]
        try:
            return await self._call("POST", PODS, "create", PODS.path(namespace), body)
        except Conflict:
            return None

    async def patch_pod_status(self, namespace: str, name: str, status: JSONObject) -> bool:
        """False when the pod is gone."""
        try:
            await self._call(
                "PATCH",
                PODS,
                "patch",
                _status_path(PODS, name, namespace),
                {"status": status},
                STRATEGIC_MERGE_PATCH,
            )
        except NotFound:
            return False
        return True

    async def confirm_pod_deleted(self, namespace: str, name: str, uid: str) -> bool:
        """The kubelet's final delete of a gracefully deleted pod: grace 0, only this uid.
        False when it was gone (or replaced) already."""
        options = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": uid},
        }
        try:
            await self._call("DELETE", PODS, "delete", PODS.path(namespace, name), options)
        except (NotFound, Conflict):
            return False
        return True
