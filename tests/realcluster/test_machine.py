"""A real node joins and leaves the machine as it found it: no sysctl written, no iptables
chain, no mount, cgroup or process left, and the machine's /bin, /sbin, /lib and /lib64 as they
were."""

from __future__ import annotations

import pytest

from tests.realcluster.helpers import create_pod, namespace, pod, wait_phase
from tests.realcluster.machine import snapshot
from tests.support.realcluster import RealChain

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(300)]


def test_a_node_that_joins_runs_a_pod_and_leaves_changes_nothing_on_the_machine(
    realchain: RealChain,
) -> None:
    cluster_dir = realchain.cluster.plane.dir
    before = snapshot(cluster_dir)
    assert not [c for c in before.cgroups if "kubepods" in c.split("/")[1]]
    assert set(before.root_entries) == {"/bin", "/sbin", "/lib", "/lib64"}

    node = realchain.join()
    with namespace(realchain.api) as ns:
        create_pod(realchain.api, ns, pod("sleeper", node))
        wait_phase(realchain.api, ns, "sleeper", "Running")
        marks = {node.namespace.identity or ""}, {node.cgroup_root}
        during = snapshot(cluster_dir, *marks)
        # The check sees a node: its processes and its cgroups are there while it runs...
        assert set(during.processes) > set(before.processes)
        pod_cgroups = [c for c in during.cgroups if "/kubepods/besteffort/pod" in c]
        assert {c.split("/")[0] for c in pod_cgroups} >= {"memory", "cpu", "unified"}
        # ... while the machine's settings are untouched even now (kubelet wrote into the files
        # bind-mounted over them, if anything) and nothing is mounted on the machine.
        assert during.sysctls == before.sysctls
        assert during.iptables == before.iptables
        assert during.mounts == before.mounts
        assert during.root_entries == before.root_entries
        # The controller-manager's FlexVolume prober made its directory in the cluster's.
        assert realchain.cluster.plane.flexvolume_dir.is_dir()
        realchain.leave(node)

    # The node's namespace is gone (leftovers() checks it was empty when let go): its inode
    # number may belong to another program's namespace now, so only its cgroups mark it.
    after = snapshot(cluster_dir, set(), {node.cgroup_root})
    assert after.sysctls == before.sysctls
    assert after.iptables == before.iptables
    assert after.mounts == before.mounts
    assert after.cgroups == before.cgroups
    assert after.processes == before.processes
    assert after.root_entries == before.root_entries
    assert node.leftovers() == []
