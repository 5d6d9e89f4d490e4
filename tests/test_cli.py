from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from exporter.agent.settings import AgentSettings
from exporter.cli import get_parser
from exporter.commandline import BooleanAction
from exporter.controller.settings import ExecutorSettings
from exporter.settings.declare import build

AGENT_FLAGS = [
    "--cri.endpoint",
    "--web.listen-address",
    "--sync.period",
    "--cri.timeout",
    "--kubelet.root-dir",
    "--containerd.root",
    "--kubelet.healthz-url",
    "--log.format",
]


def test_agent_help_lists_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        get_parser({}).parse_args(["agent", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for flag in AGENT_FLAGS:
        assert flag in out
        assert "NODESYNC_" + flag.lstrip("-").replace(".", "_").replace("-", "_").upper() in out


def test_agent_defaults() -> None:
    args = get_parser({}).parse_args(["agent"])
    settings = build(AgentSettings, args)
    assert settings == AgentSettings()
    assert settings.cri_endpoint == "unix:///run/containerd/containerd.sock"
    assert settings.sync_period == 10.0
    assert settings.cri_timeout == 2.0
    assert settings.kubelet_root_dir == "/var/lib/kubelet"
    assert settings.containerd_root == "/var/lib/containerd"
    assert settings.kubelet_healthz_url == "http://127.0.0.1:10248/healthz"
    assert args.log_format == "text"


def test_environment_is_the_default_and_flags_win() -> None:
    environ = {"NODESYNC_SYNC_PERIOD": "3s", "NODESYNC_WEB_LISTEN_ADDRESS": "127.0.0.1:1234"}
    parser = get_parser(environ)
    from_env = build(AgentSettings, parser.parse_args(["agent"]))
    assert (from_env.sync_period, from_env.listen_host, from_env.listen_port) == (
        3.0,
        "127.0.0.1",
        1234,
    )
    from_flag = build(AgentSettings, parser.parse_args(["agent", "--sync.period", "1m"]))
    assert from_flag.sync_period == 60.0


def test_bad_environment_value_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        get_parser({"NODESYNC_CRI_TIMEOUT": "soon"}).parse_args(["agent"])
    assert exc.value.code == 2
    assert "NODESYNC_CRI_TIMEOUT" in capsys.readouterr().err


def test_bad_flag_value_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        get_parser({}).parse_args(["agent", "--log.format", "xml"])
    assert "invalid choice" in capsys.readouterr().err


def every_parser(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from every_parser(sub)


def test_no_parser_accepts_abbreviations() -> None:
    parsers = list(every_parser(get_parser({})))
    assert len(parsers) > 4
    assert [p.prog for p in parsers if p.allow_abbrev] == []


@pytest.mark.parametrize("command", ["agent", "controller", "plan"])
def test_booleans_take_no_placeholder_in_usage_or_help(command: str) -> None:
    parser = next(p for p in every_parser(get_parser({})) if p.prog == f"nodesync {command}")
    text = parser.format_help()
    assert "BOOL" not in text
    booleans = [a for a in parser._actions if isinstance(a, BooleanAction)]
    assert booleans
    for action in booleans:
        flag = action.setting.flag
        assert f"[--[no-]{flag.removeprefix('--')}]" in " ".join(parser.format_usage().split())
        assert f"{flag}, --no-{flag.removeprefix('--')}" in text


@pytest.mark.parametrize(
    ("argv", "value"),
    [
        (["--rollback.dry-run"], True),
        (["--rollback.dry-run=true"], True),
        (["--rollback.dry-run=false"], False),
        (["--no-rollback.dry-run"], False),
        ([], False),
    ],
)
def test_controller_booleans_as_flags_and_values(argv: list[str], value: bool) -> None:
    args = get_parser({}).parse_args(["controller", *argv])
    assert build(ExecutorSettings, args).dry_run is value
