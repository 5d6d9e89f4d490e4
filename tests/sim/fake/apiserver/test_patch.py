"""PATCH through the real client (strategic, merge, json) and the patch functions as tables."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException, ConflictException

from nodesync_sim.fake.apiserver.patch import (
    PatchError,
    apply_json_patch,
    apply_merge_patch,
    apply_strategic_merge_patch,
)
from tests.sim.fake.apiserver.helpers import node


def test_strategic_patch_labels_null_deletes(core: client.CoreV1Api) -> None:
    core.create_node(node("n1", {"keep": "1", "drop": "2"}))
    patched = core.patch_node("n1", {"metadata": {"labels": {"drop": None, "new": "3"}}})
    assert patched.metadata.labels == {"keep": "1", "new": "3"}


def test_strategic_patch_cordon_and_taints_replace(core: client.CoreV1Api) -> None:
    core.create_node(node("n1"))
    first = {"key": "a", "effect": "NoSchedule"}
    core.patch_node("n1", {"spec": {"taints": [first]}})
    second = {"key": "b", "effect": "NoExecute"}
    patched = core.patch_node("n1", {"spec": {"unschedulable": True, "taints": [second]}})
    assert patched.spec.unschedulable is True
    assert [t.key for t in patched.spec.taints] == ["b"]


def test_strategic_patch_merges_status_conditions_by_type(core: client.CoreV1Api) -> None:
    core.create_node(node("n1"))
    conditions = [
        {"type": "Ready", "status": "True", "reason": "KubeletReady"},
        {"type": "DiskPressure", "status": "False"},
    ]
    core.patch_node_status("n1", {"status": {"conditions": conditions}})
    patched = core.patch_node_status(
        "n1", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    )
    by_type = {c.type: c for c in patched.status.conditions}
    assert by_type["Ready"].status == "False"
    assert by_type["Ready"].reason == "KubeletReady"  # merged, not replaced
    assert by_type["DiskPressure"].status == "False"


def test_status_patch_does_not_change_spec(core: client.CoreV1Api) -> None:
    core.create_node(node("n1"))
    patched = core.patch_node_status(
        "n1", {"spec": {"unschedulable": True}, "status": {"phase": "Running"}}
    )
    assert patched.spec is None or not patched.spec.unschedulable
    assert patched.status.phase == "Running"


def test_merge_patch_replaces_lists(core: client.CoreV1Api) -> None:
    core.create_node(node("n1"))
    core.patch_node_status(
        "n1",
        {
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}, {"type": "X", "status": "1"}]
            }
        },
    )
    patched = core.patch_node_status(
        "n1",
        {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
        _content_type="application/merge-patch+json",
    )
    assert [(c.type, c.status) for c in patched.status.conditions] == [("Ready", "False")]


def test_json_patch_add_replace_remove_test(core: client.CoreV1Api) -> None:
    core.create_node(node("n1", {"a": "1"}))
    patched = core.patch_node(
        "n1",
        [
            {"op": "test", "path": "/metadata/labels/a", "value": "1"},
            {"op": "replace", "path": "/metadata/labels/a", "value": "2"},
            {"op": "add", "path": "/metadata/labels/b~1c", "value": "3"},
            {"op": "add", "path": "/spec/unschedulable", "value": True},
        ],
    )
    assert patched.metadata.labels == {"a": "2", "b/c": "3"}
    assert patched.spec.unschedulable is True
    removed = core.patch_node("n1", [{"op": "remove", "path": "/metadata/labels/a"}])
    assert removed.metadata.labels == {"b/c": "3"}


def test_json_patch_failed_test_is_unprocessable(core: client.CoreV1Api) -> None:
    core.create_node(node("n1", {"a": "1"}))
    with pytest.raises(ApiException) as info:
        core.patch_node("n1", [{"op": "test", "path": "/metadata/labels/a", "value": "9"}])
    assert info.value.status == 422
    assert core.read_node("n1").metadata.labels == {"a": "1"}


@pytest.mark.parametrize(
    "content_type",
    [
        "application/strategic-merge-patch+json",
        "application/merge-patch+json",
        "application/json-patch+json",
    ],
)
def test_stale_resource_version_in_patch_conflicts(
    core: client.CoreV1Api, content_type: str
) -> None:
    created = core.create_node(node("n1"))
    stale = created.metadata.resource_version
    core.patch_node("n1", {"metadata": {"labels": {"moved": "on"}}})
    body: Any
    if content_type == "application/json-patch+json":
        body = [
            {"op": "replace", "path": "/metadata/resourceVersion", "value": stale},
            {"op": "add", "path": "/spec/unschedulable", "value": True},
        ]
    else:
        body = {"metadata": {"resourceVersion": stale}, "spec": {"unschedulable": True}}
    with pytest.raises(ConflictException) as info:
        core.patch_node("n1", body, _content_type=content_type)
    status = json.loads(info.value.body)
    assert status["reason"] == "Conflict"
    assert status["message"] == (
        'Operation cannot be fulfilled on nodes "n1": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    current = core.read_node("n1")
    fresh = {"metadata": {"resourceVersion": current.metadata.resource_version}}
    assert core.patch_node("n1", {**fresh, "spec": {"unschedulable": True}}).spec.unschedulable


def test_unknown_patch_type_is_unsupported(core: client.CoreV1Api) -> None:
    core.create_node(node("n1"))
    with pytest.raises(ApiException) as info:
        core.patch_node("n1", {"spec": {}}, _content_type="application/apply-patch+yaml")
    assert info.value.status == 415


# ------------------------------------------------------------------ the functions as tables

DOC = {"metadata": {"labels": {"a": "1"}}, "spec": {"list": [1, 2]}}


@pytest.mark.parametrize(
    ("ops", "expected"),
    [
        ([{"op": "add", "path": "/spec/list/-", "value": 3}], [1, 2, 3]),
        ([{"op": "add", "path": "/spec/list/0", "value": 0}], [0, 1, 2]),
        ([{"op": "remove", "path": "/spec/list/0"}], [2]),
        ([{"op": "move", "from": "/spec/list/0", "path": "/spec/list/1"}], [2, 1]),
        ([{"op": "copy", "from": "/spec/list/1", "path": "/spec/list/0"}], [2, 1, 2]),
    ],
)
def test_json_patch_table(ops: list[dict[str, Any]], expected: list[int]) -> None:
    assert apply_json_patch(DOC, ops)["spec"]["list"] == expected
    assert DOC["spec"]["list"] == [1, 2]  # the input is not modified


@pytest.mark.parametrize(
    ("ops", "code"),
    [
        ([{"op": "remove", "path": "/spec/missing"}], 422),
        ([{"op": "replace", "path": "/nope/x", "value": 1}], 422),
        ([{"op": "add", "path": "/spec/list/9", "value": 1}], 422),
        ([{"op": "frobnicate", "path": "/spec"}], 400),
        ({"op": "add"}, 400),
    ],
)
def test_json_patch_errors(ops: Any, code: int) -> None:
    with pytest.raises(PatchError) as info:
        apply_json_patch(DOC, ops)
    assert info.value.code == code


def test_merge_patch_rfc7386() -> None:
    doc = {"a": {"b": 1, "c": 2}, "l": [1, 2]}
    assert apply_merge_patch(doc, {"a": {"b": None, "d": 3}, "l": [9]}) == {
        "a": {"c": 2, "d": 3},
        "l": [9],
    }


def test_strategic_directives() -> None:
    doc = {
        "metadata": {"finalizers": ["x"]},
        "spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "X"}]},
    }
    patch = {
        "metadata": {"finalizers": ["y"]},
        "spec": {"containers": [{"name": "b", "image": "2"}, {"name": "a", "$patch": "delete"}]},
        "status": {
            "$setElementOrder/conditions": [{"type": "X"}, {"type": "Ready"}],
            "conditions": [{"type": "Ready", "status": "False"}],
        },
    }
    out = apply_strategic_merge_patch(doc, patch)
    assert out["metadata"]["finalizers"] == ["x", "y"]
    assert out["spec"]["containers"] == [{"name": "b", "image": "2"}]
    assert out["status"]["conditions"] == [{"type": "X"}, {"type": "Ready", "status": "False"}]
    replaced = apply_strategic_merge_patch(doc, {"spec": {"$patch": "replace", "x": 1}})
    assert replaced["spec"] == {"x": 1}
    pruned = apply_strategic_merge_patch(
        doc, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]}}
    )
    assert pruned["metadata"]["finalizers"] == []
