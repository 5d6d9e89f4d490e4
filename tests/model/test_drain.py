"""Which pods a drain evicts and which it leaves, and why: kubectl drain's rules, with bare and
emptyDir pods evicted unless the policy's flags say otherwise."""

from __future__ import annotations

from dataclasses import replace

import pytest

from exporter.kube.convert import pod_info
from exporter.model.drain import (
    BARE,
    DAEMONSET,
    EMPTYDIR,
    FINISHED,
    MIRROR,
    TERMINATING,
    DrainPolicy,
    disposition,
)
from exporter.model.kube import PodInfo
from exporter.settings.policy import default_policy

POD = PodInfo(
    uid="u", namespace="ns", name="p", node_name="n", phase="Running", created_at=0.0,
    owner_kind="ReplicaSet",
)  # fmt: skip
DEFAULT = DrainPolicy(force=True, delete_emptydir_data=True)  # as the flags' defaults
KUBECTL = DrainPolicy(force=False, delete_emptydir_data=False)


@pytest.mark.parametrize(
    ("pod", "default", "kubectl"),
    [
        (POD, None, None),
        (replace(POD, mirror=True, owner_kind="Node"), MIRROR, MIRROR),
        (replace(POD, owner_kind="DaemonSet"), DAEMONSET, DAEMONSET),
        (replace(POD, phase="Succeeded", owner_kind=""), FINISHED, FINISHED),
        (replace(POD, deletion_timestamp=5.0), TERMINATING, TERMINATING),
        (replace(POD, owner_kind=""), None, BARE),
        (replace(POD, empty_dir=True), None, EMPTYDIR),
        (replace(POD, owner_kind="", empty_dir=True), None, BARE),
        (replace(POD, owner_kind="DaemonSet", empty_dir=True), DAEMONSET, DAEMONSET),
    ],
)
def test_disposition(pod: PodInfo, default: str | None, kubectl: str | None) -> None:
    assert disposition(pod, DEFAULT) == default
    assert disposition(pod, KUBECTL) == kubectl


def test_the_default_is_the_flags_default() -> None:
    assert default_policy().drain == DEFAULT


def test_each_flag_alone() -> None:
    scratch = replace(POD, empty_dir=True)
    bare = replace(POD, owner_kind="")
    assert disposition(bare, replace(DEFAULT, force=False)) == BARE
    assert disposition(scratch, replace(DEFAULT, force=False)) is None
    assert disposition(scratch, replace(DEFAULT, delete_emptydir_data=False)) == EMPTYDIR
    assert disposition(bare, replace(DEFAULT, delete_emptydir_data=False)) is None


def test_an_emptydir_volume_is_read_from_the_pod_spec() -> None:
    meta = {"name": "p", "namespace": "ns", "uid": "u"}
    volumes = [{"name": "cfg", "configMap": {"name": "c"}}, {"name": "tmp", "emptyDir": {}}]
    assert pod_info({"metadata": meta, "spec": {"volumes": volumes}}).empty_dir
    assert not pod_info({"metadata": meta, "spec": {"volumes": volumes[:1]}}).empty_dir
    assert not pod_info({"metadata": meta, "spec": {"volumes": None}}).empty_dir
