"""The Helm chart (deploy/helm/nodesync), linted and rendered with Helm's own code (the
helm-python-sdk wheel binds Helm's Go library): its templates are what scripts/gen-helm-chart
makes of the kustomize manifests, and every combination of its switches renders exactly what
the corresponding kustomization builds."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from typing import Any

import helm_python as helm
import pytest

from exporter import __version__
from exporter.cli import get_parser
from nodesync_sim.yamlfile import loads_all
from tests.deploy import chartvalues, helmchart
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


def changed(before: dict[Key, Obj], after: dict[Key, Obj]) -> list[Key]:
    """The objects of ``before`` that ``after`` renders differently."""
    return [k for k in before if before[k] != after[k]]


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
    [
        {},
        {"dryRun": False, "deleteNodes": True, "ha": {"enabled": True}, "monitoring": False},
        {
            "controller": {
                "extraArgs": ["--guard.max-rollbacks=20", "--log.level=debug"],
                "nodeSelector": {"pool": "system"},
                "tolerations": [{"key": "dedicated", "operator": "Exists"}],
            },
            "agent": {"extraArgs": ["--sync.period=15s"]},
            "monitoringLabels": {"release": "kube-prometheus-stack"},
            "imagePullSecrets": [{"name": "registry"}],
        },
    ],
    ids=["defaults", "everything-switched", "the-other-values"],
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
    assert changed(default, raised) == [("Deployment", NAMESPACE, controller[1])]
    lowered = render(chart, {"agent": {"resources": {"requests": {"cpu": "10m"}}}})
    assert _resources(lowered, *agent)["requests"] == {"cpu": "10m", "memory": "96Mi"}
    assert changed(default, lowered) == [("DaemonSet", NAMESPACE, agent[1])]


def test_a_switch_that_changes_resources_stops_the_generator() -> None:
    lines = [
        "        resources:",
        "          limits:",
        "{{- if .Values.ha.enabled }}",
        "            memory: 1Gi",
        "{{- end }}",
        "        securityContext: {}",
    ]
    with pytest.raises(chartvalues.ValueLinesError, match="a switch changes its resources"):
        chartvalues.resources_from_values(("Deployment", NAMESPACE, "nodesync-controller"), lines)
    twice = ["        resources:", "          limits: {}", "        resources:"]
    with pytest.raises(chartvalues.ValueLinesError, match="2 resources blocks"):
        chartvalues.resources_from_values(("DaemonSet", NAMESPACE, "nodesync-agent"), twice)


WORKLOADS = {
    "controller": ("Deployment", "nodesync-controller"),
    "agent": ("DaemonSet", "nodesync-agent"),
}


def _pod(rendered: dict[Key, Obj], role: str) -> Obj:
    kind, name = WORKLOADS[role]
    pod: Obj = rendered[(kind, NAMESPACE, name)]["spec"]["template"]["spec"]
    return pod


def _container(rendered: dict[Key, Obj], role: str) -> Obj:
    (container,) = _pod(rendered, role)["containers"]
    return container


def _parsed(container: Obj) -> Any:
    """The container's command line as nodesync parses it, with the container's environment
    (its literal values; fieldRef ones as a placeholder)."""
    environ = {e["name"]: str(e.get("value", "x")) for e in container.get("env", [])}
    return get_parser(environ, command=container["args"][0]).parse_args(container["args"])


@pytest.mark.parametrize(
    ("role", "extra", "dest", "value"),
    [
        (
            "controller",
            ["--guard.max-rollbacks=20", "--log.level=debug"],
            "guard_max_rollbacks",
            20,
        ),
        ("agent", ["--sync.period=15s"], "sync_period", 15.0),
    ],
)
def test_extra_args_reach_the_command_line(
    chart: helm.Chart, role: str, extra: list[str], dest: str, value: object
) -> None:
    default = render(chart, {})
    rendered = render(chart, {role: {"extraArgs": extra}})
    before, after = _container(default, role), _container(rendered, role)
    assert after["args"] == [*before["args"], *extra]
    assert getattr(_parsed(before), dest) != value
    assert getattr(_parsed(after), dest) == value
    # The chart's own settings are untouched, and nothing else changes.
    assert _parsed(after).log_format == "json"
    kind, name = WORKLOADS[role]
    assert changed(default, rendered) == [(kind, NAMESPACE, name)]


def _chart_set_flags(container: Obj) -> list[str]:
    """The flags of every setting the container sets: by a flag in its args or by the
    setting's environment variable (which a flag would override), from nodesync's parser."""
    parser = helmchart.command_parser(container["args"][0])
    names = {e["name"] for e in container["env"]}
    given = {a.split("=", 1)[0] for a in container["args"]}
    return [
        action.option_strings[0]
        for action in parser._actions
        if (setting := getattr(action, "setting", None)) is not None
        and (setting.environment in names or given & set(action.option_strings))
    ]


@pytest.mark.parametrize("role", ["controller", "agent"])
def test_extra_args_cannot_override_what_the_chart_sets(chart: helm.Chart, role: str) -> None:
    # Every build's settings: ha adds the leader's identity.
    container = _container(render(chart, {"ha": {"enabled": True}}), role)
    flags = _chart_set_flags(container)
    expected = {
        "controller": {"--rollback.dry-run", "--journal.path", "--web.listen-address"},
        "agent": {"--cri.endpoint", "--kubelet.root-dir", "--web.listen-address"},
    }[role]
    assert expected <= set(flags)
    for flag in flags:
        with pytest.raises(helm.HelmError, match=re.escape(f"{role}.extraArgs: {flag} is set")):
            render(chart, {role: {"extraArgs": ["--log.level=debug", f"{flag}=x"]}})


@pytest.mark.parametrize(
    ("role", "arg", "flag"),
    [
        ("controller", "--no-rollback.dry-run", "--no-rollback.dry-run"),
        ("controller", "--dry-run=false", "--dry-run"),  # a former name of --rollback.dry-run
        ("controller", "--leader-election.enabled", "--leader-election.enabled"),
        ("agent", "--cri-endpoint=unix:///run/other.sock", "--cri-endpoint"),
    ],
)
def test_extra_args_cannot_override_by_another_name(
    chart: helm.Chart, role: str, arg: str, flag: str
) -> None:
    with pytest.raises(helm.HelmError, match=re.escape(f"{role}.extraArgs: {flag} is set")):
        render(chart, {role: {"extraArgs": [arg]}})


MONITORING_KINDS = {"ServiceMonitor", "PrometheusRule", "AlertmanagerConfig"}


def test_monitoring_labels_go_on_what_prometheus_and_alertmanager_select(
    chart: helm.Chart,
) -> None:
    default = render(chart, {})
    labelled = render(chart, {"monitoringLabels": {"release": "kps", "team": "platform"}})
    labelled_keys = changed(default, labelled)
    assert {k[0] for k in labelled_keys} == MONITORING_KINDS
    assert len(labelled_keys) == 4  # two ServiceMonitors
    for k in labelled_keys:
        assert labelled[k]["metadata"]["labels"] == {
            **default[k]["metadata"]["labels"],
            "release": "kps",
            "team": "platform",
        }
    # Without the monitoring objects the value changes nothing.
    off = {"monitoring": False}
    assert render(chart, {**off, "monitoringLabels": {"release": "kps"}}) == render(chart, off)


def test_the_namespace_can_be_left_out(chart: helm.Chart) -> None:
    assert ("Namespace", "", NAMESPACE) in render(chart, {})
    assert ("Namespace", "", NAMESPACE) not in render(chart, {"namespace": {"create": False}})


def test_image_pull_secrets_go_on_both_pods(chart: helm.Chart) -> None:
    default = render(chart, {})
    secrets = [{"name": "registry-a"}, {"name": "registry-b"}]
    rendered = render(chart, {"imagePullSecrets": secrets})
    for role in WORKLOADS:
        assert "imagePullSecrets" not in _pod(default, role)
        assert _pod(rendered, role)["imagePullSecrets"] == secrets
        assert {**_pod(rendered, role), "imagePullSecrets": None} == {
            **_pod(default, role),
            "imagePullSecrets": None,
        }
    changed_keys = set(changed(default, rendered))
    assert changed_keys == {(kind, NAMESPACE, name) for kind, name in WORKLOADS.values()}


@pytest.mark.parametrize("ha", [False, True], ids=["single", "ha"])
def test_the_controller_can_be_placed(chart: helm.Chart, ha: bool) -> None:
    switched = {"ha": {"enabled": ha}}
    default = render(chart, switched)
    placement = {
        "nodeSelector": {"node-role.example.com/system": "true"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "system",
                         "effect": "NoSchedule"}],
    }  # fmt: skip
    rendered = render(chart, {**switched, "controller": placement})
    pod = _pod(rendered, "controller")
    assert pod["nodeSelector"] == placement["nodeSelector"]
    assert pod["tolerations"] == placement["tolerations"]
    # The ha build's anti-affinity stays beside them.
    assert ("affinity" in pod) is ha
    assert {k: v for k, v in pod.items() if k not in placement} == _pod(default, "controller")
    assert changed(default, rendered) == [("Deployment", NAMESPACE, "nodesync-controller")]


def test_a_pod_field_the_manifests_set_stops_the_generator() -> None:
    lines = [
        "      tolerations:",
        "      - operator: Exists",
        "      serviceAccountName: nodesync-controller",
    ]
    with pytest.raises(chartvalues.ValueLinesError, match="set tolerations already"):
        chartvalues.pod_fields_from_values(("Deployment", NAMESPACE, "nodesync-controller"), lines)
    # The agent's own tolerations are not one of its pod values.
    agent = chartvalues.pod_fields_from_values(("DaemonSet", NAMESPACE, "nodesync-agent"), lines)
    assert agent[-1] == lines[-1]
    assert "{{- with .Values.imagePullSecrets }}" in agent


SCHEMA = "don't meet the specifications of the schema"


@pytest.mark.parametrize(
    ("values", "reason"),
    [
        ({"dryRun": "yes"}, "/dryRun"),
        ({"ha": {"enabled": True, "replicas": 1}}, "/ha/replicas"),
        ({"image": {"repository": "nodesync", "digest": "latest"}}, "/image/digest"),
        ({"delete_nodes": True}, "delete_nodes"),
        ({"controller": {"resources": {"limit": {"memory": "1Gi"}}}}, "limit"),
        ({"controller": {"extraArgs": ["--guard.max-rollbacks", "20"]}}, "'20' does not match"),
        ({"agent": {"extraArgs": "--sync.period=15s"}}, "/agent/extraArgs"),
        ({"monitoringLabels": {"app.kubernetes.io/name": "x"}}, "'app.kubernetes.io/name'"),
        ({"monitoringLabels": {"release": 1}}, "/monitoringLabels/release"),
        ({"imagePullSecrets": ["registry-a"]}, "/imagePullSecrets/0"),
        ({"agent": {"nodeSelector": {"pool": "system"}}}, "nodeSelector"),
    ],
    ids=[
        "not-a-boolean",
        "one-replica-ha",
        "bad-digest",
        "unknown-value",
        "resources-typo",
        "extra-arg-not-a-flag",
        "extra-args-not-a-list",
        "label-the-chart-sets",
        "label-not-a-string",
        "pull-secret-not-an-object",
        "agent-placement",
    ],
)
def test_the_schema_refuses_bad_values(
    chart: helm.Chart, values: dict[str, Any], reason: str
) -> None:
    with pytest.raises(helm.HelmError) as refused:
        render(chart, values)
    assert SCHEMA in str(refused.value)
    assert reason in str(refused.value)


def test_the_generator_stops_where_extra_args_cannot_go() -> None:
    controller = ("Deployment", NAMESPACE, "nodesync-controller")
    switched = [
        "      - args:",
        "        - controller",
        "{{- if .Values.ha.enabled }}",
        "        - --leader-election.enabled",
        "{{- end }}",
        "        env: []",
    ]
    with pytest.raises(chartvalues.ValueLinesError, match="a switch changes its args"):
        chartvalues.extra_args_from_values(controller, switched, [])
    plain = [*switched[:2], switched[-1]]
    (call,) = [
        line
        for line in chartvalues.extra_args_from_values(controller, plain, ["--a"])
        if "extraArgs" in line
    ]
    assert call.startswith("{{- with include")
    assert '(list "--a")' in call
    assert call.endswith("{{ . | nindent 8 }}{{- end }}")
    parser = helmchart.command_parser("agent")
    with pytest.raises(chartvalues.ValueLinesError, match="--no-such-flag"):
        chartvalues.reserved_flags([{"args": ["agent", "--no-such-flag=1"]}], parser)
