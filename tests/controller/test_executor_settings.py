"""The rollback hook's flags: defaults, environment, malformed values, and the guard policy."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from exporter.commandline import parse_settings
from exporter.controller.settings import ExecutorSettings
from exporter.model.drain import DrainPolicy
from exporter.model.guards import GuardPolicy
from exporter.settings.policy import default_policy


def parse(argv: list[str], environ: Mapping[str, str] | None = None) -> ExecutorSettings:
    return parse_settings(ExecutorSettings, argv, environ or {})


def test_defaults() -> None:
    settings = parse([])
    assert settings == ExecutorSettings()
    assert settings.policy == default_policy()
    assert (settings.dry_run, settings.policy.delete_nodes, settings.leader_elect) == (False,) * 3
    assert (settings.api_qps, settings.api_burst) == (5.0, 10)
    assert (settings.eviction_timeout, settings.cleanup_ack_timeout, settings.cleanup_timeout) == (
        1800.0,
        60.0,
        300.0,
    )
    assert settings.rollback_retention == 7 * 86_400.0
    assert (
        settings.leader_elect_lease_duration,
        settings.leader_elect_renew_deadline,
        settings.leader_elect_retry_period,
    ) == (15.0, 10.0, 2.0)
    assert settings.leader_identity  # hostname and pid when not set


def test_flags_and_environment() -> None:
    environ = {
        "NODESYNC_ROLLBACK_DRY_RUN": "true",
        "NODESYNC_GUARD_MAX_ROLLBACK_FRACTION": "0.25",
        "NODESYNC_LEADER_ELECTION_IDENTITY": "pod-a",
    }
    argv = [
        "--rollback.delete-nodes=yes",
        "--guard.scaleout-window=45m",
        "--guard.max-rollbacks=4",
        "--guard.max-rollbacks-window=2h",
        "--guard.correlated-failure-fraction=0.5",
        "--guard.correlated-failure-min-nodes=3",
        "--guard.node-monitor-grace-period=40s",
        "--guard.max-concurrent-rollbacks=1",
        "--apiserver.qps=2.5",
        "--apiserver.burst=4",
        "--drain.eviction-timeout=30s",
        "--cleanup.timeout=1m",
        "--leader-election.enabled=true",
        "--leader-election.namespace=ops",
        "--leader-election.name=hook",
        "--guard.max-rollback-fraction=0.2",  # the flag wins over the environment
    ]
    settings = parse(argv, environ)
    assert settings.dry_run is True
    assert settings.policy == GuardPolicy(
        delete_nodes=True,
        scaleout_window=2700.0,
        max_rollbacks=4,
        max_rollbacks_window=7200.0,
        max_rollback_fraction=0.2,
        correlated_failure_fraction=0.5,
        correlated_failure_min_nodes=3,
        node_monitor_grace_period=40.0,
        max_concurrent_rollbacks=1,
        drain=DrainPolicy(force=True, delete_emptydir_data=True),
    )
    assert (settings.api_qps, settings.api_burst) == (2.5, 4)
    assert (settings.eviction_timeout, settings.cleanup_timeout) == (30.0, 60.0)
    assert settings.leader_elect is True
    assert (settings.leader_elect_namespace, settings.leader_elect_name) == ("ops", "hook")
    assert settings.leader_identity == "pod-a"


@pytest.mark.parametrize(
    "argv",
    [
        ["--guard.max-rollback-fraction=1.5"],
        ["--guard.correlated-failure-fraction=-0.1"],
        ["--guard.max-rollbacks=-1"],
        ["--guard.max-concurrent-rollbacks=0"],
        ["--apiserver.qps=0"],
        ["--apiserver.qps=inf"],
        ["--apiserver.burst=0"],
        ["--rollback.dry-run=maybe"],
        ["--cleanup.timeout=0s"],
    ],
)
def test_malformed_values_stop_at_start(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse(argv)
    assert argv[0].split("=")[0] in capsys.readouterr().err


def test_a_malformed_environment_value_names_the_variable(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        parse([], {"NODESYNC_ROLLBACK_DELETE_NODES": "sometimes"})
    assert "NODESYNC_ROLLBACK_DELETE_NODES" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--leader-election.retry-period", "12s"], "--leader-election.retry-period"),
        (["--leader-election.lease-duration", "5s"], "--leader-election.lease-duration"),
        (["--rollback.retention", "30m"], "--rollback.retention"),
    ],
)
def test_settings_that_contradict_each_other_are_refused_naming_the_flags(
    argv: list[str], flag: str
) -> None:
    with pytest.raises(ValueError, match=flag):
        parse(argv)
