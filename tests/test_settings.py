from __future__ import annotations

import argparse

import pytest

from exporter.settings import env_name, listen_address, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("10s", 10.0),
        ("500ms", 0.5),
        ("1m30s", 90.0),
        ("2h", 7200.0),
        ("1.5", 1.5),
        ("0s", 0.0),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["ten", "10x", "s10", "10s5", "-1s", "-3", ""])
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
    assert env_name("--cri-timeout") == "NODESYNC_CRI_TIMEOUT"
