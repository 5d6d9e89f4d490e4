"""The controller's flags: defaults, environment, command line, and the typed settings."""

from __future__ import annotations

import argparse

import pytest

from exporter.controller.settings import ControllerSettings, add_controller_flags
from exporter.settings import FlagAdder, add_common_flags


def parse(argv: list[str], environ: dict[str, str] | None = None) -> ControllerSettings:
    parser = argparse.ArgumentParser(prog="nodesync controller", exit_on_error=False)
    add = FlagAdder(parser, environ or {})
    add_controller_flags(add)
    add_common_flags(add)
    return ControllerSettings.from_args(parser.parse_args(argv))


def test_defaults() -> None:
    assert parse([]) == ControllerSettings(
        listen_host="0.0.0.0",
        listen_port=9618,
        kubeconfig="",
        wave_label=None,
        wave_gap=120.0,
        log_format="text",
        log_level="info",
    )


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        pytest.param(
            [],
            {
                "NODESYNC_WEB_LISTEN_ADDRESS": "127.0.0.1:19618",
                "NODESYNC_KUBECONFIG": "/etc/nodesync/kubeconfig",
                "NODESYNC_WAVE_LABEL": "example.com/batch",
                "NODESYNC_WAVE_GAP": "90s",
            },
            ("127.0.0.1", 19618, "/etc/nodesync/kubeconfig", "example.com/batch", 90.0),
            id="environment",
        ),
        pytest.param(
            ["--wave-gap", "1m30s", "--wave-label", "b", "--kubeconfig", "/k"],
            {"NODESYNC_WAVE_GAP": "10m", "NODESYNC_WAVE_LABEL": "a"},
            ("0.0.0.0", 9618, "/k", "b", 90.0),
            id="flags-win-over-environment",
        ),
        pytest.param(
            ["--wave-label", ""],
            {"NODESYNC_WAVE_LABEL": "a"},
            ("0.0.0.0", 9618, "", None, 120.0),
            id="empty-wave-label-means-none",
        ),
    ],
)
def test_sources(
    argv: list[str], environ: dict[str, str], expected: tuple[str, int, str, str | None, float]
) -> None:
    s = parse(argv, environ)
    assert (s.listen_host, s.listen_port, s.kubeconfig, s.wave_label, s.wave_gap) == expected


@pytest.mark.parametrize(
    "argv", [["--wave-gap", "0s"], ["--wave-gap", "soon"], ["--web.listen-address", "9618"]]
)
def test_bad_values_are_rejected(argv: list[str]) -> None:
    with pytest.raises(argparse.ArgumentError):
        parse(argv)


def test_bad_environment_stops_with_the_variable_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse([], {"NODESYNC_WAVE_GAP": "-1m"})
    assert "NODESYNC_WAVE_GAP" in capsys.readouterr().err


def test_log_fields() -> None:
    assert parse(["--wave-label", "x"]).as_log_fields()["wave_label"] == "x"
