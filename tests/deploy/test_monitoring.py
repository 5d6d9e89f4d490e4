"""The Prometheus Operator objects: the PrometheusRule is rules/*.yml exactly (and promtool
accepts it), the agents' targets get the labels docs/rules.md requires, and the
AlertmanagerConfig routes as deploy/alertmanager/alertmanager.yml does."""

from __future__ import annotations

import json
import re
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from nodesync_sim.yamlfile import load_file, loads
from tests.deploy import prometheusrule
from tests.deploy.manifests import COMPONENTS, OVERLAYS, ROOT, Obj, build, one
from tests.rules.rulefiles import ALERTMANAGER_CONFIG, binary, explain, load
from tests.support.docs import markdown_anchors

MONITORING = COMPONENTS / "monitoring"


# ---------------------------------------------------------------- the PrometheusRule


def test_the_shipped_prometheusrule_is_generated_from_the_rule_files() -> None:
    shipped = prometheusrule.MANIFEST.read_text(encoding="utf-8")
    assert shipped == prometheusrule.render(), (
        "deploy/components/monitoring/prometheusrule.json differs from rules/*.yml: "
        "run scripts/gen-prometheusrule"
    )
    spec_groups = json.loads(shipped)["spec"]["groups"]
    rule_files = prometheusrule.rule_files()
    assert [g["name"] for g in spec_groups] == [
        g["name"] for path in rule_files for g in load(path)["groups"]
    ]


def test_kustomize_ships_the_rule_unchanged() -> None:
    built = one(build(OVERLAYS / "standard"), "PrometheusRule", "nodesync")
    assert built == json.loads(prometheusrule.MANIFEST.read_text(encoding="utf-8"))


@pytest.mark.prometheus
def test_promtool_accepts_the_generated_groups(tmp_path: Path) -> None:
    groups = prometheusrule.manifest()["spec"]["groups"]
    rules = tmp_path / "nodesync.rules.json"
    rules.write_text(json.dumps({"groups": groups}), encoding="utf-8")
    result = subprocess.run(
        [binary("promtool"), "check", "rules", str(rules)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, explain(result)


def test_the_generator_reports_and_repairs_drift(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "deploy" / "components" / "monitoring" / "prometheusrule.json"
    copy.parent.mkdir(parents=True)
    copy.write_text(prometheusrule.render().replace("2m", "3m", 1), encoding="utf-8")
    monkeypatch.setattr(prometheusrule, "MANIFEST", copy)
    monkeypatch.setattr(prometheusrule, "ROOT", tmp_path)
    assert prometheusrule.main(["--check"]) == 1
    assert "run scripts/gen-prometheusrule" in capsys.readouterr().err
    assert prometheusrule.main([]) == 0
    assert copy.read_text(encoding="utf-8") == prometheusrule.render()
    assert prometheusrule.main(["--check"]) == 0


def test_the_generator_script_checks_the_repository() -> None:
    result = subprocess.run(
        [str(ROOT / "scripts" / "gen-prometheusrule"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_a_group_name_used_twice_is_refused(tmp_path: Path) -> None:
    for name in ("a.yml", "b.yml"):
        (tmp_path / name).write_text(
            "groups:\n  - name: same\n    rules:\n      - record: x\n        expr: up\n",
            encoding="utf-8",
        )
    with pytest.raises(ValueError, match="group 'same'"):
        prometheusrule.groups(tmp_path)


def _alerts(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for g in document["spec"]["groups"] for r in g["rules"] if "alert" in r]


def test_every_alert_has_an_absolute_runbook_url_from_the_configured_base(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runbooks = (ROOT / "docs" / "runbooks.md").read_text(encoding="utf-8")
    shipped = _alerts(json.loads(prometheusrule.MANIFEST.read_text(encoding="utf-8")))
    assert shipped
    for alert in shipped:
        anchor = alert["alert"].lower()
        url = alert["annotations"]["runbook_url"]
        assert url == f"https://github.com/nodesync/nodesync/blob/main/docs/runbooks.md#{anchor}"
        assert anchor in markdown_anchors(runbooks), f"docs/runbooks.md has no #{anchor}"
    base = "https://wiki.example.com/ops/nodesync"
    out = tmp_path / "rule.json"
    assert prometheusrule.main(["--runbook-base-url", base, "--output", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    ours = json.loads(out.read_text(encoding="utf-8"))
    assert [a["annotations"]["runbook_url"] for a in _alerts(ours)] == [
        f"{base}#{a['alert'].lower()}" for a in shipped
    ]
    # Only the runbook URLs differ; the shipped file is untouched.
    assert json.loads(prometheusrule.render()) == json.loads(
        out.read_text(encoding="utf-8").replace(base + "#", prometheusrule.RUNBOOK_BASE_URL + "#")
    )
    assert prometheusrule.main(["--check"]) == 0
    assert prometheusrule.main(["--runbook-base-url", base, "--output", "-"]) == 0
    assert json.loads(capsys.readouterr().out) == ours


@pytest.mark.parametrize(
    ("base", "problem"),
    [
        ("docs/runbooks.md", "absolute"),
        ("ftp://example.com/runbooks", "absolute"),
        ("https://example.com/runbooks.md#top", "fragment"),
    ],
)
def test_a_bad_runbook_base_url_is_one_line_naming_the_flag(
    base: str, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert prometheusrule.main(["--runbook-base-url", base, "--output", "-"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith(f"{prometheusrule.GENERATOR}: --runbook-base-url {base!r}: ")
    assert problem in line
    assert "Traceback" not in captured.err


def test_a_rule_file_with_another_runbook_url_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.yml").write_text(
        "groups:\n  - name: g\n    rules:\n      - alert: NodesyncX\n        expr: up\n"
        "        annotations:\n          runbook_url: docs/runbooks.md#nodesyncx\n",
        encoding="utf-8",
    )
    with pytest.raises(ValueError, match="NodesyncX: runbook_url is not https://"):
        prometheusrule.groups(tmp_path)


# ---------------------------------------------------------------- the agents' target labels


def relabel(labels: dict[str, str], configs: list[Obj]) -> dict[str, str]:
    """Prometheus' relabelling (the actions the ServiceMonitors use), then the removal of the
    ``__`` labels that happens after relabelling."""
    labels = dict(labels)
    for config in configs:
        action = config.get("action", "replace")
        regex = re.compile(config.get("regex", "(.*)"))
        if action == "replace":
            value = config.get("separator", ";").join(
                labels.get(name, "") for name in config.get("sourceLabels", [])
            )
            match = regex.fullmatch(value)
            if match is None:
                continue
            result = match.expand(config.get("replacement", "$1").replace("$", "\\"))
            if result:
                labels[config["targetLabel"]] = result
            else:
                labels.pop(config["targetLabel"], None)
        elif action == "labeldrop":
            labels = {k: v for k, v in labels.items() if not regex.fullmatch(k)}
        elif action == "labelkeep":
            labels = {k: v for k, v in labels.items() if regex.fullmatch(k)}
        else:
            raise AssertionError(f"relabel action {action} is not modelled here")
    return {k: v for k, v in labels.items() if not k.startswith("__")}


def operator_target(monitor: Obj, service: Obj, pod: str, node: str) -> dict[str, str]:
    """The labels the Prometheus Operator gives an endpoints target before a ServiceMonitor's
    own relabelings run (plus the discovery labels those may read)."""
    meta = service["metadata"]
    return {
        "__address__": f"10.0.0.7:{service['spec']['ports'][0]['port']}",
        "__meta_kubernetes_pod_node_name": node,
        "__meta_kubernetes_pod_name": pod,
        "instance": f"10.0.0.7:{service['spec']['ports'][0]['port']}",
        "job": meta["name"],
        "namespace": meta["namespace"],
        "service": meta["name"],
        "pod": pod,
        "container": "agent",
        "endpoint": monitor["spec"]["endpoints"][0]["port"],
    }


def test_agent_targets_carry_the_node_and_no_pod_identity() -> None:
    objects = build(OVERLAYS / "standard")
    monitor = one(objects, "ServiceMonitor", "nodesync-agent")
    service = one(objects, "Service", "nodesync-agent")
    target = operator_target(monitor, service, "nodesync-agent-x7k2p", "ip-10-0-1-7")
    labels = relabel(target, monitor["spec"]["endpoints"][0]["relabelings"])
    assert labels["node"] == "ip-10-0-1-7"
    # The agent's series carry namespace, pod and container of the pods they describe.
    assert {"namespace", "pod", "container"}.isdisjoint(labels)
    assert labels["agent_namespace"] == "nodesync"
    assert labels["agent_pod"] == "nodesync-agent-x7k2p"


def test_controller_targets_carry_no_node_label() -> None:
    objects = build(OVERLAYS / "standard")
    monitor = one(objects, "ServiceMonitor", "nodesync-controller")
    service = one(objects, "Service", "nodesync-controller-metrics")
    target = operator_target(monitor, service, "nodesync-controller-0", "ip-10-0-1-7")
    labels = relabel(target, monitor["spec"]["endpoints"][0].get("relabelings", []))
    assert "node" not in labels


def test_scrapes_are_frequent_enough_for_the_rules() -> None:
    objects = build(OVERLAYS / "standard")
    for name in ("nodesync-agent", "nodesync-controller"):
        for endpoint in one(objects, "ServiceMonitor", name)["spec"]["endpoints"]:
            assert endpoint["interval"] in ("15s", "30s", "1m")


# ---------------------------------------------------------------- Alertmanager


_MATCHER = re.compile(r'^(?P<name>\w+)(?P<op>=~|!~|!=|=)"(?P<value>.*)"$')


def _matchers(strings: list[str]) -> list[dict[str, str]]:
    found = []
    for text in strings:
        match = _MATCHER.match(text)
        assert match is not None, f"unexpected matcher {text!r}"
        found.append({"name": match["name"], "matchType": match["op"], "value": match["value"]})
    return found


def _example() -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    config = load(ALERTMANAGER_CONFIG)
    (route,) = [r for r in config["route"]["routes"] if r["receiver"] == "nodesync-hook"]
    (receiver,) = [r for r in config["receivers"] if r["name"] == "nodesync-hook"]
    return route, receiver, config["inhibit_rules"]


def test_the_alertmanagerconfig_routes_like_the_example_configuration() -> None:
    route, receiver, inhibit = _example()
    shipped = one(build(MONITORING), "AlertmanagerConfig", "nodesync")["spec"]
    assert shipped["route"] == {
        "receiver": "nodesync-hook",
        "matchers": _matchers(route["matchers"]),
        "groupBy": route["group_by"],
        "groupWait": route["group_wait"],
        "groupInterval": route["group_interval"],
        "repeatInterval": route["repeat_interval"],
    }
    (hook,) = receiver["webhook_configs"]
    (ours,) = shipped["receivers"][0]["webhookConfigs"]
    assert ours["url"] == hook["url"]
    assert str(ours["sendResolved"]).lower() == str(hook["send_resolved"]).lower()
    assert str(ours["maxAlerts"]) == str(hook["max_alerts"])
    assert ours["httpConfig"]["authorization"]["type"] == "Bearer"
    assert shipped["inhibitRules"] == [
        {
            "sourceMatch": _matchers(rule["source_matchers"]),
            "targetMatch": _matchers(rule["target_matchers"]),
            **({"equal": rule["equal"]} if "equal" in rule else {}),
        }
        for rule in inhibit
    ]


def test_the_webhook_url_is_the_controllers_service_and_the_token_its_secret() -> None:
    objects = build(OVERLAYS / "standard")
    spec = one(objects, "AlertmanagerConfig", "nodesync")["spec"]
    (hook,) = spec["receivers"][0]["webhookConfigs"]
    service = one(objects, "Service", "nodesync-controller")
    meta = service["metadata"]
    port = service["spec"]["ports"][0]["port"]
    assert hook["url"] == f"http://{meta['name']}.{meta['namespace']}.svc:{port}/alerts"
    credentials = hook["httpConfig"]["authorization"]["credentials"]
    controller = one(objects, "Deployment", "nodesync-controller")
    token = next(
        e
        for e in controller["spec"]["template"]["spec"]["containers"][0]["env"]
        if e["name"] == "NODESYNC_WEBHOOK_TOKEN"
    )
    assert token["valueFrom"]["secretKeyRef"] == credentials


# ---------------------------------------------------------------- kube-prometheus' Alertmanager

ALERTMANAGER_PATCH = ROOT / "deploy" / "alertmanager" / "kube-prometheus-alertmanager-patch.yaml"


def _selects(selector: Obj, labels: dict[str, str]) -> bool:
    """A label selector (matchLabels, matchExpressions) against an object's labels."""
    if not selector:
        return True
    matched = all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())
    for expression in selector.get("matchExpressions") or []:
        value, operator = labels.get(expression["key"]), expression["operator"]
        if operator == "In":
            matched &= value in expression["values"]
        elif operator == "Exists":
            matched &= value is not None
        else:
            raise AssertionError(f"selector operator {operator} is not modelled here")
    return matched


def test_the_alertmanager_patch_selects_the_shipped_alertmanagerconfig() -> None:
    patch = load_file(ALERTMANAGER_PATCH)
    assert patch["apiVersion"] == "monitoring.coreos.com/v1"
    assert patch["kind"] == "Alertmanager"
    # kube-prometheus' Alertmanager.
    assert patch["metadata"] == {"name": "main", "namespace": "monitoring"}
    spec = patch["spec"]
    objects = build(OVERLAYS / "standard")
    config = one(objects, "AlertmanagerConfig", "nodesync")
    namespace = one(objects, "Namespace", config["metadata"]["namespace"])
    # The API server adds kubernetes.io/metadata.name to every namespace.
    namespace_labels = {
        **namespace["metadata"]["labels"],
        "kubernetes.io/metadata.name": namespace["metadata"]["name"],
    }
    assert spec["alertmanagerConfigSelector"], "an empty selector would select every config"
    assert _selects(spec["alertmanagerConfigSelector"], config["metadata"]["labels"])
    assert _selects(spec["alertmanagerConfigNamespaceSelector"], namespace_labels)
    assert not _selects(
        spec["alertmanagerConfigNamespaceSelector"], {"kubernetes.io/metadata.name": "monitoring"}
    )
    # Node alerts have no namespace label: the operator must not add a namespace matcher.
    assert spec["alertmanagerConfigMatcherStrategy"] == {"type": "None"}
    assert set(spec) == {
        "alertmanagerConfigSelector",
        "alertmanagerConfigNamespaceSelector",
        "alertmanagerConfigMatcherStrategy",
    }


def test_the_alertmanager_patch_applies_to_kube_prometheus_alertmanager(tmp_path: Path) -> None:
    # kube-prometheus' Alertmanager as it ships (the fields a merge patch must keep).
    shipped = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "Alertmanager",
        "metadata": {"name": "main", "namespace": "monitoring"},
        "spec": {
            "replicas": 3,
            "serviceAccountName": "alertmanager-main",
            "podMetadata": {"labels": {"app.kubernetes.io/name": "alertmanager"}},
        },
    }
    (tmp_path / "alertmanager.json").write_text(json.dumps(shipped), encoding="utf-8")
    (tmp_path / "patch.yaml").write_text(ALERTMANAGER_PATCH.read_text("utf-8"), "utf-8")
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "resources: [alertmanager.json]\npatches:\n  - path: patch.yaml\n",
        encoding="utf-8",
    )
    (patched,) = build(tmp_path)
    assert patched["spec"] == {**shipped["spec"], **load_file(ALERTMANAGER_PATCH)["spec"]}


def test_install_md_shows_the_alertmanager_patch() -> None:
    docs = (ROOT / "docs" / "install.md").read_text(encoding="utf-8")
    section = docs.split("\n## Alertmanager\n", 1)[1].split("\n## ", 1)[0]
    blocks = [
        loads(textwrap.dedent(block), source="docs/install.md")
        for block in re.findall(r"```yaml\n(.*?)```", section, re.S)
    ]
    assert load_file(ALERTMANAGER_PATCH) in blocks
    assert ALERTMANAGER_PATCH.relative_to(ROOT).as_posix() in section
