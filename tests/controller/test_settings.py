"""The controller's flags: defaults, environment, command line, and the typed settings."""

from __future__ import annotations

import pytest

from exporter.commandline import parse_settings
from exporter.controller.settings import ControllerSettings
from exporter.settings.declare import log_fields


def parse(argv: list[str], environ: dict[str, str] | None = None) -> ControllerSettings:
    return parse_settings(ControllerSettings, argv, environ or {}, prog="nodesync controller")


def test_defaults() -> None:
    assert parse([]) == ControllerSettings(
        listen=("0.0.0.0", 9618),
        kubeconfig="",
        wave_label="",
        wave_gap=120.0,
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
            ["--wave.gap", "1m30s", "--wave.label", "b", "--kubeconfig", "/k"],
            {"NODESYNC_WAVE_GAP": "10m", "NODESYNC_WAVE_LABEL": "a"},
            ("0.0.0.0", 9618, "/k", "b", 90.0),
            id="flags-win-over-environment",
        ),
        pytest.param(
            ["--wave.label", ""],
            {"NODESYNC_WAVE_LABEL": "a"},
            ("0.0.0.0", 9618, "", "", 120.0),
            id="empty-wave-label-means-by-creation-time",
        ),
    ],
)
def test_sources(
    argv: list[str], environ: dict[str, str], expected: tuple[str, int, str, str, float]
) -> None:
    s = parse(argv, environ)
    assert (s.listen_host, s.listen_port, s.kubeconfig, s.wave_label, s.wave_gap) == expected


@pytest.mark.parametrize(
    "argv", [["--wave.gap", "0s"], ["--wave.gap", "soon"], ["--web.listen-address", "9618"]]
)
def test_bad_values_are_rejected(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse(argv)
    assert argv[0] in capsys.readouterr().err


def test_bad_environment_stops_with_the_variable_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse([], {"NODESYNC_WAVE_GAP": "-1m"})
    assert "NODESYNC_WAVE_GAP" in capsys.readouterr().err


def test_log_fields() -> None:
    assert log_fields(parse(["--wave.label", "x"]))["wave_label"] == "x"
