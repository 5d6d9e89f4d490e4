"""Real nodes with networks of their own: pods get addresses and reach each other across nodes.

Each node here has its own network namespace on the cluster's bridge (nodesync_sim.real.network),
as hosts have their own network: its kubelet serves on the standard ports, the nodesync agent
reads kubelet's healthz on the node's own loopback as the DaemonSet does, pods get addresses of
the node's pod subnet from the bridge CNI plugin. The machine's own network gets nothing.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess

import pytest

from nodesync_sim.real.network import NODE_SUBNET
from tests.realcluster.helpers import create_pod, kubectl, namespace, pod, wait_phase, wait_value
from tests.support.realcluster import RealChain
from tests.support.wait import until

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(300)]

SERVE = ["/bin/busybox", "httpd", "-f", "-p", "8080", "-h", "/etc"]
FETCH = ["/bin/busybox", "wget", "-qO-"]
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
IN_CLUSTER = (
    "/bin/busybox wget -qO- --no-check-certificate"
    f' --header "Authorization: Bearer $(/bin/busybox cat {SERVICE_ACCOUNT}/token)"'
    " https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/version"
)


def _machine_network() -> dict[str, object]:
    """The machine's links, addresses and routes, as ``ip`` reports them."""
    found: dict[str, object] = {}
    for what in (["-j", "addr"], ["-j", "route"], ["-j", "-6", "route"]):
        out = subprocess.run(["ip", *what], capture_output=True, text=True, check=True).stdout
        items = json.loads(out)
        for item in items:  # counters and lifetimes move on their own
            item.pop("stats64", None)
            for info in item.get("addr_info", []):
                info.pop("valid_life_time", None)
                info.pop("preferred_life_time", None)
        found[" ".join(what)] = items
    return found


def exec_in(chain: RealChain, ns: str, pod: str, argv: list[str]) -> str | None:
    """What ``argv`` printed in the pod; None if it failed (a server may not listen yet,
    kube-proxy not have synced)."""
    try:
        return kubectl(chain, "-n", ns, "exec", pod, "--", *argv)
    except AssertionError:
        return None


def test_pods_get_addresses_and_reach_each_other_across_nodes(realchain: RealChain) -> None:
    api = realchain.api
    before = _machine_network()
    nodes = [realchain.join(network=True), realchain.join(network=True)]
    try:
        for node in nodes:
            # The agent of each node sees its kubelet through the node's own loopback.
            wait_value(realchain, f'nodesync_kubelet_healthy{{node="{node.name}"}}', 1)
            found = api.ok("GET", f"/api/v1/nodes/{node.name}")
            addresses = {a["type"]: a["address"] for a in found["status"]["addresses"]}
            assert node.spec.addresses is not None
            assert addresses == {
                "InternalIP": str(node.spec.addresses.address),
                "Hostname": node.name,
            }
            assert ipaddress.ip_address(addresses["InternalIP"]) in NODE_SUBNET

        with namespace(api) as ns:
            create_pod(api, ns, pod("server", nodes[1], SERVE, host_network=False))
            create_pod(api, ns, pod("client", nodes[0], host_network=False))
            server, client = (wait_phase(api, ns, name, "Running") for name in ("server", "client"))
            for found, node in ((server, nodes[1]), (client, nodes[0])):
                assert node.spec.addresses is not None
                address = ipaddress.ip_address(found["status"]["podIP"])
                assert address in node.spec.addresses.pod_subnet, (address, node.name)

            # From the client's network to the server's, across the cluster's bridge; the
            # exec itself goes API server -> the node's name -> kubelet on the node's network.
            url = f"http://{server['status']['podIP']}:8080/passwd"

            def fetch(url: str) -> str | None:
                return exec_in(realchain, ns, "client", [*FETCH, url])

            body = until(lambda: fetch(url), timeout=60, what=f"{url} from the client pod")
            assert body.startswith("root:x:0:0")

            # Through a Service's cluster address: kube-proxy of the client's node rewrites it
            # to the server pod's, in that node's network only.
            service = api.ok(
                "POST",
                f"/api/v1/namespaces/{ns}/services",
                {
                    "metadata": {"name": "server"},
                    "spec": {
                        "selector": {"app": "server"},
                        "ports": [{"port": 80, "targetPort": 8080}],
                    },
                },
            )
            via = f"http://{service['spec']['clusterIP']}/passwd"
            body = until(lambda: fetch(via), timeout=60, what=f"{via} from the client pod")
            assert body.startswith("root:x:0:0")

            # In-cluster clients reach the API server through the kubernetes Service, with
            # their service account's token.
            version = until(
                lambda: exec_in(realchain, ns, "client", ["/bin/busybox", "sh", "-c", IN_CLUSTER]),
                timeout=60,
                what="the API server's /version from the client pod",
            )
            assert json.loads(version)["gitVersion"].startswith("v1.20")

        # Nothing of this reached the machine's own network.
        assert _machine_network() == before
    finally:
        for node in nodes:
            realchain.leave(node)
    assert _machine_network() == before
