"""PATCH through the real client (strategic, merge) and the patch functions as tables."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException, ConflictException

from nodesync_sim.fake.apiserver.patch import (
    PatchError,
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


@pytest.mark.parametrize(
    "content_type",
    [
        "application/strategic-merge-patch+json",
        "application/merge-patch+json",
    ],
)
def test_stale_resource_version_in_patch_conflicts(
    core: client.CoreV1Api, content_type: str
) -> None:
    created = core.create_node(node("n1"))
    stale = created.metadata.resource_version
    core.patch_node("n1", {"metadata": {"labels": {"moved": "on"}}})
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


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/apply-patch+yaml", {"spec": {}}),
        (
            "application/json-patch+json",
            [{"op": "add", "path": "/spec/unschedulable", "value": True}],
        ),
    ],
)
def test_unserved_patch_types_are_unsupported(
    core: client.CoreV1Api, content_type: str, body: Any
) -> None:
    core.create_node(node("n1"))
    with pytest.raises(ApiException) as info:
        core.patch_node("n1", body, _content_type=content_type)
    assert info.value.status == 415
    assert not core.read_node("n1").spec.unschedulable


# ------------------------------------------------------------------ the functions as tables


def test_merge_patch_rfc7386() -> None:
    doc = {"a": {"b": 1, "c": 2}, "l": [1, 2]}
    assert apply_merge_patch(doc, {"a": {"b": None, "d": 3}, "l": [9]}) == {
        "a": {"c": 2, "d": 3},
        "l": [9],
    }


def test_strategic_merge_by_key_and_finalizers_as_a_set() -> None:
    doc = {
        "metadata": {"finalizers": ["x"]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "X"}]},
    }
    patch = {
        "metadata": {"finalizers": ["y", "x"]},
        "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "Y"}]},
    }
    out = apply_strategic_merge_patch(doc, patch)
    assert out["metadata"]["finalizers"] == ["x", "y"]
    assert out["status"]["conditions"] == [
        {"type": "Ready", "status": "False"},
        {"type": "X"},
        {"type": "Y"},
    ]
    assert doc["status"]["conditions"][0]["status"] == "True"  # the input is not modified


@pytest.mark.parametrize(
    "patch",
    [
        {"spec": {"$patch": "replace", "x": 1}},
        {"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]}},
        {"status": {"conditions": [{"status": "True"}]}},
        ["not", "an", "object"],
    ],
)
def test_strategic_directives_and_malformed_patches_are_bad_requests(patch: Any) -> None:
    with pytest.raises(PatchError) as info:
        apply_strategic_merge_patch({"metadata": {}}, patch)
    assert info.value.code == 400
