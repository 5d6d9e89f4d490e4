"""A scenario expanded into nodes, pods and faults: names, join times, who gets which fault."""

from __future__ import annotations

import pytest

from nodesync_sim.fake.scaleout.layout import OWNER_DAEMONSET, OWNER_REPLICASET, layout, share_count
from nodesync_sim.fake.scaleout.objects import node_body
from nodesync_sim.fake.scaleout.scenario import CNI_STARTUP_TAINT
from nodesync_sim.fake.scaleout.scenario_file import parse

SCENARIO = {
    "name": "layout",
    "seed": 3,
    "wave_label": "example.com/wave",
    "old_nodes": {"count": 2, "age_seconds": 600, "pods_per_node": 1},
    "waves": [
        {
            "name": "w",
            "count": 10,
            "start_seconds": 5,
            "join_spread_seconds": 20,
            "pods_per_node": 3,
            "daemonset_pods_per_node": 1,
            "faults": [
                {"kind": "never_ready", "share": 0.25},
                {
                    "kind": "oom_loop",
                    "nodes": ["w-003"],
                    "at_seconds": 7,
                    "for_seconds": 3,
                    "pods": 2,
                },
            ],
        }
    ],
    "real_node": {
        "name": "real",
        "wave": "w",
        "faults": [{"kind": "lease_stops", "at_seconds": 9}],
    },
}


def test_nodes_join_in_order_with_their_labels_and_pods() -> None:
    plan = layout(parse(SCENARIO))
    assert plan.names == ["old-000", "old-001", *(f"w-{i:03d}" for i in range(10)), "real"]
    old = plan.node("old-000")
    assert (old.role, old.join_at, old.age_seconds, old.wave) == ("old", 0.0, 600, None)
    assert "example.com/wave" not in old.labels
    w4 = plan.node("w-004")
    assert (w4.role, w4.join_at, w4.wave) == ("new", 5 + 4 * 20 / 10, "w")
    assert w4.labels == {
        "kubernetes.io/hostname": "w-004",
        "kubernetes.io/os": "linux",
        "example.com/wave": "w",
    }
    assert [(p.name, p.owner_kind) for p in w4.pods] == [
        ("daemon-0-w-004", OWNER_DAEMONSET),
        ("app-w-004-0", OWNER_REPLICASET),
        ("app-w-004-1", OWNER_REPLICASET),
        ("app-w-004-2", OWNER_REPLICASET),
    ]
    real = plan.node("real")
    assert (real.role, real.join_at) == ("real", 25.0)
    assert [(f.kind, f.start, f.end) for f in real.faults] == [("lease_stops", 9.0, None)]


def test_a_share_hits_the_same_nodes_every_time_and_names_hit_exactly() -> None:
    first = layout(parse(SCENARIO))
    again = layout(parse(SCENARIO))
    hit = [n.name for n in first.nodes if n.active("never_ready", 0.0)]
    assert len(hit) == share_count(0.25, 10) == 3
    assert hit == [n.name for n in again.nodes if n.active("never_ready", 0.0)]
    other_seed = layout(parse({**SCENARIO, "seed": 4}))
    assert len([n for n in other_seed.nodes if n.active("never_ready", 0.0)]) == 3
    oom = first.node("w-003")
    fault = oom.loop_fault("app-w-003-1", 8.0)
    assert fault is not None
    assert fault.pods == ("app-w-003-0", "app-w-003-1")
    assert oom.loop_fault("app-w-003-2", 8.0) is None
    assert oom.loop_fault("app-w-003-0", 6.9) is None
    assert oom.loop_fault("app-w-003-0", 10.0) is None  # for_seconds: over at 7 + 3


@pytest.mark.parametrize(
    ("share", "nodes", "hit"),
    [(0.01, 100, 1), (0.001, 100, 1), (0.05, 100, 5), (0.25, 10, 3), (1, 7, 7)],
)
def test_share_count_rounds_half_up_and_hits_at_least_one(
    share: float, nodes: int, hit: int
) -> None:
    assert share_count(share, nodes) == hit


def test_a_readiness_taint_names_its_key_while_it_is_active() -> None:
    wave = {
        "name": "w",
        "count": 2,
        "faults": [
            {"kind": "readiness_taint", "nodes": ["w-000"], "for_seconds": 90},
            {"kind": "readiness_taint", "nodes": ["w-001"], "taint": "readiness.k8s.io/Net"},
        ],
    }
    plan = layout(parse({"name": "t", "waves": [wave]}))
    cni = plan.node("w-000")
    assert cni.readiness_taints(0.0) == {CNI_STARTUP_TAINT} == {"node.cilium.io/agent-not-ready"}
    assert cni.readiness_taints(89.9) == {CNI_STARTUP_TAINT}
    assert cni.readiness_taints(90.0) == frozenset()  # cleared at the fault's end
    gate = plan.node("w-001")
    assert gate.readiness_taints(1e6) == {"readiness.k8s.io/Net"}  # never cleared


def test_a_mark_says_what_its_nodes_were_built_from() -> None:
    wave = {
        "name": "w",
        "count": 3,
        "marks": [
            {"nodes": ["w-000", "w-001"], "node_info": {"os_image": "bad image"}},
            {"nodes": ["w-001"], "node_info": {"kernel_version": "6.9"}},
        ],
    }
    plan = layout(parse({"name": "t", "waves": [wave]}))
    assert plan.node("w-000").node_info == {"osImage": "bad image"}
    assert plan.node("w-001").node_info == {"osImage": "bad image", "kernelVersion": "6.9"}
    assert plan.node("w-002").node_info == {}
    body = node_body(plan.node("w-001"), [], 1)
    info = body["status"]["nodeInfo"]
    assert (info["osImage"], info["kernelVersion"]) == ("bad image", "6.9")
    assert (
        info["kubeletVersion"]
        == node_body(plan.node("w-002"), [], 2)["status"]["nodeInfo"]["kubeletVersion"]
    )
