"""The cluster view as tables: each node's flags, its lease, its wave."""

from __future__ import annotations

import pytest

from exporter.model.clusterview import NodeView, build_view, node_leases
from exporter.model.kube import LeaseInfo, NodeCondition, NodeInfo, Taint
from exporter.model.waves import WaveTracker
from tests.controller.builders import T0, lease, node

ID0 = "2026-11-30T01:02:03Z"
READY = NodeCondition("Ready", "True", last_transition=T0 + 30)


def one_view(n: NodeInfo) -> NodeView:
    view = build_view([n], [], wave_label=None, gap_seconds=120, now=T0 + 60)
    assert len(view.nodes) == 1
    return view.nodes[0]


@pytest.mark.parametrize(
    ("n", "flags"),
    [
        pytest.param(node("w"), (False, False, False, False), id="plain-worker"),
        pytest.param(
            node("cp", labels={"node-role.kubernetes.io/control-plane": ""}),
            (True, False, False, False),
            id="control-plane-label",
        ),
        pytest.param(
            node("m", labels={"node-role.kubernetes.io/master": "true"}),
            (True, False, False, False),
            id="legacy-master-label",
        ),
        pytest.param(
            node("w", labels={"node-role.kubernetes.io/worker": ""}),
            (False, False, False, False),
            id="other-role-label",
        ),
        pytest.param(
            node("p", labels={"nodesync.io/protected": "true"}),
            (False, True, False, False),
            id="protected",
        ),
        pytest.param(
            node("p", labels={"nodesync.io/protected": "false"}),
            (False, False, False, False),
            id="protected-false",
        ),
        pytest.param(
            node("p", labels={"nodesync.io/protected": "yes"}),
            (False, False, False, False),
            id="protected-only-when-exactly-true",
        ),
        pytest.param(
            node("ca", taints=(Taint("ToBeDeletedByClusterAutoscaler", "NoSchedule", "1"),)),
            (False, False, True, False),
            id="cluster-autoscaler-deleting",
        ),
        pytest.param(
            node("k", taints=(Taint("karpenter.sh/disrupted", "NoSchedule"),)),
            (False, False, True, False),
            id="karpenter-v1",
        ),
        pytest.param(
            node("k", taints=(Taint("karpenter.sh/disruption", "NoSchedule", "disrupting"),)),
            (False, False, True, False),
            id="karpenter-v1beta1",
        ),
        pytest.param(
            node("s", taints=(Taint("aws-node-termination-handler/spot-itn", "NoSchedule"),)),
            (False, False, True, False),
            id="aws-nth-spot",
        ),
        pytest.param(
            node("g", taints=(Taint("cloud.google.com/impending-node-termination", "NoSchedule"),)),
            (False, False, True, False),
            id="gke-impending-termination",
        ),
        pytest.param(
            node("o", taints=(Taint("node.kubernetes.io/out-of-service", "NoExecute"),)),
            (False, False, True, False),
            id="out-of-service",
        ),
        pytest.param(
            node("c", taints=(Taint("DeletionCandidateOfClusterAutoscaler", "PreferNoSchedule"),)),
            (False, False, False, False),
            id="autoscaler-candidate-is-not-owned",
        ),
        pytest.param(
            node("r", taints=(Taint("nodesync.io/rollback", "NoSchedule"),)),
            (False, False, False, True),
            id="cordoned-by-nodesync",
        ),
        pytest.param(
            node(
                "all",
                labels={
                    "node-role.kubernetes.io/control-plane": "",
                    "nodesync.io/protected": "true",
                },
                taints=(
                    Taint("nodesync.io/rollback", "NoSchedule"),
                    Taint("ToBeDeletedByClusterAutoscaler", "NoSchedule"),
                ),
            ),
            (True, True, True, True),
            id="everything",
        ),
    ],
)
def test_node_flags(n: NodeInfo, flags: tuple[bool, bool, bool, bool]) -> None:
    v = one_view(n)
    assert (v.control_plane, v.protected, v.owned_by_other_remediator, v.cordoned_by_nodesync) == (
        flags
    )


@pytest.mark.parametrize(
    ("taints", "kept"),
    [
        pytest.param((), (), id="none"),
        pytest.param(
            (
                Taint("node.kubernetes.io/unreachable", "NoExecute"),
                Taint("node.kubernetes.io/unreachable", "NoSchedule"),
                Taint("node.kubernetes.io/not-ready", "NoSchedule"),
            ),
            (
                Taint("node.kubernetes.io/not-ready", "NoSchedule"),
                Taint("node.kubernetes.io/unreachable", "NoExecute"),
                Taint("node.kubernetes.io/unreachable", "NoSchedule"),
            ),
            id="lifecycle-taints-sorted",
        ),
        pytest.param(
            (
                Taint("dedicated", "NoSchedule", "gpu"),
                Taint("node.kubernetes.io/unschedulable", "NoSchedule"),
                Taint("karpenter.sh/disrupted", "NoSchedule"),
            ),
            (Taint("node.kubernetes.io/unschedulable", "NoSchedule"),),
            id="others-dropped",
        ),
        pytest.param(
            (
                Taint("nodesync.io/rollback", "NoSchedule"),
                Taint("ToBeDeletedByClusterAutoscaler", "NoSchedule", "1700000000"),
            ),
            (
                Taint("ToBeDeletedByClusterAutoscaler", "NoSchedule", "1700000000"),
                Taint("nodesync.io/rollback", "NoSchedule"),
            ),
            id="owners",
        ),
        pytest.param(
            (
                Taint("node.kubernetes.io/not-ready", "NoExecute", "a"),
                Taint("node.kubernetes.io/not-ready", "NoExecute", "b"),
            ),
            (Taint("node.kubernetes.io/not-ready", "NoExecute", "b"),),
            id="duplicate-key-effect-once",
        ),
    ],
)
def test_taints_that_matter(taints: tuple[Taint, ...], kept: tuple[Taint, ...]) -> None:
    assert one_view(node("n", taints=taints)).taints_that_matter == kept


def test_node_fields_are_carried() -> None:
    n = node("n", T0 - 5, unschedulable=True, conditions=(READY,))
    v = build_view([n], [lease("n", T0 + 50)], wave_label=None, gap_seconds=120, now=T0 + 60).nodes[
        0
    ]
    assert v == NodeView(
        name="n",
        created_at=T0 - 5,
        lease_renew_time=T0 + 50,
        conditions=(READY,),
        unschedulable=True,
        taints_that_matter=(),
        wave_id="2026-11-30T01:01:58Z",
        control_plane=False,
        protected=False,
        owned_by_other_remediator=False,
        cordoned_by_nodesync=False,
        uid=n.uid,
    )
    assert v.condition("Ready") == READY
    assert v.condition("DiskPressure") is None


@pytest.mark.parametrize(
    ("leases", "renew"),
    [
        pytest.param(
            [lease("a", T0 + 1), lease("b", T0 + 2)], {"a": T0 + 1, "b": T0 + 2}, id="both"
        ),
        pytest.param([lease("a", T0 + 1)], {"a": T0 + 1, "b": None}, id="no-lease"),
        pytest.param([lease("a", None)], {"a": None, "b": None}, id="never-renewed"),
        pytest.param(
            [lease("a", T0 + 1, namespace="kube-system"), lease("b", T0 + 2)],
            {"a": None, "b": T0 + 2},
            id="other-namespace-ignored",
        ),
        pytest.param([lease("gone", T0 + 1)], {"a": None, "b": None}, id="lease-without-node"),
    ],
)
def test_lease_join(leases: list[LeaseInfo], renew: dict[str, float | None]) -> None:
    view = build_view(
        [node("b"), node("a")],
        leases,
        wave_label=None,
        gap_seconds=120,
        now=T0,
    )
    assert {v.name: v.lease_renew_time for v in view.nodes} == renew
    assert [v.name for v in view.nodes] == ["a", "b"]


def test_node_leases_keeps_only_node_lease_namespace() -> None:
    assert node_leases([lease("a"), lease("x", namespace="default")]) == {"a": lease("a")}


def test_waves_and_lookup() -> None:
    view = build_view(
        [node("a"), node("b", T0 + 60), node("c", T0 + 1000, labels={"pool/batch": "b7"})],
        [],
        wave_label="pool/batch",
        gap_seconds=120,
        now=T0 + 1000,
    )
    assert [(w.id, w.size) for w in view.waves] == [(ID0, 2), ("b7", 1)]
    assert {v.name: v.wave_id for v in view.nodes} == {"a": ID0, "b": ID0, "c": "b7"}
    assert view.node("c") == view.nodes[2]
    assert view.node("missing") is None
    assert view.built_at == T0 + 1000


def test_tracker_keeps_frozen_size_across_rebuilds() -> None:
    tracker = WaveTracker()
    nodes = [node("a"), node("b", T0 + 30), node("c", T0 + 60)]

    def sizes(current: list[NodeInfo], now: float) -> list[tuple[str, int, bool]]:
        view = build_view(current, [], wave_label=None, gap_seconds=120, now=now, tracker=tracker)
        return [(w.id, w.size, w.closed) for w in view.waves]

    assert sizes(nodes, T0 + 70) == [(ID0, 3, False)]
    assert sizes(nodes, T0 + 200) == [(ID0, 3, True)]
    assert sizes(nodes[:1], T0 + 210) == [(ID0, 3, True)]
    # without the tracker the same nodes make a one-node wave
    assert [w.size for w in build_view(nodes[:1], [], wave_label=None, now=T0 + 210).waves] == [1]


def test_empty_cluster() -> None:
    view = build_view([], [lease("a")], wave_label=None, now=T0)
    assert view.nodes == ()
    assert view.waves == ()
