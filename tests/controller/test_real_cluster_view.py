"""The controller's API side against a real kube-apiserver 1.20, as its service account with the
shipped RBAC: the cluster view (ClusterWatch: every Node and node Lease, and the pods that start
on new nodes) and the leader elector
are current again within 5 s of a restarted server's return, after an outage long enough for
every client's backoff to have grown."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest

from exporter.controller.cluster import ClusterWatch
from exporter.kube.convert import lease_info
from exporter.kube.leader import LeaderElector
from exporter.model.kube import LEASE_NAMESPACE
from exporter.model.rfc3339 import format_micro_time
from nodesync_sim.real.kube_apiserver import (
    CONTROLLER,
    SERVICE_ACCOUNT_NAMESPACE,
    LocalKubeAPIServer,
)
from tests.support.realkube import (
    CONTROLLER_RBAC,
    LEADER_ELECTION_RBAC,
    MERGE_PATCH,
    FailureCounter,
    all_closed,
    apply_rbac,
    code,
    connect,
    outage,
    received,
    requests,
    user_of,
    wait_allowed,
)
from tests.support.wait import until_async

pytestmark = [pytest.mark.kubeapi, pytest.mark.timeout(120)]

#: How soon after the server's return the views must be current again (the issue's bound).
RECOVERY = 5.0
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases"


def _lease(node: str, renewed: float) -> dict[str, Any]:
    return {
        "metadata": {"name": node, "namespace": LEASE_NAMESPACE},
        "spec": {
            "holderIdentity": node,
            "leaseDurationSeconds": 40,
            "renewTime": format_micro_time(renewed),
        },
    }


def _renew(server: LocalKubeAPIServer, node: str) -> float:
    """What kubelet does every 10 s; the renew time as the product reads it back."""
    patch = {"spec": {"renewTime": format_micro_time(time.time())}}
    lease = server.ok("PATCH", f"{LEASES}/{node}", patch, content_type=MERGE_PATCH)
    renewed = lease_info(lease).renew_time
    assert renewed is not None
    return renewed


async def test_cluster_view_and_leader_are_current_within_5s_of_the_servers_return(
    private_kubeapi: LocalKubeAPIServer,
) -> None:
    server = private_kubeapi
    server.ok("POST", "/api/v1/namespaces", {"metadata": {"name": SERVICE_ACCOUNT_NAMESPACE}})
    apply_rbac(server, CONTROLLER_RBAC)
    apply_rbac(server, LEADER_ELECTION_RBAC)
    wait_allowed(server, CONTROLLER, "/api/v1/nodes")
    wait_allowed(server, CONTROLLER, LEASES)
    server.ok("POST", "/api/v1/nodes", {"metadata": {"name": "old-node"}})
    server.ok("POST", LEASES, _lease("old-node", time.time()))

    failures = FailureCounter()
    async with await connect(server, CONTROLLER, observer=failures) as api:
        watch = ClusterWatch(api, wave_label=None, wave_gap=60.0)
        # The retry period is the default (it sets how soon a candidate tries again); the
        # lease is short so that the outage below outlasts the renew deadline.
        elector = LeaderElector(
            api,
            namespace=SERVICE_ACCOUNT_NAMESPACE,
            name="nodesync-controller",
            identity="controller-0",
            lease_duration=6.0,
            renew_deadline=4.0,
            retry_period=2.0,
        )
        watch.start()
        election = asyncio.create_task(elector.run())
        try:
            async with asyncio.timeout(20):
                await watch.wait_synced()
                await elector.wait_leader()
            await until_async(
                lambda: (
                    watch.view().node("old-node") is not None
                    and watch.lease_renew_time("old-node") is not None
                ),
                timeout=10.0,
                what="the old node and its Lease",
            )
            assert watch.status().up

            def failed_for_long() -> bool:
                # Each watch failed three times (its backoff grew to the cap), and the leader
                # failed to renew and stepped down at its renew deadline.
                informers = (watch.nodes, watch.leases)
                return (
                    all(not i.up and i.last_error is not None for i in informers)
                    and failures.failed("nodes") >= before_nodes + 3
                    and failures.failed("leases") >= before_leases + 3
                    and failures.leader_election_errors >= before_elector + 2
                    and not elector.is_leader
                )

            before_nodes, before_leases = failures.failed("nodes"), failures.failed("leases")
            before_elector = failures.leader_election_errors
            returned = await outage(server, failed_for_long)
            returned_at = time.time()

            # What changed after the return: a node joined, the old node renewed its Lease.
            server.ok("POST", "/api/v1/nodes", {"metadata": {"name": "new-node"}})
            renewed = _renew(server, "old-node")
            seen: dict[str, float] = {}

            def current() -> bool:
                now = time.monotonic() - returned
                if "node" not in seen and watch.view().node("new-node") is not None:
                    seen["node"] = now
                if "lease" not in seen and watch.lease_renew_time("old-node") == renewed:
                    seen["lease"] = now
                if "leader" not in seen and elector.is_leader:
                    seen["leader"] = now
                return len(seen) == 3

            await until_async(current, timeout=30, what="the view and the leader after the return")
        finally:
            election.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await election
            await watch.stop()
    await all_closed(server)

    print(f"recovery after the server's return: {seen}")
    assert max(seen.values()) <= RECOVERY, seen
    assert watch.status().up
    # Everything it did, it did as the controller's service account within the shipped RBAC.
    # While the server starts, before /readyz is 200, its authorizer refuses what its caches
    # do not hold yet (403); from the return on, nothing is refused.
    controller = requests(server, user=user_of(server, CONTROLLER), product=True)
    # Nodes and Leases for the view, Pods for the join stages' first pod Running.
    assert {e["objectRef"]["resource"] for e in controller} == {"nodes", "leases", "pods"}
    refused = [e for e in controller if code(e) == 403]
    assert all(received(e) < returned_at for e in refused), refused
