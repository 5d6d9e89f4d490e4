"""The planner as a table: the alert's action and labels -> the steps, or a refusal and why."""

from __future__ import annotations

import pytest

from exporter.model.alerts import Alert
from exporter.model.clusterview import ClusterView, build_view
from exporter.model.planner import REASONS, plan_alert
from exporter.model.rollback import Action, Plan, Refusal, Step, StepKind
from tests.controller.builders import T0, lease, node

WAVE_LABEL = "example.com/scale-out"


def view() -> ClusterView:
    return build_view(
        [node("n1", labels={WAVE_LABEL: "w7"}), node("n2", T0 + 10)],
        [lease("n1"), lease("n2")],
        wave_label=WAVE_LABEL,
        now=T0 + 60,
    )


def alert(status: str = "firing", **labels: str) -> Alert:
    return Alert(fingerprint="fp1", status=status, labels=labels, starts_at=T0 + 30)


ROLLBACK = [StepKind.CORDON, StepKind.TAINT, StepKind.DRAIN, StepKind.CLEANUP_RUNTIME]


@pytest.mark.parametrize(
    ("labels", "delete_nodes", "kinds"),
    [
        pytest.param(
            {"nodesync_action": "rollback_node", "node": "n1"},
            False,
            [*ROLLBACK, StepKind.VERIFY],
            id="rollback",
        ),
        pytest.param(
            {"nodesync_action": "rollback_node", "node": "n1"},
            True,
            [*ROLLBACK, StepKind.VERIFY, StepKind.DELETE_NODE],
            id="rollback-and-delete",
        ),
        pytest.param(
            {"nodesync_action": "cleanup_orphans", "node": "n1", "kind": "orphan_sandbox"},
            True,
            [StepKind.CLEANUP_RUNTIME, StepKind.VERIFY],
            id="cleanup-never-deletes",
        ),
        pytest.param(
            {"nodesync_action": "evict_pod", "node": "n1", "namespace": "ns", "pod": "p"},
            True,
            [StepKind.EVICT_POD],
            id="evict",
        ),
    ],
)
def test_steps_by_action(labels: dict[str, str], delete_nodes: bool, kinds: list[StepKind]) -> None:
    result = plan_alert(alert(**labels), view(), delete_nodes=delete_nodes)
    assert isinstance(result, Plan)
    assert [s.kind for s in result.steps] == kinds
    assert all(s.node == "n1" for s in result.steps)
    assert result.action is Action(labels["nodesync_action"])
    assert (result.node, result.wave) == ("n1", "w7")
    assert (result.alert_fingerprint, result.alert_starts_at) == ("fp1", T0 + 30)


def test_evict_names_the_pod() -> None:
    labels = {"nodesync_action": "evict_pod", "node": "n2", "namespace": "ns", "pod": "p"}
    result = plan_alert(alert(**labels), view(), delete_nodes=False)
    assert isinstance(result, Plan)
    assert result.steps == (Step(StepKind.EVICT_POD, "n2", namespace="ns", pod="p"),)
    assert result.wave == "2026-11-30T01:02:13Z"


@pytest.mark.parametrize(
    ("status", "labels", "reason"),
    [
        pytest.param("resolved", {"nodesync_action": "rollback_node", "node": "n1"}, "resolved"),
        pytest.param("firing", {"node": "n1"}, "no_action", id="no-action-label"),
        pytest.param("firing", {"nodesync_action": "", "node": "n1"}, "no_action", id="empty"),
        pytest.param("firing", {"nodesync_action": "none", "node": "n1"}, "no_action", id="none"),
        pytest.param(
            "firing", {"nodesync_action": "reboot", "node": "n1"}, "unknown_action", id="unknown"
        ),
        pytest.param(
            "firing", {"nodesync_action": "ROLLBACK_NODE", "node": "n1"}, "unknown_action",
            id="case-matters",
        ),
        pytest.param("firing", {"nodesync_action": "rollback_node"}, "missing_label", id="node"),
        pytest.param(
            "firing", {"nodesync_action": "evict_pod", "node": "n1", "pod": "p"},
            "missing_label", id="namespace",
        ),
        pytest.param(
            "firing", {"nodesync_action": "evict_pod", "node": "n1", "namespace": "ns"},
            "missing_label", id="pod",
        ),
        pytest.param(
            "firing", {"nodesync_action": "rollback_node", "node": "gone"}, "unknown_node",
            id="unknown-node",
        ),
        pytest.param(
            "firing",
            {"nodesync_action": "evict_pod", "node": "gone", "namespace": "ns", "pod": "p"},
            "unknown_node",
            id="pod-on-unknown-node",
        ),
        pytest.param(
            "firing", {"nodesync_action": "rollback_node", "node": ".."}, "invalid_name",
            id="node-dotdot",
        ),
        pytest.param(
            "firing", {"nodesync_action": "rollback_node", "node": "n1/status"}, "invalid_name",
            id="node-subresource",
        ),
        pytest.param(
            "firing", {"nodesync_action": "cleanup_orphans", "node": "N1"}, "invalid_name",
            id="node-upper-case",
        ),
        pytest.param(
            "firing",
            {"nodesync_action": "evict_pod", "node": "n1", "namespace": "a.b", "pod": "p"},
            "invalid_name",
            id="namespace-not-a-label",
        ),
        pytest.param(
            "firing",
            {"nodesync_action": "evict_pod", "node": "n1", "namespace": "ns", "pod": "p/log"},
            "invalid_name",
            id="pod-subresource",
        ),
        pytest.param(
            "firing",
            {"nodesync_action": "evict_pod", "node": "n1", "namespace": "n" * 64, "pod": "p"},
            "invalid_name",
            id="namespace-too-long",
        ),
    ],
)  # fmt: skip
def test_refusals(status: str, labels: dict[str, str], reason: str) -> None:
    result = plan_alert(alert(status, **labels), view(), delete_nodes=True)
    assert isinstance(result, Refusal)
    assert result.reason == reason
    assert result.reason in REASONS
    assert result.detail


def test_a_long_label_value_is_cut_in_the_detail() -> None:
    result = plan_alert(alert(nodesync_action="x" * 5000, node="n1"), view(), delete_nodes=False)
    assert isinstance(result, Refusal)
    assert result.reason == "unknown_action"
    assert len(result.detail) < 200


def test_an_over_long_node_name_is_refused_and_cut_in_the_detail() -> None:
    huge = "n" * 16_000 + "/status"
    result = plan_alert(
        alert(nodesync_action="rollback_node", node=huge), view(), delete_nodes=False
    )
    assert isinstance(result, Refusal)
    assert result.reason == "invalid_name"
    assert len(result.detail) < 200
    assert "DNS-1123 subdomain" in result.detail
