"""Copies of the shipped rules and Alertmanager configuration with a scenario's overrides: the
real tools accept them, exactly the named values change, and a name that does not exist fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodesync_sim.fake.scaleout.overrides import (
    OverrideError,
    alertmanager_config,
    prometheus_duration,
    rewrite_rules,
)
from nodesync_sim.fake.scaleout.scenario import AlertmanagerSpec, RuleOverrides
from nodesync_sim.yamlfile import loads
from tests.rules.rulefiles import ALERTMANAGER_CONFIG, binary, explain, rule_files, run

pytestmark = pytest.mark.prometheus


def _rules(paths: list[Path]) -> dict[str, dict[str, object]]:
    found = {}
    for path in paths:
        for group in json.loads(path.read_text())["groups"]:
            for rule in group["rules"]:
                found[str(rule.get("alert") or rule.get("record"))] = rule
    return found


def test_rule_overrides_change_only_what_they_name(tmp_path: Path) -> None:
    shipped_files = rule_files()
    before = {p.read_text() for p in shipped_files}
    overrides = RuleOverrides(
        thresholds={"node_not_ready_threshold_seconds": 2, "crash_loop_restarts_threshold": 5},
        for_all=3.0,
        for_alert={"NodesyncNewNodeCRITimeouts": 20.0},
        keep_firing_for_all=1.5,
    )
    written = rewrite_rules(shipped_files, overrides, tmp_path)
    assert [p.name for p in written] == [p.name for p in shipped_files]
    assert {p.read_text() for p in shipped_files} == before  # never edits the shipped files
    result = run([binary("promtool"), "check", "rules", *map(str, written)])
    assert result.returncode == 0, explain(result)

    shipped: dict[str, dict[str, object]] = {}
    for path in shipped_files:
        for group in loads(path.read_text())["groups"]:
            for rule in group["rules"]:
                shipped[str(rule.get("alert") or rule.get("record"))] = rule
    changed = _rules(written)
    assert set(changed) == set(shipped)
    assert changed["nodesync:node_not_ready_threshold_seconds"]["expr"] == "vector(2.0)"
    assert changed["nodesync:crash_loop_restarts_threshold"]["expr"] == "vector(5.0)"
    assert (
        changed["nodesync:scaleout_window_seconds"] == shipped["nodesync:scaleout_window_seconds"]
    )
    assert changed["NodesyncNewNodeNotReady"]["for"] == "3s"
    assert changed["NodesyncNewNodeCRITimeouts"]["for"] == "20s"
    assert changed["NodesyncNewNodeNotReady"]["keep_firing_for"] == "1500ms"
    # A value for all alerts sets keep_firing_for only where the shipped rule has one.
    has_keep = {n for n, r in shipped.items() if "keep_firing_for" in r}
    assert {n for n, r in changed.items() if "keep_firing_for" in r} == has_keep
    for name, rule in shipped.items():
        other = {k: v for k, v in changed[name].items() if k not in ("for", "keep_firing_for")}
        if not name.startswith("nodesync:"):
            assert other == {k: v for k, v in rule.items() if k not in ("for", "keep_firing_for")}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (RuleOverrides(thresholds={"no_such_threshold": 1}), "no constant nodesync:no_such"),
        (RuleOverrides(for_alert={"NodesyncNoSuchAlert": 1.0}), "rules.for.NodesyncNoSuchAlert"),
        (RuleOverrides(keep_firing_for_alert={"Nope": 1.0}), "rules.keep_firing_for.Nope"),
    ],
)
def test_an_override_of_nothing_is_an_error(
    tmp_path: Path, overrides: RuleOverrides, message: str
) -> None:
    with pytest.raises(OverrideError, match=message):
        rewrite_rules(rule_files(), overrides, tmp_path)


def test_the_alertmanager_copy_delivers_to_the_hook_with_its_timers(tmp_path: Path) -> None:
    token = tmp_path / "token"
    text = alertmanager_config(
        ALERTMANAGER_CONFIG,
        AlertmanagerSpec(group_wait=0.5, group_interval=1.0, repeat_interval=None),
        hook_url="http://127.0.0.1:1234/alerts",
        token_file=token,
    )
    path = tmp_path / "alertmanager.yml"
    path.write_text(text)
    result = run([binary("amtool"), "check-config", str(path)])
    assert result.returncode == 0, explain(result)
    document = json.loads(text)
    shipped = loads(ALERTMANAGER_CONFIG.read_text())
    [hook] = [r for r in document["receivers"] if r["name"] == "nodesync-hook"]
    [webhook] = hook["webhook_configs"]
    assert webhook["url"] == "http://127.0.0.1:1234/alerts"
    assert webhook["http_config"]["authorization"] == {
        "type": "Bearer",
        "credentials_file": str(token),
    }
    route = document["route"]["routes"][0]
    assert (route["group_wait"], route["group_interval"]) == ("500ms", "1s")
    assert route["repeat_interval"] == shipped["route"]["routes"][0]["repeat_interval"]
    assert document["inhibit_rules"] == shipped["inhibit_rules"]
    assert route["matchers"] == shipped["route"]["routes"][0]["matchers"]


def test_an_alertmanager_file_without_the_hook_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "am.yml"
    path.write_text("route:\n  receiver: default\nreceivers:\n  - name: default\n")
    with pytest.raises(OverrideError, match="no receiver nodesync-hook"):
        alertmanager_config(path, AlertmanagerSpec(), hook_url="http://x/alerts", token_file=path)


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (3, "3s"), (0.5, "500ms"), (90, "90s")])
def test_durations_are_written_as_prometheus_reads_them(seconds: float, text: str) -> None:
    assert prometheus_duration(seconds) == text


def test_a_folded_annotation_in_a_rule_file_is_read_and_kept(tmp_path: Path) -> None:
    """Any YAML a rule file may hold is read: here a folded block (``>``) annotation."""
    source = tmp_path / "shipped" / "folded.yml"
    source.parent.mkdir()
    source.write_text(
        "groups:\n"
        "  - name: folded\n"
        "    rules:\n"
        "      - alert: Folded\n"
        "        expr: vector(1)\n"
        "        for: 10m\n"
        "        annotations:\n"
        "          summary: >\n"
        "            a long summary\n"
        "            over two lines\n"
    )
    (written,) = rewrite_rules([source], RuleOverrides(for_all=2.0), tmp_path / "out")
    rule = _rules([written])["Folded"]
    assert rule["annotations"] == {"summary": "a long summary over two lines\n"}
    assert rule["for"] == "2s"
    result = run([binary("promtool"), "check", "rules", str(written)])
    assert result.returncode == 0, explain(result)
