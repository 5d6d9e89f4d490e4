"""Node and wave series of the controller, rendered and read back as a scrape would."""

from __future__ import annotations

import pytest

from exporter.controller.exposition import SOURCE_APISERVER, combined_status, controller_families
from exporter.metrics.nodes import node_families
from exporter.metrics.selfmetrics import SourceStatus, build_info_family
from exporter.model.clusterview import ClusterView, build_view
from exporter.model.kube import LeaseInfo, NodeCondition, NodeInfo, Taint
from tests.controller.builders import T0, lease, node
from tests.controller.every_series import rich_controller_exposition, rich_view
from tests.metrics.exposition import labels, render, samples, series
from tests.metrics.promtool import check_metrics

ID0 = "2026-11-30T01:02:03Z"


def view_of(*nodes: NodeInfo, leases: tuple[LeaseInfo, ...] = ()) -> ClusterView:
    return build_view(nodes, leases, wave_label="batch", gap_seconds=120, now=T0 + 60)


def text_of(*nodes: NodeInfo, leases: tuple[LeaseInfo, ...] = ()) -> str:
    return render(node_families(view_of(*nodes, leases=leases)))


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        pytest.param("True", {"true": 1.0, "false": 0.0, "unknown": 0.0}, id="true"),
        pytest.param("False", {"true": 0.0, "false": 1.0, "unknown": 0.0}, id="false"),
        pytest.param("Unknown", {"true": 0.0, "false": 0.0, "unknown": 1.0}, id="unknown"),
        pytest.param("", {"true": 0.0, "false": 0.0, "unknown": 1.0}, id="empty-is-unknown"),
        pytest.param("true", {"true": 0.0, "false": 0.0, "unknown": 1.0}, id="case-matters"),
    ],
)
def test_condition_status_all_three_present(status: str, expected: dict[str, float]) -> None:
    text = text_of(node("n", conditions=(NodeCondition("DiskPressure", status),)))
    assert series(text, "nodesync_node_condition") == {
        labels(node="n", condition="DiskPressure", status=s): v for s, v in expected.items()
    }


@pytest.mark.parametrize(
    ("conditions", "exported", "transitions"),
    [
        pytest.param((), set(), {}, id="no-conditions"),
        pytest.param(
            (
                NodeCondition("Ready", "True", last_transition=T0 + 1),
                NodeCondition("MemoryPressure", "False", last_transition=T0 + 2),
                NodeCondition("DiskPressure", "False", last_transition=T0 + 3),
                NodeCondition("PIDPressure", "False", last_transition=T0 + 4),
                NodeCondition("NetworkUnavailable", "False", last_transition=T0 + 5),
            ),
            {"Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable"},
            {
                "Ready": T0 + 1,
                "MemoryPressure": T0 + 2,
                "DiskPressure": T0 + 3,
                "PIDPressure": T0 + 4,
                "NetworkUnavailable": T0 + 5,
            },
            id="kubelet-conditions",
        ),
        pytest.param(
            (
                NodeCondition("Ready", "True", last_transition=T0 + 1),
                NodeCondition("KernelDeadlock", "False", last_transition=T0 + 2),
            ),
            {"Ready"},
            {"Ready": T0 + 1},
            id="other-condition-types-not-exported",
        ),
        pytest.param(
            (NodeCondition("Ready", "Unknown"),),
            {"Ready"},
            {},
            id="no-transition-time-no-series",
        ),
    ],
)
def test_conditions_and_transitions(
    conditions: tuple[NodeCondition, ...], exported: set[str], transitions: dict[str, float]
) -> None:
    text = text_of(node("n", conditions=conditions))
    got = {dict(lbls)["condition"] for lbls in series(text, "nodesync_node_condition")}
    assert got == exported
    assert series(text, "nodesync_node_condition_transition_timestamp_seconds") == {
        labels(node="n", condition=c): t for c, t in transitions.items()
    }


def test_per_node_series() -> None:
    text = text_of(
        node("a", T0, unschedulable=True),
        node("b", T0 + 500),
        leases=(lease("a", T0 + 42), lease("b", None)),
    )
    assert series(text, "nodesync_node_created_timestamp_seconds") == {
        labels(node="a"): T0,
        labels(node="b"): T0 + 500,
    }
    assert series(text, "nodesync_node_lease_renew_timestamp_seconds") == {
        labels(node="a"): T0 + 42
    }
    assert series(text, "nodesync_node_unschedulable") == {
        labels(node="a"): 1.0,
        labels(node="b"): 0.0,
    }
    assert series(text, "nodesync_nodes") == {labels(): 2.0}


@pytest.mark.parametrize(
    ("taints", "expected"),
    [
        pytest.param((), set(), id="none"),
        pytest.param(
            (
                Taint("node.kubernetes.io/unreachable", "NoSchedule"),
                Taint("node.kubernetes.io/unreachable", "NoExecute"),
            ),
            {
                ("node.kubernetes.io/unreachable", "NoSchedule"),
                ("node.kubernetes.io/unreachable", "NoExecute"),
            },
            id="one-key-two-effects",
        ),
        pytest.param(
            (
                Taint("node.kubernetes.io/not-ready", "NoExecute"),
                Taint("node.kubernetes.io/unschedulable", "NoSchedule"),
                Taint("ToBeDeletedByClusterAutoscaler", "NoSchedule", "1796000000"),
                Taint("nodesync.io/rollback", "NoSchedule"),
            ),
            {
                ("node.kubernetes.io/not-ready", "NoExecute"),
                ("node.kubernetes.io/unschedulable", "NoSchedule"),
                ("ToBeDeletedByClusterAutoscaler", "NoSchedule"),
                ("nodesync.io/rollback", "NoSchedule"),
            },
            id="all-that-matter",
        ),
        pytest.param(
            (
                Taint("dedicated", "NoSchedule", "gpu"),
                Taint("karpenter.sh/disrupted", "NoSchedule"),
            ),
            set(),
            id="other-taints-not-exported",
        ),
    ],
)
def test_taints(taints: tuple[Taint, ...], expected: set[tuple[str, str]]) -> None:
    text = text_of(node("n", taints=taints))
    assert series(text, "nodesync_node_taint") == {
        labels(node="n", key=k, effect=e): 1.0 for k, e in expected
    }


@pytest.mark.parametrize(
    ("n", "roles"),
    [
        pytest.param(node("n"), set(), id="plain-worker-no-series"),
        pytest.param(
            node("n", labels={"node-role.kubernetes.io/control-plane": ""}),
            {"control_plane"},
            id="control-plane",
        ),
        pytest.param(
            node("n", labels={"nodesync.io/protected": "true"}), {"protected"}, id="protected"
        ),
        pytest.param(
            node("n", taints=(Taint("karpenter.sh/disrupted", "NoSchedule"),)),
            {"other_remediator"},
            id="other-remediator",
        ),
        pytest.param(
            node(
                "n",
                labels={"node-role.kubernetes.io/master": "", "nodesync.io/protected": "true"},
                taints=(Taint("ToBeDeletedByClusterAutoscaler", "NoSchedule"),),
            ),
            {"control_plane", "protected", "other_remediator"},
            id="all-roles",
        ),
    ],
)
def test_roles_are_sparse(n: NodeInfo, roles: set[str]) -> None:
    assert series(text_of(n), "nodesync_node_role") == {
        labels(node="n", role=r): 1.0 for r in roles
    }


def test_waves() -> None:
    text = text_of(
        node("a", T0),
        node("b", T0 + 60),
        node("c", T0 + 30, labels={"batch": "b7"}),
    )
    assert series(text, "nodesync_node_wave") == {
        labels(node="a", wave=ID0): 1.0,
        labels(node="b", wave=ID0): 1.0,
        labels(node="c", wave="b7"): 1.0,
    }
    assert series(text, "nodesync_wave_nodes") == {labels(wave=ID0): 2.0, labels(wave="b7"): 1.0}
    assert series(text, "nodesync_wave_start_timestamp_seconds") == {
        labels(wave=ID0): T0,
        labels(wave="b7"): T0 + 30,
    }


def test_empty_cluster_has_only_the_total() -> None:
    text = render(node_families(view_of()))
    assert series(text, "nodesync_nodes") == {labels(): 0.0}
    assert series(text, "nodesync_node_condition") == {}
    assert series(text, "nodesync_wave_nodes") == {}


def test_rich_view_fills_every_family() -> None:
    """The rich view (used by the docs and promtool checks) leaves no family empty."""
    assert all(family.samples for family in node_families(rich_view()))


def test_before_the_first_list_only_status_and_build_info() -> None:
    text = render(
        controller_families(
            None, {SOURCE_APISERVER: SourceStatus(False, None)}, build_info_family("1.2.3")
        )
    )
    assert {name for (name, _) in samples(text)} == {"nodesync_build_info", "nodesync_source_up"}
    assert series(text, "nodesync_source_up") == {labels(source="apiserver"): 0.0}


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        pytest.param(
            [SourceStatus(True, 10.0), SourceStatus(True, 12.0)],
            SourceStatus(True, 10.0),
            id="both-up-oldest-success",
        ),
        pytest.param(
            [SourceStatus(True, 10.0), SourceStatus(False, 12.0)],
            SourceStatus(False, 10.0),
            id="one-down",
        ),
        pytest.param(
            [SourceStatus(True, 10.0), SourceStatus(False, None)],
            SourceStatus(False, None),
            id="one-never-succeeded",
        ),
        pytest.param([], SourceStatus(False, None), id="no-watches"),
    ],
)
def test_combined_status(statuses: list[SourceStatus], expected: SourceStatus) -> None:
    assert combined_status(statuses) == expected


@pytest.mark.prometheus
def test_promtool_accepts_the_node_families() -> None:
    check_metrics(rich_controller_exposition())


@pytest.mark.prometheus
def test_promtool_accepts_an_empty_cluster() -> None:
    check_metrics(render(node_families(view_of())))
