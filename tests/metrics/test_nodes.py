"""Node and wave series of the controller, rendered and read back as a scrape would: with every
collector switch on (the detail), and the series each switch adds or leaves out."""

from __future__ import annotations

import re

import pytest

from exporter.controller.exposition import (
    SOURCE_APISERVER,
    combined_status,
    controller_families,
    node_exposition,
)
from exporter.metrics.nodes import (
    GROUPS,
    NODE_FAMILIES,
    NodeCollectors,
    NodeLines,
    go_float,
    view_families,
)
from exporter.metrics.selfmetrics import SourceStatus, build_info_family
from exporter.model.clusterview import ClusterView, build_view
from exporter.model.kube import LeaseInfo, NodeCondition, NodeInfo, Taint
from tests.controller.builders import T0, lease, node
from tests.controller.every_series import (
    rich_controller_exposition,
    rich_join_families,
    rich_view,
)
from tests.metrics.exposition import labels, render, samples, series
from tests.metrics.node_reference import reference_text
from tests.metrics.promtool import check_metrics

EVERYTHING = NodeCollectors.everything()

ID0 = "2026-11-30T01:02:03Z"


def view_of(*nodes: NodeInfo, leases: tuple[LeaseInfo, ...] = ()) -> ClusterView:
    return build_view(nodes, leases, wave_label="batch", gap_seconds=120, now=T0 + 60)


def exposition(view: ClusterView, switches: NodeCollectors = EVERYTHING) -> str:
    """The per-node series (the line store's) and those built at scrape time."""
    return node_exposition(view, switches).decode() + render(view_families(view, switches))


def text_of(
    *nodes: NodeInfo, leases: tuple[LeaseInfo, ...] = (), switches: NodeCollectors = EVERYTHING
) -> str:
    return exposition(view_of(*nodes, leases=leases), switches)


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
def test_rollback_exemptions_are_sparse(n: NodeInfo, roles: set[str]) -> None:
    assert series(text_of(n), "nodesync_node_rollback_exempt") == {
        labels(node="n", reason=r): 1.0 for r in roles
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
    text = exposition(view_of())
    assert series(text, "nodesync_nodes") == {labels(): 0.0}
    assert series(text, "nodesync_node_condition") == {}
    assert series(text, "nodesync_wave_nodes") == {}


def test_rich_view_fills_every_family() -> None:
    """The rich view (used by the docs and promtool checks) leaves no family empty."""
    text = exposition(rich_view())
    names = {f.name for f in NODE_FAMILIES} | {"nodesync_wave_nodes", "nodesync_nodes"}
    assert names <= {name for (name, _) in samples(text)}


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
    check_metrics(exposition(view_of()))


# ---------------------------------------------------------------- text and switches

SWITCHES = [
    pytest.param(NodeCollectors(), id="defaults"),
    pytest.param(EVERYTHING, id="everything"),
    pytest.param(NodeCollectors(node=False, waves=False), id="nothing"),
    pytest.param(NodeCollectors(node=False, conditions=True), id="other-conditions-only"),
    pytest.param(NodeCollectors(waves=False, spec=True), id="spec-no-waves"),
]


@pytest.mark.parametrize("switches", SWITCHES)
def test_node_lines_are_prometheus_clients_rendering(switches: NodeCollectors) -> None:
    """Golden: the text rendered node by node is byte for byte what prometheus_client writes
    for the same samples built as families from the whole view."""
    view = rich_view()
    assert node_exposition(view, switches).decode() == reference_text(view, switches)


def test_label_values_are_escaped_as_prometheus_client_escapes_them() -> None:
    view = view_of(
        node('we"ird\\name\n', T0, labels={"batch": 'a"b'}),
        node("plain", T0 + 0.125),
    )
    assert node_exposition(view, EVERYTHING).decode() == reference_text(view, EVERYTHING)


@pytest.mark.parametrize(
    "value",
    [0.0, 1.0, -1.0, 0.5, 1e-7, 123456.0, 1234567.0, T0, T0 + 0.123456, 1e17, float("inf")],
)
def test_values_are_written_as_prometheus_client_writes_them(value: float) -> None:
    from prometheus_client.utils import floatToGoString

    assert go_float(value) == floatToGoString(value)


def test_the_defaults_cost_an_established_healthy_node_seven_series() -> None:
    """docs/metrics.md's series budget: an established, healthy node (Ready, its Lease, kubelet's
    four conditions) costs 7 series by default, 23 with every switch on."""
    conditions = tuple(
        NodeCondition(t, "True" if t == "Ready" else "False", last_transition=T0)
        for t in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")
    )
    view = view_of(node("n", T0, conditions=conditions), leases=(lease("n", T0 + 50),))
    [n] = view.nodes

    def cost(switches: NodeCollectors) -> int:
        return sum(chunk.count(b"\n") for chunk in NodeLines(switches).render(n))

    assert cost(NodeCollectors()) == 7
    assert cost(EVERYTHING) == 7 + 16 + 1
    failing = view_of(
        node(
            "n",
            T0,
            conditions=(NodeCondition("Ready", "Unknown", last_transition=T0 + 9),),
            taints=(
                Taint("node.kubernetes.io/unreachable", "NoSchedule"),
                Taint("node.kubernetes.io/unreachable", "NoExecute"),
                Taint("nodesync.io/rollback", "NoSchedule"),
            ),
            unschedulable=True,
        ),
        leases=(lease("n", T0),),
    ).nodes[0]
    assert sum(c.count(b"\n") for c in NodeLines(NodeCollectors()).render(failing)) == 7
    assert sum(c.count(b"\n") for c in NodeLines(EVERYTHING).render(failing)) == 7 + 1 + 3


def test_by_default_the_kube_state_metrics_duplicates_are_off() -> None:
    text = exposition(rich_view(), NodeCollectors())
    exposed = {name for (name, _) in samples(text)}
    assert "nodesync_node_unschedulable" not in exposed
    assert "nodesync_node_taint" not in exposed
    assert {dict(lbls)["condition"] for lbls in series(text, "nodesync_node_condition")} == {
        "Ready"
    }
    assert {
        dict(lbls)["condition"]
        for lbls in series(text, "nodesync_node_condition_transition_timestamp_seconds")
    } == {"Ready"}


@pytest.mark.parametrize("group", GROUPS, ids=lambda g: g.name)
def test_each_switch_turns_its_families_on_and_off(group: object) -> None:
    """With one switch on and the others off, exactly the switch's families are exported."""
    from exporter.metrics.switches import FamilyGroup

    assert isinstance(group, FamilyGroup)
    only = NodeCollectors(**{g.attribute: g is group for g in GROUPS})
    text = exposition(rich_view(), only) + render(rich_join_families(only))
    helped = {line.split()[2] for line in text.splitlines() if "# TYPE" in line}
    # a histogram's samples are its family's name and _bucket, _sum, _count
    exposed = {
        base if base in helped else name
        for (name, _) in samples(text)
        for base in [re.sub(r"_(bucket|sum|count)$", "", name)]
    }
    assert helped == set(group.families)
    assert exposed <= set(group.families)
