"""A real cluster: a control plane and real nodes that join and leave.

    cluster = RealCluster(Binaries.in_directory(path), etcd="/usr/bin/etcd")
    cluster.start()                      # the control plane, ~8 s
    node = cluster.add_node()            # a kubelet joins; returns once its Node is Ready
    ...
    cluster.remove_node(node)            # its processes, cgroups, files and Node object go
    cluster.cleanup()

Nodes are named after loopback addresses, 127.0.0.2 upwards, never reused within one cluster.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from nodesync_sim.real.control_plane import Binaries, ControlPlane, ControlPlaneTimers
from nodesync_sim.real.network import ClusterNetwork, node_addresses
from nodesync_sim.real.node import KUBELET_PORT, NodeSpec, RealNode
from nodesync_sim.real.process import port_free

READY_TIMEOUT = 90.0
_POLL = 0.1


def condition(node: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    """The condition ``kind`` of a Node object ({} if it has none)."""
    for item in (node.get("status") or {}).get("conditions") or ():
        if item.get("type") == kind:
            return dict(item)
    return {}


class RealCluster:
    def __init__(
        self,
        binaries: Binaries,
        etcd: str,
        timers: ControlPlaneTimers | None = None,
        base_dir: str | None = None,
        *,
        service_accounts: bool = False,
    ) -> None:
        self.binaries = binaries
        self.plane = ControlPlane(
            binaries, etcd, timers, base_dir, service_accounts=service_accounts
        )
        self.nodes: dict[str, RealNode] = {}
        self._removed: list[RealNode] = []
        self._next_address = 2
        self.network: ClusterNetwork | None = None
        """The cluster's own network, made when the first node asks for it."""

    @property
    def api(self) -> Any:
        """The API server (:class:`~nodesync_sim.real.kube_apiserver.LocalKubeAPIServer`)."""
        return self.plane.apiserver

    def start(self) -> None:
        self.plane.start()

    def node_path(self, name: str) -> str:
        return f"/api/v1/nodes/{name}"

    def add_node(
        self,
        labels: Mapping[str, str] | None = None,
        *,
        runtime_request_timeout: str = "2m",
        containerd_bin_dir: str | None = None,
        wait_ready: bool = True,
        network: bool = False,
    ) -> RealNode:
        """A fresh node joins; waits until its Node is Ready (unless ``wait_ready`` is False).
        ``containerd_bin_dir``: the node's containerd release (:attr:`NodeSpec.containerd_bin_dir`),
        the machine's when None. With ``network`` it has a network namespace of its own on the
        cluster's network and its pods get addresses (nodesync_sim.real.network); else it shares
        the machine's network, where only host-network pods run."""
        # A node with a network of its own serves kubelet on its address' fixed port: an
        # address whose port is taken (another cluster on this machine) is skipped.
        while network and self._next_address <= 254:
            if port_free(f"127.0.0.{self._next_address}", KUBELET_PORT):
                break
            self._next_address += 1
        if self._next_address > 254:
            raise RuntimeError("no loopback address left for a node")
        name = f"127.0.0.{self._next_address}"
        self._next_address += 1
        spec = NodeSpec(
            name=name,
            labels=dict(labels or {}),
            runtime_request_timeout=runtime_request_timeout,
            containerd_bin_dir=containerd_bin_dir,
            addresses=node_addresses(self._next_address - 2) if network else None,
        )
        if network and self.network is None:
            self.network = ClusterNetwork(self.plane.dir / "network")
            self.network.start()
            self._serve_api_to_pods(self.network)
        node = RealNode(
            spec,
            kubelet=self.binaries.kubelet,
            server_url=self.api.url,
            server_ca=self.api.ca_file,
            client_ca=self.plane.ca,
            base_dir=self.plane.dir / "nodes",
            network=self.network if network else None,
            kube_proxy=self.binaries.kube_proxy if network else None,
        )
        self.nodes[name] = node
        node.start()
        if wait_ready:
            self.wait_ready(name)
        return node

    def _serve_api_to_pods(self, network: ClusterNetwork) -> None:
        """Pods reach the API server as in any cluster: the ``kubernetes`` Service, whose
        endpoint (written here, as the API server's own reconciler would) is the router's
        address, relayed to the API server. Its certificate names the Service's address."""
        port = int(self.api.url.rsplit(":", 1)[1])
        address = network.publish(port)
        endpoints = {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {"name": "kubernetes", "namespace": "default"},
            "subsets": [
                {"addresses": [{"ip": address}], "ports": [{"name": "https", "port": port}]}
            ],
        }
        path = "/api/v1/namespaces/default/endpoints/kubernetes"
        if self.api.request("GET", path).status == 404:
            self.api.ok("POST", "/api/v1/namespaces/default/endpoints", endpoints)
        else:
            self.api.ok("PUT", path, endpoints)

    def node_object(self, name: str) -> dict[str, Any] | None:
        answer = self.api.request("GET", self.node_path(name))
        return answer.body if answer.status == 200 else None

    def wait_ready(self, name: str, timeout: float = READY_TIMEOUT) -> dict[str, Any]:
        """Until the Node ``name`` is Ready; returns it."""
        node = self.nodes[name]

        def ready() -> dict[str, Any] | None:
            kubelet = node.kubelet
            if kubelet is not None and not kubelet.running:
                raise RuntimeError(f"kubelet of {name} exited:\n{kubelet.log_tail()}")
            found = self.node_object(name)
            if found is not None and condition(found, "Ready").get("status") == "True":
                return found
            return None

        deadline = time.monotonic() + timeout
        while (found := ready()) is None:
            if time.monotonic() > deadline:
                tail = node.kubelet.log_tail() if node.kubelet else ""
                raise TimeoutError(f"node {name} not Ready within {timeout:g} s:\n{tail}")
            time.sleep(_POLL)
        return found

    def remove_node(self, node: RealNode) -> None:
        """The node leaves: its processes and traces go, its pods and Node object are deleted."""
        node.cleanup()
        self.nodes.pop(node.name, None)
        self._removed.append(node)
        api = self.api
        pods = api.ok("GET", f"/api/v1/pods?fieldSelector=spec.nodeName={node.name}")["items"]
        for pod in pods:
            meta = pod["metadata"]
            api.request(
                "DELETE",
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                {"gracePeriodSeconds": 0},
            )
        api.request("DELETE", self.node_path(node.name))
        api.request(
            "DELETE", f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node.name}"
        )
        api.wait_gone(self.node_path(node.name), timeout=30)

    def cleanup(self) -> None:
        for node in list(self.nodes.values()):
            node.cleanup()
        if self.network is not None:
            self.network.stop()
        self.plane.cleanup()

    def leftovers(self) -> list[str]:
        found = self.plane.leftovers()
        if self.network is not None:
            found += self.network.leftovers()
        for node in [*self.nodes.values(), *self._removed]:
            found += node.leftovers()
        return found
