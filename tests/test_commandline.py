"""The command line derived from the declarations: environment defaults, flags over the
environment, booleans, deprecated names, no abbreviations, and one-line errors."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import pytest

from exporter.cli import get_parser
from exporter.commandline import add_settings, deprecations, parse_settings
from exporter.configuration_docs import commands
from exporter.settings.declare import Setting, setting
from exporter.settings.values import BOOLEAN, POSITIVE_DURATION


@dataclass(frozen=True, slots=True)
class Example:
    period: float = setting(
        "--sync.period", "10s", "a period", POSITIVE_DURATION, aliases=("--sync-period",)
    )
    dry_run: bool = setting("--dry-run", "false", "a switch", BOOLEAN)


def parse(argv: list[str], environ: dict[str, str] | None = None) -> Example:
    return parse_settings(Example, argv, environ or {})


def test_defaults_environment_and_flags() -> None:
    assert parse([]) == Example(period=10.0, dry_run=False)
    assert parse([], {"NODESYNC_SYNC_PERIOD": "1m"}).period == 60.0
    assert parse(["--sync.period", "2s"], {"NODESYNC_SYNC_PERIOD": "1m"}).period == 2.0


@pytest.mark.parametrize(
    ("argv", "environ", "value"),
    [
        ([], {}, False),
        (["--dry-run"], {}, True),
        (["--dry-run=true"], {}, True),
        (["--dry-run", "false"], {}, False),
        (["--dry-run=no"], {}, False),
        (["--no-dry-run"], {"NODESYNC_DRY_RUN": "true"}, False),
        ([], {"NODESYNC_DRY_RUN": "yes"}, True),
        (["--dry-run"], {"NODESYNC_DRY_RUN": "false"}, True),
    ],
)
def test_booleans(argv: list[str], environ: dict[str, str], value: bool) -> None:
    assert parse(argv, environ).dry_run is value


def test_no_flag_takes_no_value(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(["--no-dry-run=true"])
    assert exc.value.code == 2
    assert "--no-dry-run takes no value" in capsys.readouterr().err


def test_a_former_name_works_and_is_reported_deprecated() -> None:
    parser = argparse.ArgumentParser()
    add_settings(parser, {}, [Example])
    args = parser.parse_args(["--sync-period", "3s"])
    assert args.sync_period == 3.0
    assert deprecations(args) == ["--sync-period is deprecated: use --sync.period"]
    assert deprecations(parser.parse_args(["--sync.period", "3s"])) == []


def test_abbreviations_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse(["--sync.per", "3s"])
    assert "unrecognized arguments: --sync.per" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        get_parser({}).parse_args(["agent", "--web.listen-addres", ":1"])


@pytest.mark.parametrize(
    ("argv", "environ", "named"),
    [
        (["--sync.period", "soon"], {}, "--sync.period"),
        ([], {"NODESYNC_SYNC_PERIOD": "0s"}, "NODESYNC_SYNC_PERIOD"),
        ([], {"NODESYNC_DRY_RUN": "sometimes"}, "NODESYNC_DRY_RUN"),
    ],
)
def test_a_malformed_value_is_one_line_naming_the_flag_or_variable(
    argv: list[str], environ: dict[str, str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(argv, environ)
    assert exc.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert named in error
    assert "Traceback" not in error


def test_two_declarations_of_one_flag_are_a_bug() -> None:
    @dataclass(frozen=True)
    class Other:
        dry_run: bool = Setting("--dry-run", "true", "again", BOOLEAN).field()

    with pytest.raises(ValueError, match="--dry-run is declared twice"):
        add_settings(argparse.ArgumentParser(), {}, [Example, Other])


def test_a_boolean_shows_no_placeholder_in_help() -> None:
    parser = argparse.ArgumentParser(prog="x")
    add_settings(parser, {}, [Example])
    from exporter.commandline import HelpFormatter

    parser.formatter_class = HelpFormatter
    text = parser.format_help()
    assert "--dry-run, --no-dry-run" in text
    assert "--sync.period DURATION" in text
    assert "--sync-period" not in text  # a former name works, and is not offered


@pytest.mark.parametrize("command", sorted(name for name, _ in commands(get_parser({}))))
def test_every_command_has_version_and_logging_flags(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = command.split()[1:]
    with pytest.raises(SystemExit) as exc:
        get_parser({}).parse_args([*argv, "--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith("nodesync ")
    args = get_parser({}).parse_args(argv)
    assert (args.log_format, args.log_level) == ("text", "info")
