"""What each overlay and component changes, and nothing else."""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

from exporter.controller.settings import ExecutorSettings
from tests.deploy.manifests import (
    BASE,
    COMPONENTS,
    NAMESPACE,
    OVERLAYS,
    ROOT,
    Obj,
    build,
    build_with,
    container,
    controller_workload,
    env,
    find,
    one,
)


def _key(obj: Obj) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return obj["kind"], meta.get("namespace", ""), meta["name"]


def _by_key(objects: list[Obj]) -> dict[tuple[str, str, str], Obj]:
    return {_key(o): o for o in objects}


def _without_env(obj: Obj, *names: str) -> Obj:
    """A copy of a workload with the named variables removed and the others in name order."""
    obj = copy.deepcopy(obj)
    for spec in obj["spec"]["template"]["spec"]["containers"]:
        spec["env"] = sorted(
            (e for e in spec.get("env", []) if e["name"] not in names), key=lambda e: e["name"]
        )
    return obj


def test_standard_is_the_base_plus_the_monitoring_objects() -> None:
    base = _by_key(build(BASE))
    standard = _by_key(build(OVERLAYS / "standard"))
    added = {k[0] for k in standard.keys() - base.keys()}
    assert base.keys() <= standard.keys()
    assert added == {
        "ServiceMonitor",
        "PrometheusRule",
        "AlertmanagerConfig",
        # Prometheus' permission to discover the ServiceMonitors' targets.
        "Role",
        "RoleBinding",
    }
    assert all(standard[k] == base[k] for k in base)


def test_dry_run_differs_from_standard_in_the_dry_run_flag_only() -> None:
    standard = _by_key(build(OVERLAYS / "standard"))
    dry_run = _by_key(build(OVERLAYS / "dry-run"))
    assert dry_run.keys() == standard.keys()
    changed = [k for k in standard if standard[k] != dry_run[k]]
    assert changed == [("Deployment", "nodesync", "nodesync-controller")]
    deployment = dry_run[changed[0]]
    assert env(container(deployment, "controller"))["NODESYNC_ROLLBACK_DRY_RUN"]["value"] == "true"
    assert _without_env(deployment, "NODESYNC_ROLLBACK_DRY_RUN") == _without_env(
        standard[changed[0]], "NODESYNC_ROLLBACK_DRY_RUN"
    )


def test_ha_runs_two_controllers_with_leader_election_and_a_rolling_update() -> None:
    objects = build(OVERLAYS / "ha")
    assert find(objects, "StatefulSet") == []
    # The journal is intake only; rollbacks live in NodeRollbacks: no claim per replica.
    assert find(objects, "PersistentVolumeClaim") == []
    deployment = one(objects, "Deployment", "nodesync-controller")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    # The new replica is started, and ready, before an old one stops.
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    variables = env(container(deployment, "controller"))
    assert variables["NODESYNC_LEADER_ELECTION_ENABLED"]["value"] == "true"
    assert variables["NODESYNC_LEADER_ELECTION_IDENTITY"]["valueFrom"] == {
        "fieldRef": {"fieldPath": "metadata.name"}
    }
    volumes = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
    assert set(volumes["journal"]) == {"name", "emptyDir"}
    mounts = {
        m["name"]: m["mountPath"] for m in container(deployment, "controller")["volumeMounts"]
    }
    assert variables["NODESYNC_JOURNAL_PATH"]["value"].startswith(mounts["journal"] + "/")


def test_ha_pod_template_is_the_base_deployments_plus_leader_election() -> None:
    base = one(build(BASE), "Deployment", "nodesync-controller")
    ha = one(build(OVERLAYS / "ha"), "Deployment", "nodesync-controller")
    names = ("NODESYNC_LEADER_ELECTION_ENABLED", "NODESYNC_LEADER_ELECTION_IDENTITY")
    ours = _without_env(ha, *names)["spec"]["template"]
    theirs = _without_env(base, *names)["spec"]["template"]
    # The differences on purpose: spread over nodes, the journal on an emptyDir.
    assert ours["spec"].pop("affinity")["podAntiAffinity"]
    for template in (ours, theirs):
        template["spec"]["volumes"] = [
            v for v in template["spec"]["volumes"] if v["name"] != "journal"
        ]
    assert ours == theirs


def test_ha_holds_exactly_the_default_leader_lease() -> None:
    defaults = ExecutorSettings()
    objects = build(OVERLAYS / "ha")
    role = one(objects, "Role", "nodesync-controller-leader-election")
    assert role["metadata"]["namespace"] == defaults.leader_elect_namespace
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert [r["resourceNames"] for r in named] == [[defaults.leader_elect_name]]
    assert find(build(BASE), "Role", "nodesync-controller-leader-election") == []


def test_deleting_nodes_is_a_component_with_its_permission() -> None:
    def deletes(objects: list[Obj]) -> bool:
        return any(
            "nodes" in rule["resources"] and "delete" in rule["verbs"]
            for role in find(objects, "ClusterRole")
            for rule in role["rules"]
        )

    assert not deletes(build(BASE))
    for overlay in (OVERLAYS / "standard", OVERLAYS / "ha"):
        plain = build(overlay)
        objects = build_with([overlay], [COMPONENTS / "delete-nodes"])
        assert deletes(objects)
        workload = controller_workload(objects)
        assert (
            env(container(workload, "controller"))["NODESYNC_ROLLBACK_DELETE_NODES"]["value"]
            == "true"
        )
        assert _without_env(workload, "NODESYNC_ROLLBACK_DELETE_NODES") == _without_env(
            controller_workload(plain), "NODESYNC_ROLLBACK_DELETE_NODES"
        )


def _prometheus_rbac(objects: list[Obj]) -> tuple[Obj, Obj]:
    return (
        one(objects, "Role", "nodesync-prometheus"),
        one(objects, "RoleBinding", "nodesync-prometheus"),
    )


def test_kube_prometheus_prometheus_may_discover_the_targets() -> None:
    for overlay in ("standard", "dry-run", "ha"):
        role, binding = _prometheus_rbac(build(OVERLAYS / overlay))
        # In nodesync's namespace, where the ServiceMonitors and their Services are.
        assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == NAMESPACE
        granted = {
            (group, resource, verb)
            for rule in role["rules"]
            for group in rule["apiGroups"]
            for resource in rule["resources"]
            for verb in rule["verbs"]
        }
        # What Prometheus' Kubernetes service discovery lists and watches (role endpoints or
        # endpointslice, with the pods behind them), and nothing more.
        assert granted == {
            (group, resource, verb)
            for group, resource in [
                ("", "services"),
                ("", "endpoints"),
                ("", "pods"),
                ("discovery.k8s.io", "endpointslices"),
            ]
            for verb in ("list", "watch")
        }
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "nodesync-prometheus",
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"}
        ]
    assert find(build(BASE), "Role", "nodesync-prometheus") == []


def _standard_with_documented_patch(tmp_path: Path, heading: str, end: str) -> list[Obj]:
    """The standard overlay built with the one yaml block of docs/install.md's section
    ``heading`` (up to the next ``end``), as a reader's own overlay would add it."""
    docs = (ROOT / "docs" / "install.md").read_text(encoding="utf-8")
    section = docs.split(heading, 1)[1].split(end, 1)[0]
    (patch,) = re.findall(r"```yaml\n(.*?)```", section, re.S)
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n"
        f"  - {os.path.relpath(OVERLAYS / 'standard', overlay)}\n{patch}",
        encoding="utf-8",
    )
    return build(overlay)


def _changed(standard: list[Obj], patched: list[Obj]) -> list[tuple[str, str, str]]:
    """The objects the patch changed."""
    before = _by_key(standard)
    return [k for k, o in _by_key(patched).items() if before[k] != o]


def test_the_documented_patch_binds_another_prometheus(tmp_path: Path) -> None:
    patched = _standard_with_documented_patch(tmp_path, "### Prometheus' permissions", "\n### ")
    _, binding = _prometheus_rbac(patched)
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "prometheus", "namespace": "observability"}
    ]
    # Nothing else changes.
    changed = _changed(build(OVERLAYS / "standard"), patched)
    assert changed == [("RoleBinding", NAMESPACE, "nodesync-prometheus")]


def test_the_documented_patch_raises_the_controllers_memory_limit(tmp_path: Path) -> None:
    patched = _standard_with_documented_patch(
        tmp_path, "### The controller's memory by cluster size", "\n## "
    )
    standard = build(OVERLAYS / "standard")
    shipped = container(controller_workload(standard), "controller")
    raised = container(controller_workload(patched), "controller")
    assert shipped["resources"]["limits"]["memory"] == "512Mi"
    assert raised["resources"]["limits"] == {**shipped["resources"]["limits"], "memory": "1Gi"}
    # Nothing else changes: the controller is the Deployment's first container.
    assert _changed(standard, patched) == [("Deployment", NAMESPACE, "nodesync-controller")]
    assert raised == {
        **shipped,
        "resources": {**shipped["resources"], "limits": raised["resources"]["limits"]},
    }
