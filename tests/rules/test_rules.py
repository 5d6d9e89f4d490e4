"""The Prometheus rules: promtool accepts every rule file and passes every rule test file, and
the rules keep the contract the rollback hook and the runbooks rely on."""

from __future__ import annotations

import json
import re
import tomllib
from collections import defaultdict
from pathlib import Path

import pytest

from tests.deploy.prometheusrule import RUNBOOK_BASE_URL
from tests.rules.rulefiles import (
    ACTIONS,
    ROOT,
    RULES_DIR,
    RULES_DOC,
    RUNBOOKS,
    SEVERITIES,
    TESTS_DIR,
    THRESHOLDS,
    Rule,
    alerts,
    all_rules,
    binary,
    explain,
    groups,
    load,
    rule_files,
    rules,
    run,
    unit_test_files,
)
from tests.support.docs import markdown_anchors, markdown_table, section

RULE_FILES = rule_files()
UNIT_TEST_FILES = unit_test_files()

# Labels the hook needs to find what to act on, per action.
IDENTIFYING_LABELS = {
    "rollback_node": {"node"},
    "evict_pod": {"node", "namespace", "pod"},
    "cleanup_orphans": {"node"},
    "none": set(),
}


def test_every_rule_file_has_a_unit_test_file() -> None:
    # Also keeps the parametrized tests below from passing vacuously on an empty glob.
    names = {path.stem for path in RULE_FILES}
    assert {"thresholds", "nodes", "pods", "runtime", "drift", "host", "controller"} <= names
    assert {path.name for path in UNIT_TEST_FILES} == {f"{name}_test.yml" for name in names}


@pytest.mark.prometheus
@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_promtool_accepts_the_rule_file(path: Path) -> None:
    result = run([binary("promtool"), "check", "rules", str(path)])
    assert result.returncode == 0, explain(result)
    # promtool counts the rules it loaded: the structural checks below must see the same ones.
    found = re.search(r"SUCCESS: (\d+) rules found", result.stdout)
    assert found, explain(result)
    assert int(found.group(1)) == len(rules(path))


@pytest.mark.prometheus
@pytest.mark.parametrize("path", UNIT_TEST_FILES, ids=lambda p: p.name)
def test_promtool_unit_tests_pass(path: Path) -> None:
    result = run([binary("promtool"), "test", "rules", str(path)])
    assert result.returncode == 0, explain(result)


@pytest.mark.prometheus
def test_the_structural_reader_reads_what_promtool_reads(tmp_path: Path) -> None:
    """Every rule and test file, read by nodesync_sim.yamlfile and written back as JSON (which
    is YAML), passes promtool exactly like the original: the reader drops or changes nothing
    that matters."""
    promtool = binary("promtool")
    (tmp_path / "rules").mkdir()
    tests_dir = tmp_path / TESTS_DIR.relative_to(RULES_DIR.parent)
    tests_dir.mkdir(parents=True)
    for path in RULE_FILES:
        (tmp_path / "rules" / path.name).write_text(json.dumps(load(path)))
    for path in UNIT_TEST_FILES:
        (tests_dir / path.name).write_text(json.dumps(load(path)))
    for path in RULE_FILES:
        copy = run([promtool, "check", "rules", str(tmp_path / "rules" / path.name)])
        original = run([promtool, "check", "rules", str(path)])
        assert copy.returncode == 0, explain(copy)
        assert copy.stdout.replace(str(tmp_path / "rules"), str(RULES_DIR)) == original.stdout
    for path in UNIT_TEST_FILES:
        copy = run([promtool, "test", "rules", str(tests_dir / path.name)])
        assert copy.returncode == 0, explain(copy)


def test_rule_and_group_names_are_unique() -> None:
    group_names = [group["name"] for path in RULE_FILES for group in groups(path)]
    assert len(group_names) == len(set(group_names))
    names = [rule.name for rule in all_rules()]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    assert duplicates == []


def test_recording_rules_follow_the_naming_convention() -> None:
    # level:metric:operations; the threshold constants are nodesync:<name>.
    for rule in all_rules():
        if rule.is_alert:
            continue
        pattern = (
            r"nodesync:[a-z0-9_]+"
            if rule.file == THRESHOLDS
            else r"[a-z_]+:nodesync_[a-z0-9_]+:[a-z0-9_]+"
        )
        assert re.fullmatch(pattern, rule.name), rule.name


@pytest.mark.parametrize("rule", alerts(), ids=lambda a: a.name)
def test_alert_carries_what_the_hook_and_the_on_call_need(rule: Rule) -> None:
    assert rule.name.startswith("Nodesync")
    labels = rule.data.get("labels") or {}
    annotations = rule.data.get("annotations") or {}
    assert labels.get("severity") in SEVERITIES, rule.name
    assert labels.get("nodesync_action") in ACTIONS, rule.name
    for key in ("summary", "description", "runbook_url"):
        assert str(annotations.get(key, "")).strip(), f"{rule.name}: no {key}"
    # Absolute: Alertmanager's and Grafana's links work from anywhere. The generator swaps the
    # base for --runbook-base-url (tests/deploy/test_monitoring.py).
    assert annotations["runbook_url"] == f"{RUNBOOK_BASE_URL}#{rule.name.lower()}"
    assert RUNBOOK_BASE_URL.endswith("/" + RUNBOOKS.relative_to(ROOT).as_posix())
    assert rule.name.lower() in markdown_anchors(RUNBOOKS.read_text(encoding="utf-8"))


def test_the_runbook_base_is_the_projects_repository() -> None:
    with (ROOT / "pyproject.toml").open("rb") as file:
        urls = tomllib.load(file)["project"]["urls"]
    assert RUNBOOK_BASE_URL.startswith(urls["Repository"] + "/blob/")


def test_only_what_needs_a_person_is_critical() -> None:
    """kube-prometheus' Alertmanager pages for severity=critical: an alert nodesync remediates
    by itself (an action other than none) must not be critical unless docs/rules.md says why."""
    rows = {
        row["Severity"]: row
        for row in markdown_table(
            section(RULES_DOC.read_text(encoding="utf-8"), "Severities"), "Severity"
        )
    }
    assert set(rows) == set(SEVERITIES)
    listed = {
        severity: set(re.findall(r"`?(Nodesync\w+)`?", row["Alerts"]))
        for severity, row in rows.items()
    }
    critical = {r.name for r in alerts() if r.data["labels"]["severity"] == "critical"}
    # The critical row names exactly the critical alerts, each with its reason.
    assert listed["critical"] == critical
    assert critical == set() or rows["critical"]["Why"].strip()
    remediated = {r.name for r in alerts() if r.data["labels"]["nodesync_action"] != "none"}
    assert (remediated & critical) <= listed["critical"]
    # An action alert is never info: kube-prometheus' InfoInhibitor would inhibit it, and an
    # inhibited alert reaches no receiver, nodesync's webhook included.
    assert all(r.data["labels"]["severity"] != "info" for r in alerts())


def test_runbooks_have_one_complete_section_per_alert() -> None:
    text = RUNBOOKS.read_text(encoding="utf-8")
    sections = dict(re.findall(r"^## (Nodesync\S+)\s*\n(.*?)(?=^## |\Z)", text, re.M | re.S))
    assert sorted(sections) == sorted(rule.name for rule in alerts())
    for name, body in sections.items():
        for part in ("**Meaning.**", "**Confirm.**", "**What nodesync does.**", "**Undo.**"):
            assert part in body, f"{name}: no {part}"
        assert "```promql" in body, f"{name}: no PromQL to confirm it"


def _cases() -> dict[str, dict[str, list[str]]]:
    """alertname -> {"firing": [...], "silent": [...]} descriptions of every alert_rule_test."""
    cases: dict[str, dict[str, list[str]]] = defaultdict(lambda: {"firing": [], "silent": []})
    for path in UNIT_TEST_FILES:
        for index, test in enumerate(load(path)["tests"]):
            for case in test.get("alert_rule_test") or []:
                kind = "firing" if case.get("exp_alerts") else "silent"
                where = f"{path.name} test {index + 1} at {case['eval_time']}"
                cases[case["alertname"]][kind].append(where)
    return cases


@pytest.mark.parametrize("alert", alerts(), ids=lambda a: a.name)
def test_alert_is_tested_firing_and_silent(alert: Rule) -> None:
    cases = _cases()
    name = alert.name
    assert cases[name]["firing"], f"{name}: no test case where it fires"
    assert cases[name]["silent"], f"{name}: no test case where it stays silent"


def test_unit_tests_name_only_existing_alerts() -> None:
    assert set(_cases()) <= {rule.name for rule in alerts()}


def test_expected_alerts_carry_labels_the_hook_needs() -> None:
    actions = {rule.name: rule.data["labels"]["nodesync_action"] for rule in alerts()}
    for path in UNIT_TEST_FILES:
        for test in load(path)["tests"]:
            for case in test.get("alert_rule_test") or []:
                for expected in case.get("exp_alerts") or []:
                    labels = expected["exp_labels"]
                    action = actions[case["alertname"]]
                    assert labels["nodesync_action"] == action
                    missing = IDENTIFYING_LABELS[action] - set(labels)
                    assert not missing, f"{path.name} {case['alertname']}: {missing}"


@pytest.mark.parametrize("path", UNIT_TEST_FILES, ids=lambda p: p.name)
def test_unit_test_file_orders_every_group_and_describes_every_timeline(path: Path) -> None:
    data = load(path)
    loaded = [(path.parent / name).resolve() for name in data["rule_files"]]
    assert all(file.parent == RULES_DIR for file in loaded), data["rule_files"]
    names = [group["name"] for file in loaded for group in groups(file)]
    # Recording groups before alerting groups, thresholds first: as the rules are meant to run.
    assert sorted(data["group_eval_order"]) == sorted(names)
    order = data["group_eval_order"]
    recording = [name for name in order if name.endswith(".rules") or name.endswith("thresholds")]
    assert order[: len(recording)] == recording
    lines = path.read_text(encoding="utf-8").splitlines()
    starts = [i for i, line in enumerate(lines) if re.match(r"^  - interval:", line)]
    assert len(starts) == len(data["tests"])
    for start in starts:
        assert lines[start - 1].lstrip().startswith("#"), f"{path.name}:{start + 1}: no comment"


def _threshold_values() -> dict[str, str]:
    values: dict[str, str] = {}
    for rule in rules(THRESHOLDS):
        assert not rule.is_alert
        assert rule.name.startswith("nodesync:"), rule.name
        constant = re.fullmatch(r"vector\(([0-9.]+)\)", rule.expr.strip())
        assert constant, f"{rule.name}: {rule.expr!r} is not a constant"
        values[rule.name] = constant.group(1)
    return values


def test_thresholds_live_in_one_file() -> None:
    defined = _threshold_values()
    used: set[str] = set()
    for path in RULE_FILES:
        if path == THRESHOLDS:
            continue
        for rule in rules(path):
            used |= set(re.findall(r"\bnodesync:[a-z0-9_]+", rule.expr))
            # Comparisons with numbers are state checks (== 0, == 1, > 0), never thresholds.
            for number in re.findall(r"(?:[<>]=?|==|!=)\s*(?:bool\s+)?(-?[0-9.]+)", rule.expr):
                assert number in ("0", "1"), f"{rule.name}: literal threshold {number}"
    assert used == set(defined)


def test_rules_doc_lists_every_alert_and_threshold_as_the_rules_have_them() -> None:
    text = RULES_DOC.read_text(encoding="utf-8")
    documented = {row["Alert"]: row for row in markdown_table(text, "Alert")}
    assert set(documented) == {rule.name for rule in alerts()}
    for rule in alerts():
        row = documented[rule.name]
        assert row["Action"] == rule.data["labels"]["nodesync_action"], rule.name
        assert row["Severity"] == rule.data["labels"]["severity"], rule.name
        assert row["for"] == rule.data.get("for", "0s"), rule.name
        assert row["keep_firing_for"] == rule.data.get("keep_firing_for", "0s"), rule.name
    thresholds = {row["Constant"]: row["Value"] for row in markdown_table(text, "Constant")}
    assert thresholds == _threshold_values()
