"""Selector parsing and matching as tables."""

from __future__ import annotations

import pytest

from nodesync_sim.fake.apiserver.errors import APIError
from nodesync_sim.fake.apiserver.resources import NODES, PODS
from nodesync_sim.fake.apiserver.selectors import (
    label_selector_from_object,
    parse_field_selector,
    parse_label_selector,
)

LABELS = {"app": "web", "tier": "front", "example.com/role": "edge"}


@pytest.mark.parametrize(
    ("text", "matches"),
    [
        ("", True),
        ("app=web", True),
        ("app = web", True),
        ("app=db", False),
        ("app!=db", True),
        ("missing!=x", True),
        ("app in (db, web)", True),
        ("app notin (web)", False),
        ("missing notin (web)", True),
        ("example.com/role=edge", True),
        ("tier,!missing", True),
        ("!tier", False),
        ("empty=", False),
    ],
)
def test_label_selector(text: str, matches: bool) -> None:
    assert parse_label_selector(text).matches(LABELS) is matches


@pytest.mark.parametrize("text", ["app in (a", "app=web,", "=x", "app in a", "a=b c", "a=@"])
def test_bad_label_selectors(text: str) -> None:
    with pytest.raises(APIError) as info:
        parse_label_selector(text)
    assert info.value.code == 400


def test_label_selector_objects() -> None:
    assert label_selector_from_object(None) is None
    everything = label_selector_from_object({})
    assert everything is not None
    assert everything.matches({})
    sel = label_selector_from_object(
        {
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["front"]}],
        }
    )
    assert sel is not None
    assert sel.matches(LABELS)
    assert not sel.matches({"app": "web"})


POD = {
    "metadata": {"name": "p,1", "namespace": "default"},
    "spec": {"nodeName": "n1", "hostNetwork": True},
    "status": {"phase": "Running"},
}


@pytest.mark.parametrize(
    ("text", "matches"),
    [
        ("spec.nodeName=n1", True),
        ("spec.nodeName==n1", True),
        ("spec.nodeName!=n1", False),
        ("status.phase=Running,metadata.namespace=default", True),
        (r"metadata.name=p\,1", True),
        ("spec.hostNetwork=true", True),
        ("status.podIP=", True),
    ],
)
def test_field_selector(text: str, matches: bool) -> None:
    assert parse_field_selector(text, PODS.field_getters()).matches(POD) is matches


def test_field_selector_rejects_unsupported_fields() -> None:
    with pytest.raises(APIError) as info:
        parse_field_selector("spec.nodeName=n1", NODES.field_getters())
    assert info.value.code == 400
    with pytest.raises(APIError):
        parse_field_selector("nonsense", PODS.field_getters())
