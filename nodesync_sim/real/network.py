"""The cluster's own network: a bridge in a namespace of its own, each node on it through a veth.

Real hosts each have a network of their own; so does each node here, without the machine's own
network ever getting an address, a route or a rule:

- a **router** namespace (a holder process, ``unshare --net``) with a bridge ``br0`` carrying
  :data:`NODE_SUBNET`'s first address, forwarding on, and a route to each node's pod subnet via
  that node;
- each **node** namespace (the node's own holder, made with ``--net``) gets one end of a veth
  pair as ``eth0`` with the node's address and a default route via the router, forwarding on; its
  pods get addresses of the node's pod subnet from the bridge CNI plugin (:func:`bridge_cni`).

Every ``net.*`` setting written here is the namespace's own. Everything goes with the namespaces'
last process: nothing is removed on the machine. The control plane, Prometheus and the tests
stay on the machine's loopback; ``nodesync_sim.real.forward`` relays what has to cross.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodesync_sim.real.forward import start_relay
from nodesync_sim.real.process import ChildProcess

NODE_SUBNET = ipaddress.IPv4Network("10.213.0.0/24")
POD_SUPERNET = ipaddress.IPv4Network("10.214.0.0/16")
ROUTER_ADDRESS = NODE_SUBNET.network_address + 1
_TIMEOUT = 30.0


class NetworkError(RuntimeError):
    """A namespace, link, address or route could not be made."""


@dataclass(frozen=True)
class NodeAddresses:
    """What the network gave a node."""

    index: int
    address: ipaddress.IPv4Address
    pod_subnet: ipaddress.IPv4Network

    @property
    def gateway(self) -> ipaddress.IPv4Address:
        return ROUTER_ADDRESS


def node_addresses(index: int) -> NodeAddresses:
    """The addresses of the ``index``-th node (1-based), the same for every cluster."""
    if not 1 <= index <= 240:
        raise NetworkError(f"node index {index} is out of range 1..240")
    return NodeAddresses(
        index=index,
        address=NODE_SUBNET.network_address + 10 + index,
        pod_subnet=list(POD_SUPERNET.subnets(new_prefix=24))[index],
    )


def bridge_cni(addresses: NodeAddresses) -> dict[str, Any]:
    """The node's CNI configuration: pods on a bridge of the node, addresses of its pod subnet,
    the bridge as their gateway (the node routes the rest)."""
    return {
        "cniVersion": "0.4.0",
        "name": "nodesync-pods",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": str(addresses.pod_subnet)}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    # host-local's leases inside the node's own state, not /var/lib/cni
                    "dataDir": "/run/containerd/cni-ipam",
                },
            },
            {"type": "loopback"},
        ],
    }


def kube_proxy_argv(binary: str, kubeconfig: Path, node_name: str) -> list[str]:
    """kube-proxy for a node on the cluster's network. It writes only what belongs to the node's
    network namespace (its iptables rules, ``net.*`` settings); the conntrack settings, which
    are the machine's, stay as they are (``--conntrack-*=0``)."""
    return [
        binary,
        f"--kubeconfig={kubeconfig}",
        f"--hostname-override={node_name}",
        f"--cluster-cidr={POD_SUPERNET}",
        "--proxy-mode=iptables",
        "--conntrack-max-per-core=0",
        "--conntrack-tcp-timeout-established=0",
        "--conntrack-tcp-timeout-close-wait=0",
        "--healthz-bind-address=127.0.0.1:10256",
        "--metrics-bind-address=127.0.0.1:10249",
        "--oom-score-adj=0",
    ]


def in_netns(pid: int, *argv: str) -> None:
    """Run ``argv`` in the network namespace of ``pid``; fail with its output."""
    result = subprocess.run(
        ["nsenter", f"--net=/proc/{pid}/ns/net", "--", *argv],
        capture_output=True,
        text=True,
        timeout=_TIMEOUT,
        check=False,
    )
    if result.returncode != 0:
        raise NetworkError(f"{' '.join(argv)}: {result.stderr.strip()}")


def _ip(pid: int, *argv: str) -> None:
    in_netns(pid, "ip", *argv)


def _forwarding_on(pid: int) -> None:
    in_netns(pid, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward")


class ClusterNetwork:
    """The router's namespace and the links to the nodes."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._holder: ChildProcess | None = None
        self._relay: ChildProcess | None = None

    @property
    def pid(self) -> int:
        pid = self._holder.pid if self._holder is not None else None
        if pid is None:
            raise NetworkError("the cluster network is not running")
        return pid

    @property
    def netns(self) -> str:
        return f"/proc/{self.pid}/ns/net"

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        holder = ChildProcess(
            ["unshare", "--net", "sleep", "infinity"],
            log_path=self.directory / "router.log",
            name="router",
        )
        holder.start()
        self._holder = holder
        own = _netns_of(os.getpid())
        holder.wait_until(
            lambda: _netns_of(self.pid) not in (None, own), timeout=_TIMEOUT, what="unshared"
        )
        router = self.pid
        _ip(router, "link", "set", "lo", "up")
        _ip(router, "link", "add", "br0", "type", "bridge")
        _ip(router, "addr", "add", f"{ROUTER_ADDRESS}/{NODE_SUBNET.prefixlen}", "dev", "br0")
        _ip(router, "link", "set", "br0", "up")
        _forwarding_on(router)

    def attach(self, node_pid: int, addresses: NodeAddresses) -> None:
        """Join the network namespace of ``node_pid`` to the bridge as ``addresses`` say."""
        router, link = self.pid, f"n{addresses.index}"
        _ip(router, "link", "add", link, "type", "veth", "peer", "eth0", "netns", str(node_pid))
        _ip(router, "link", "set", link, "master", "br0", "up")
        _ip(router, "route", "replace", str(addresses.pod_subnet), "via", str(addresses.address))
        _ip(node_pid, "link", "set", "lo", "up")
        _ip(node_pid, "addr", "add", f"{addresses.address}/{NODE_SUBNET.prefixlen}", "dev", "eth0")
        _ip(node_pid, "link", "set", "eth0", "up")
        _ip(node_pid, "route", "add", "default", "via", str(addresses.gateway))
        _forwarding_on(node_pid)

    def detach(self, addresses: NodeAddresses) -> None:
        """Forget a node's route (its veth went with its namespace)."""
        if self._holder is not None and self._holder.running:
            with contextlib.suppress(NetworkError):  # gone with the veth already
                _ip(self.pid, "route", "del", str(addresses.pod_subnet))

    def publish(self, port: int) -> str:
        """The machine's ``127.0.0.1:port`` reachable on the cluster's network at the router's
        address (for pods: the API server behind the ``kubernetes`` Service); that address."""
        if self._relay is None:
            relay = f"{self.netns},{ROUTER_ADDRESS}:{port}=/proc/self/ns/net,127.0.0.1:{port}"
            self._relay = start_relay([relay], self.directory / "relay.log", name="router relay")
        return str(ROUTER_ADDRESS)

    def stop(self) -> None:
        if self._relay is not None:
            self._relay.stop()
        if self._holder is not None:
            self._holder.stop()

    def leftovers(self) -> list[str]:
        return [f"{p.name} pid {p.pid}" for p in (self._holder, self._relay) if p and p.running]


def _netns_of(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None
