"""Scenario files: the shipped ones parse, defaults are Kubernetes' own, and a bad file is an
error naming the file and the key's JSON path."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, get_args

import pytest

from exporter.model.outcomes import OUTCOMES
from nodesync_sim.fake.scaleout.scenario import (
    CRASH_LOOP,
    LEASE_STOPS,
    EpisodeOutcome,
    ScenarioError,
    Timing,
)
from nodesync_sim.fake.scaleout.scenario_file import load, loads, parse

SCENARIOS = sorted((Path(__file__).resolve().parents[4] / "scenarios").glob("*.json"))

GOOD: dict[str, Any] = {
    "name": "good",
    "old_nodes": {"count": 2, "pods_per_node": 1},
    "waves": [
        {
            "name": "w",
            "count": 3,
            "pods_per_node": 2,
            "faults": [
                {"kind": "crash_loop", "nodes": ["w-001"], "at_seconds": 1, "pods": 2},
                {"kind": "lease_stops", "share": 0.5, "at_seconds": 5, "for_seconds": 10},
            ],
        }
    ],
    "real_node": {"name": "real", "wave": "w", "faults": [{"kind": "cri_timeouts"}]},
    "rules": {"thresholds": {"crash_loop_restarts_threshold": 2}, "for": "3s"},
    "alertmanager": {"group_wait": "500ms"},
    "controller": {"delete_nodes": "true", "max_rollbacks": 3, "scaleout_window": "10m"},
}


def test_the_shipped_scenarios_parse() -> None:
    assert len(SCENARIOS) >= 3
    for path in SCENARIOS:
        assert load(path).name == path.stem


def test_an_expected_episode_outcome_is_one_nodesync_counts() -> None:
    assert get_args(EpisodeOutcome) == OUTCOMES
    scenario = parse({**GOOD, "expect": {"episodes": {"A": {"dry_run_cleared": 2}}}})
    assert scenario.expect is not None
    assert scenario.expect.episodes == {"A": {"dry_run_cleared": 2}}


def test_a_good_scenario_reads_as_written() -> None:
    scenario = parse(GOOD)
    assert scenario.timing == Timing()
    assert scenario.old_nodes.node_names() == ["old-000", "old-001"]
    [wave] = scenario.waves
    assert wave.node_names() == ["w-000", "w-001", "w-002"]
    crash, lease = wave.faults
    assert (crash.kind, crash.nodes, crash.at_seconds, crash.pods) == (CRASH_LOOP, ("w-001",), 1, 2)
    assert (lease.kind, lease.share, lease.for_seconds) == (LEASE_STOPS, 0.5, 10)
    assert scenario.real_node is not None
    assert scenario.real_node.faults[0].kind == "cri_timeouts"
    assert scenario.rules.thresholds == {"crash_loop_restarts_threshold": 2.0}
    assert scenario.rules.for_all == 3.0
    assert scenario.alertmanager.group_wait == 0.5
    assert scenario.alertmanager.replicas == 1
    assert parse(_with("alertmanager.replicas", 2)).alertmanager.replicas == 2
    assert scenario.controller == {
        "delete_nodes": True,
        "max_rollbacks": 3,
        "scaleout_window": 600.0,
    }


def _with(path: str, value: Any) -> dict[str, Any]:
    """GOOD with the value at ``path`` (dots and [index]) replaced; ``...`` deletes it."""
    document = copy.deepcopy(GOOD)
    keys: list[str | int] = []
    for part in path.replace("]", "").replace("[", ".").split("."):
        keys.append(int(part) if part.isdigit() else part)
    target: Any = document
    for key in keys[:-1]:
        target = target[key]
    if value is ...:
        del target[keys[-1]]
    else:
        target[keys[-1]] = value
    return document


BAD: list[tuple[str, dict[str, Any], str]] = [
    (
        "a typo in a key",
        _with("waves[0].cuont", 3),
        "$.waves[0]: object contains unknown field `cuont`",
    ),
    ("a missing name", _with("name", ...), "$.name: missing"),
    (
        "a count as text",
        _with("waves[0].count", "3"),
        "$.waves[0].count: expected `int`, got `str`",
    ),
    ("a negative count", _with("waves[0].count", -1), "$.waves[0].count: expected `int` >= 0"),
    (
        "a fault nobody knows",
        _with("waves[0].faults[0].kind", "meltdown"),
        "$.waves[0].faults[0].kind: invalid enum value 'meltdown'",
    ),
    (
        "a share above 1",
        _with("waves[0].faults[1].share", 1.5),
        "$.waves[0].faults[1].share: expected `float` <= 1.0",
    ),
    (
        "a share of zero",
        _with("waves[0].faults[1].share", 0),
        "$.waves[0].faults[1].share: expected `float` > 0.0",
    ),
    (
        "a fault on a node that is not there",
        _with("waves[0].faults[0].nodes", ["w-009"]),
        "$.waves[0].faults[0].nodes[0]: no node 'w-009' in this group",
    ),
    (
        "share and nodes together",
        _with("waves[0].faults[0].share", 0.5),
        "$.waves[0].faults[0]: give exactly one of 'share'",
    ),
    (
        "a pod fault on the real node",
        _with("real_node.faults", [{"kind": "crash_loop"}]),
        "$.real_node.faults[0].kind: crash_loop is for simulated nodes only",
    ),
    (
        "a target on the real node's fault",
        _with("real_node.faults", [{"kind": "lease_stops", "share": 1}]),
        "$.real_node.faults[0]: the real node's faults apply to it",
    ),
    (
        "the real node in no wave",
        _with("real_node.wave", "nope"),
        "$.real_node.wave: no wave named 'nope'",
    ),
    (
        "more looping pods than pods",
        _with("waves[0].faults[0].pods", 3),
        "$.waves[0].faults[0].pods: only 2 app pods per node",
    ),
    (
        "a loop without pods",
        _with("waves[0].pods_per_node", 0),
        "$.waves[0].faults[0]: crash_loop needs pods",
    ),
    (
        "a grace period shorter than a renewal",
        _with("timing", {"lease_renew_seconds": 10, "node_monitor_grace_seconds": 5}),
        "$.timing: node_monitor_grace_seconds (5) must exceed lease_renew_seconds (10)",
    ),
    ("a bad duration", _with("rules.for", "soon"), "$.rules.for: invalid duration 'soon'"),
    (
        "a prefixed threshold",
        _with("rules.thresholds", {"nodesync:scaleout_window_seconds": 60}),
        "$.rules: 'nodesync:scaleout_window_seconds': name the constant without the 'nodesync:'",
    ),
    (
        "a bad controller value",
        _with("controller.max_rollback_fraction", 2),
        "$.controller.max_rollback_fraction: invalid fraction '2'",
    ),
    (
        "an unknown controller setting",
        _with("controller.dryrun", True),
        "$.controller: object contains unknown field `dryrun`",
    ),
    (
        "two nodes of one name",
        _with("old_nodes.prefix", "w"),
        "$: node name 'w-000' is used twice",
    ),
    ("no nodes at all", {"name": "empty"}, "$: no nodes"),
    (
        "three Alertmanagers",
        _with("alertmanager.replicas", 3),
        "$.alertmanager.replicas: invalid enum value 3",
    ),
    (
        "no Alertmanager",
        _with("alertmanager.replicas", 0),
        "$.alertmanager.replicas: invalid enum value 0",
    ),
    (
        "replicas as text",
        _with("alertmanager.replicas", "2"),
        "$.alertmanager.replicas: expected `int`, got `str`",
    ),
    (
        "a taint on a fault that puts none",
        _with("waves[0].faults[1].taint", "readiness.k8s.io/NetworkReady"),
        "$.waves[0].faults[1].taint: only a readiness_taint fault puts a taint on its node",
    ),
    (
        "a taint key that is not one",
        _with("waves[0].faults[1]", {"kind": "readiness_taint", "share": 1, "taint": "a b"}),
        "$.waves[0].faults[1].taint: expected `str` matching regex",
    ),
    (
        "a first step due before it may come",
        _with("expect", {"within_seconds": 10, "not_before_seconds": 20}),
        "$.expect.not_before_seconds: 20 is after within_seconds (10)",
    ),
    (
        "an episode outcome nodesync does not count",
        _with("expect", {"episodes": {"NodesyncNewNodeNotReady": {"ignored": 1}}}),
        "$.expect.episodes[...]: a key: invalid enum value 'ignored'",
    ),
    (
        "a negative count of episodes",
        _with("expect", {"episodes": {"NodesyncNewNodeNotReady": {"held": -1}}}),
        "$.expect.episodes[...][...]: expected `int` >= 0",
    ),
    (
        "a wave name with capitals",
        _with("waves[0].name", "Wave"),
        "$.waves[0].name: expected `str` matching regex",
    ),
]


@pytest.mark.parametrize(
    ("document", "message"), [(d, m) for _, d, m in BAD], ids=[b[0] for b in BAD]
)
def test_a_bad_scenario_names_the_file_and_the_key(document: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse(document, "scenarios/bad.json")
    assert str(caught.value).startswith(f"scenarios/bad.json: {message}")


def test_a_file_that_is_not_json_or_not_there(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"x\.json: not JSON"):
        loads("{name: 1", "x.json")
    with pytest.raises(ScenarioError, match="cannot read"):
        load(tmp_path / "missing.json")
    path = tmp_path / "top.json"
    path.write_text(json.dumps([GOOD]))
    with pytest.raises(ScenarioError, match=r"top\.json: \$: expected `object`, got `array`"):
        load(path)
