"""The kinds of values settings take: Prometheus durations, addresses, booleans, numbers."""

from __future__ import annotations

import argparse

import pytest

from exporter.settings.declare import env_name
from exporter.settings.values import (
    boolean,
    choice,
    count,
    fraction,
    listen_address,
    parse_duration,
    positive_count,
    positive_number,
    unix_endpoint,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("10s", 10.0),
        ("500ms", 0.5),
        ("1m30s", 90.0),
        ("2h", 7200.0),
        ("1.5", 1.5),
        ("0s", 0.0),
        ("7d", 7 * 86400.0),
        ("2w", 14 * 86400.0),
        ("1y", 365 * 86400.0),
        ("1d12h", 1.5 * 86400.0),
        ("168h", 7 * 86400.0),
        ("1h30m", 5400.0),
        ("0.5s", 0.5),
        ("1y2w3d4h5m6s7ms", 365 * 86400 + 17 * 86400 + 4 * 3600 + 5 * 60 + 6.007),
        ("0", 0.0),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text",
    [
        "ten",
        "10x",
        "s10",
        "10s5",
        "-1s",
        "-3",
        "",
        "nan",
        "inf",
        "1D",
        "30s1m",
        "1m1m",
        "5ms1s",
        "1h 30m",
    ],
)
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="invalid duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9617", ("127.0.0.1", 9617)),
        (":9617", ("0.0.0.0", 9617)),
        ("[::1]:80", ("::1", 80)),
    ],
)
def test_listen_address(text: str, expected: tuple[str, int]) -> None:
    assert listen_address(text) == expected


@pytest.mark.parametrize("text", ["9617", "host:", "host:port", "h:70000"])
def test_listen_address_rejects(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        listen_address(text)


def test_env_name() -> None:
    assert env_name("--web.listen-address") == "NODESYNC_WEB_LISTEN_ADDRESS"
    assert env_name("--cri.timeout") == "NODESYNC_CRI_TIMEOUT"


@pytest.mark.parametrize(
    ("text", "value"),
    [("true", True), ("TRUE", True), ("1", True), ("yes", True), ("on", True),
     ("enabled", True), ("false", False), ("0", False), ("no", False), ("off", False),
     ("disabled", False), ("", False)],
)  # fmt: skip
def test_boolean(text: str, value: bool) -> None:
    assert boolean(text) is value


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (boolean, "maybe", "invalid boolean 'maybe'"),
        (fraction, "1.5", "must be from 0 to 1"),
        (fraction, "x", "invalid fraction"),
        (count, "-1", "must not be negative"),
        (count, "1.5", "whole number"),
        (positive_count, "0", "at least 1"),
        (positive_number, "inf", "must be positive"),
        (positive_number, "0", "must be positive"),
        (choice("text", "json"), "yaml", "use one of text, json"),
    ],
)
def test_malformed_values_say_what_is_wrong(parse: object, text: str, message: str) -> None:
    assert callable(parse)
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        parse(text)


@pytest.mark.parametrize(
    ("text", "endpoint"),
    [
        ("unix:///run/containerd/containerd.sock", "unix:///run/containerd/containerd.sock"),
        ("unix:/run/crio/crio.sock", "unix:///run/crio/crio.sock"),  # kubelet takes it too
        (" unix:///run/x.sock ", "unix:///run/x.sock"),
    ],
)
def test_unix_endpoint(text: str, endpoint: str) -> None:
    assert unix_endpoint(text) == endpoint


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ("/run/containerd/containerd.sock", "unix:///run/containerd/containerd.sock"),
        ("tcp://", "only unix://"),
        ("tcp://127.0.0.1:1234", "only unix://"),
        ("npipe:////./pipe/containerd", "only unix://"),
        ("unix://", "no absolute socket path"),
        ("unix://run/x.sock", "unix:///run/x.sock"),
        ("unix:run.sock", "no absolute socket path"),
        ("", "e.g. unix://"),
    ],
)
def test_unix_endpoint_rejects_naming_the_form_that_works(text: str, hint: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="invalid endpoint") as exc:
        unix_endpoint(text)
    assert hint in str(exc.value)
