"""The Helm chart (deploy/helm/nodesync), linted and rendered with Helm's own code (the
helm-python-sdk wheel binds Helm's Go library): its templates are what scripts/gen-helm-chart
makes of the kustomize manifests, and every combination of its switches renders exactly what
the corresponding kustomization builds."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import helm_python as helm
import pytest

from exporter import __version__
from nodesync_sim.yamlfile import loads_all
from tests.deploy import helmchart
from tests.deploy.helmchart import (
    BASE,
    CHART,
    DELETE_NODES,
    DRY_RUN,
    HA,
    STANDARD,
    Key,
    Obj,
    compose,
    dry_run_patches,
    key,
    kustomize_dir,
    objects,
)

RELEASE = "nodesync"
NAMESPACE = "nodesync"
COMBINATIONS = list(itertools.product([False, True], repeat=4))


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART) as loaded:
        yield loaded


def render(chart: helm.Chart, values: dict[str, Any]) -> dict[Key, Obj]:
    rendered = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    found: dict[Key, Obj] = {}
    for path, text in rendered.items():
        if path.endswith("NOTES.txt"):
            continue
        for obj in loads_all(text, source=path):
            if obj:
                assert key(obj) not in found, f"{key(obj)} rendered twice"
                found[key(obj)] = helmchart.normalized(obj)
    return found


def by_key(text: str) -> dict[Key, Obj]:
    return {key(obj): obj for obj in objects(text)}


def test_the_templates_are_generated_from_the_manifests() -> None:
    assert helmchart.generated_on_disk() == helmchart.generate(), (
        "deploy/helm/nodesync/templates differ from the manifests: run scripts/gen-helm-chart"
    )


def test_environment_order_does_not_matter() -> None:
    """The comparisons sort each container's environment by name (kustomize reorders it):
    that is sound while no value refers to another variable."""
    for path in (STANDARD, HA, DRY_RUN):
        for obj in objects(kustomize_dir(path)):
            pod = obj.get("spec", {}).get("template", {}).get("spec", {})
            for container in pod.get("containers", []):
                for variable in container.get("env", []):
                    assert "$(" not in str(variable.get("value", "")), variable


@pytest.mark.parametrize(
    "values",
    [{}, {"dryRun": False, "deleteNodes": True, "ha": {"enabled": True}, "monitoring": False}],
    ids=["defaults", "everything-switched"],
)
def test_helm_lint_passes(values: dict[str, Any]) -> None:
    report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_default_values_render_the_dry_run_overlay(chart: helm.Chart) -> None:
    assert render(chart, {}) == by_key(kustomize_dir(DRY_RUN))


def test_acting_without_monitoring_renders_the_base(chart: helm.Chart) -> None:
    assert render(chart, {"dryRun": False, "monitoring": False}) == by_key(kustomize_dir(BASE))


@pytest.fixture(scope="module")
def monitoring_objects() -> set[Key]:
    """What deploy/components/monitoring adds to the base."""
    return set(by_key(kustomize_dir(STANDARD))) - set(by_key(kustomize_dir(BASE)))


@pytest.mark.parametrize(
    ("dry_run", "delete_nodes", "ha", "monitoring"),
    COMBINATIONS,
    ids=[
        "-".join(n for n, on in zip(("dry", "delete", "ha", "mon"), c, strict=True) if on) or "none"
        for c in COMBINATIONS
    ],
)
def test_every_combination_renders_its_kustomization(
    chart: helm.Chart,
    monitoring_objects: set[Key],
    dry_run: bool,
    delete_nodes: bool,
    ha: bool,
    monitoring: bool,
) -> None:
    values = {
        "dryRun": dry_run,
        "deleteNodes": delete_nodes,
        "ha": {"enabled": ha},
        "monitoring": monitoring,
    }
    expected = by_key(
        compose(
            HA if ha else STANDARD,
            [DELETE_NODES] if delete_nodes else [],
            dry_run_patches() if dry_run else [],
        )
    )
    if not monitoring:
        expected = {k: v for k, v in expected.items() if k not in monitoring_objects}
    assert render(chart, values) == expected


def _images(rendered: dict[Key, Obj]) -> set[str]:
    return {
        container["image"]
        for obj in rendered.values()
        if obj["kind"] in ("DaemonSet", "Deployment")
        for container in obj["spec"]["template"]["spec"]["containers"]
    }


def test_the_image_comes_from_the_values(chart: helm.Chart) -> None:
    assert _images(render(chart, {})) == {f"nodesync:{__version__}"}
    values = {"image": {"repository": "registry.example.com/nodesync", "tag": "0.2.0"}}
    assert _images(render(chart, values)) == {"registry.example.com/nodesync:0.2.0"}
    digest = "sha256:" + "ab" * 32
    values = {"image": {"repository": "registry.example.com/nodesync", "digest": digest}}
    assert _images(render(chart, values)) == {f"registry.example.com/nodesync@{digest}"}


def test_the_chart_and_image_versions_are_the_package_version(chart: helm.Chart) -> None:
    assert chart.version == __version__
    assert chart.metadata["appVersion"] == __version__
    (base,) = loads_all((BASE / "kustomization.yaml").read_text(encoding="utf-8"), source="base")
    assert base["images"] == [{"name": "nodesync", "newTag": __version__}]


def test_ha_replicas(chart: helm.Chart) -> None:
    rendered = render(chart, {"ha": {"enabled": True, "replicas": 3}})
    assert rendered[("Deployment", NAMESPACE, "nodesync-controller")]["spec"]["replicas"] == 3


def test_the_webhook_token_secret(chart: helm.Chart) -> None:
    secret_key = ("Secret", NAMESPACE, "nodesync-webhook-token")
    assert secret_key not in render(chart, {})
    rendered = render(chart, {"webhookToken": {"create": True, "value": "s3cr3t"}})
    assert rendered[secret_key]["stringData"] == {"token": "s3cr3t"}
    # It is the Secret the controller reads.
    controller = rendered[("Deployment", NAMESPACE, "nodesync-controller")]
    (container,) = controller["spec"]["template"]["spec"]["containers"]
    (token,) = [e for e in container["env"] if e["name"] == "NODESYNC_WEBHOOK_TOKEN"]
    assert token["valueFrom"]["secretKeyRef"] == {"key": "token", "name": secret_key[2]}
    with pytest.raises(helm.HelmError, match=r"webhookToken\.value"):
        render(chart, {"webhookToken": {"create": True}})


def _resources(rendered: dict[Key, Obj], kind: str, name: str) -> Obj:
    (container,) = rendered[(kind, NAMESPACE, name)]["spec"]["template"]["spec"]["containers"]
    resources: Obj = container["resources"]
    return resources


def test_the_containers_resources_come_from_the_values(chart: helm.Chart) -> None:
    default = render(chart, {})
    controller = ("Deployment", "nodesync-controller")
    agent = ("DaemonSet", "nodesync-agent")
    assert _resources(default, *controller)["limits"]["memory"] == "512Mi"
    # One quantity set: Helm merges it into the defaults, and nothing else changes.
    raised = render(chart, {"controller": {"resources": {"limits": {"memory": "1Gi"}}}})
    assert _resources(raised, *controller) == {
        "limits": {"cpu": "1", "memory": "1Gi"},
        "requests": {"cpu": "50m", "memory": "128Mi"},
    }
    assert [k for k in default if default[k] != raised[k]] == [
        ("Deployment", NAMESPACE, controller[1])
    ]
    lowered = render(chart, {"agent": {"resources": {"requests": {"cpu": "10m"}}}})
    assert _resources(lowered, *agent)["requests"] == {"cpu": "10m", "memory": "96Mi"}
    assert [k for k in default if default[k] != lowered[k]] == [("DaemonSet", NAMESPACE, agent[1])]


def test_a_switch_that_changes_resources_stops_the_generator() -> None:
    lines = [
        "        resources:",
        "          limits:",
        "{{- if .Values.ha.enabled }}",
        "            memory: 1Gi",
        "{{- end }}",
        "        securityContext: {}",
    ]
    with pytest.raises(helmchart.GenerationError, match="a switch changes its resources"):
        helmchart.resources_from_values(("Deployment", NAMESPACE, "nodesync-controller"), lines)
    twice = ["        resources:", "          limits: {}", "        resources:"]
    with pytest.raises(helmchart.GenerationError, match="2 resources blocks"):
        helmchart.resources_from_values(("DaemonSet", NAMESPACE, "nodesync-agent"), twice)


def test_the_namespace_can_be_left_out(chart: helm.Chart) -> None:
    assert ("Namespace", "", NAMESPACE) in render(chart, {})
    assert ("Namespace", "", NAMESPACE) not in render(chart, {"namespace": {"create": False}})


@pytest.mark.parametrize(
    "values",
    [
        {"dryRun": "yes"},
        {"ha": {"enabled": True, "replicas": 1}},
        {"image": {"repository": "nodesync", "digest": "latest"}},
        {"delete_nodes": True},
        {"controller": {"resources": {"limit": {"memory": "1Gi"}}}},
    ],
    ids=["not-a-boolean", "one-replica-ha", "bad-digest", "unknown-value", "resources-typo"],
)
def test_the_schema_refuses_bad_values(chart: helm.Chart, values: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmError):
        render(chart, values)
