"""The kinds of values settings take, each a parser with the placeholder ``--help`` shows.

Neutral: the command line, the simulator's scenario files and tests parse values with these.
A malformed value raises ``argparse.ArgumentTypeError`` with a message that says what is
wrong and what would be right; argparse prints it after the flag's name.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
# Prometheus' units (a year is 365 days, as in Prometheus).
_UNIT_SECONDS = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 7 * 86400.0,
    "y": 365 * 86400.0,
}
_UNIT_ORDER = ("y", "w", "d", "h", "m", "s", "ms")
_TRUE = frozenset({"true", "1", "yes", "on", "enabled"})
_FALSE = frozenset({"false", "0", "no", "off", "disabled", ""})


def _invalid(message: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(message)


def parse_duration(text: str) -> float:
    """A duration in Prometheus' notation (``model.ParseDuration``: ``10s``, ``500ms``,
    ``1h30m``, ``7d``, ``2w``, ``1y``; units y w d h m s ms, each at most once and in that
    order), also with decimals (``0.5s``, as Go's durations), or plain seconds (``2.5``); in
    seconds."""
    value = text.strip()
    try:
        seconds = float(value)
    except ValueError:
        pos = 0
        seconds = 0.0
        last = -1
        for match in _DURATION.finditer(value):
            rank = _UNIT_ORDER.index(match.group(2))
            if match.start() != pos or rank <= last:
                break
            seconds += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
            pos, last = match.end(), rank
        if pos != len(value) or not value:
            raise _invalid(
                f"invalid duration {text!r}: use e.g. 10s, 500ms, 1h30m, 7d (units y w d h m s "
                "ms, largest first)"
            ) from None
    if not math.isfinite(seconds):
        raise _invalid(f"invalid duration {text!r}: must be finite")
    if seconds < 0:
        raise _invalid(f"invalid duration {text!r}: must not be negative")
    return seconds


def positive_duration(text: str) -> float:
    seconds = parse_duration(text)
    if seconds <= 0:
        raise _invalid(f"invalid duration {text!r}: must be positive")
    return seconds


def listen_address(text: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:port`` for IPv6, ``:port`` for all interfaces)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise _invalid(f"invalid listen address {text!r}: use host:port")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


def unix_endpoint(text: str) -> str:
    """A gRPC endpoint on a Unix socket, as kubelet's ``--container-runtime-endpoint`` takes it
    on Linux: ``unix://`` and an absolute path (``unix:/path`` is written ``unix:///path``).
    A bare path, another scheme (``tcp://``, ``npipe://``) or no path is refused, naming the
    form that would work."""
    value = text.strip()
    example = "e.g. unix:///run/containerd/containerd.sock"
    scheme, sep, rest = value.partition(":")
    if not sep or not scheme or "/" in scheme:
        hint = f"unix://{value}" if value.startswith("/") else example
        raise _invalid(f"invalid endpoint {text!r}: write a Unix socket as {hint}")
    if scheme != "unix":
        raise _invalid(
            f"invalid endpoint {text!r}: only unix:// sockets are supported (as kubelet's "
            f"--container-runtime-endpoint on Linux), {example}"
        )
    path = "/" + rest.removeprefix("//").lstrip("/") if rest.startswith("/") else rest
    if rest.startswith("//") and not rest.startswith("///") and rest[2:]:
        raise _invalid(
            f"invalid endpoint {text!r}: unix:// takes an absolute path after it: "
            f"unix:///{rest[2:]}"
        )
    if not path.startswith("/") or path == "/" or any(c in path for c in "?#\0"):
        raise _invalid(f"invalid endpoint {text!r}: no absolute socket path, {example}")
    return f"unix://{path}"


def boolean(text: str) -> bool:
    """``true``/``false`` (also 1/0, yes/no, on/off, enabled/disabled; any case)."""
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise _invalid(f"invalid boolean {text!r}: use true or false")


def fraction(text: str) -> float:
    """A number from 0 to 1."""
    try:
        value = float(text)
    except ValueError:
        raise _invalid(f"invalid fraction {text!r}: use e.g. 0.1") from None
    if not 0.0 <= value <= 1.0:
        raise _invalid(f"invalid fraction {text!r}: must be from 0 to 1")
    return value


def count(text: str) -> int:
    """A whole number, zero or more."""
    try:
        value = int(text.strip())
    except ValueError:
        raise _invalid(f"invalid number {text!r}: use a whole number, e.g. 10") from None
    if value < 0:
        raise _invalid(f"invalid number {text!r}: must not be negative")
    return value


def positive_count(text: str) -> int:
    """A whole number, one or more."""
    value = count(text)
    if value < 1:
        raise _invalid(f"invalid number {text!r}: must be at least 1")
    return value


def positive_number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _invalid(f"invalid number {text!r}: use e.g. 5") from None
    if not value > 0 or value == float("inf"):
        raise _invalid(f"invalid number {text!r}: must be positive")
    return value


def taint_keys(text: str) -> tuple[str, ...]:
    """Taint keys separated by commas (empty: none), each as the API takes a key: an optional
    DNS prefix and ``/``, then a name; sorted, each once."""
    keys = [key.strip() for key in text.split(",") if key.strip()]
    for key in keys:
        if not _TAINT_KEY.fullmatch(key):
            raise _invalid(f"invalid taint key {key!r}: use e.g. node.cilium.io/agent-not-ready")
    return tuple(sorted(set(keys)))


def cohort_keys(text: str) -> tuple[str, ...]:
    """Cohort keys separated by commas (empty: none), each a name of the Node's build
    (``os_image`` ...) or a label key, as the API takes one; in their order, each once, at
    most 12."""
    keys = list(dict.fromkeys(key.strip() for key in text.split(",") if key.strip()))
    for key in keys:
        if not _TAINT_KEY.fullmatch(key):
            raise _invalid(f"invalid key {key!r}: use e.g. os_image or topology.kubernetes.io/zone")
    if len(keys) > 12:
        raise _invalid(f"{len(keys)} keys: at most 12")
    return tuple(keys)


_TAINT_KEY = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)


@dataclass(frozen=True, slots=True)
class Kind(Generic[T]):
    """A kind of value: its parser, and the placeholder ``--help`` shows for it."""

    metavar: str
    parse: Callable[[str], T]

    def __call__(self, text: str) -> T:
        return self.parse(text)


def text(metavar: str) -> Kind[str]:
    """Any text, shown as ``metavar`` (PATH, URL, NAME ...)."""
    return Kind(metavar, str)


def choice(*values: str) -> Kind[str]:
    """One of ``values``."""

    def parse(text: str) -> str:
        if text not in values:
            raise _invalid(f"invalid choice {text!r}: use one of {', '.join(values)}")
        return text

    return Kind("{" + ",".join(values) + "}", parse)


TEXT = text("TEXT")
PATH = text("PATH")
URL = text("URL")
NAME = text("NAME")
UNIX_ENDPOINT = Kind("ENDPOINT", unix_endpoint)
DURATION = Kind("DURATION", parse_duration)
POSITIVE_DURATION = Kind("DURATION", positive_duration)
ADDRESS = Kind("HOST:PORT", listen_address)
BOOLEAN = Kind("BOOL", boolean)
FRACTION = Kind("FRACTION", fraction)
COUNT = Kind("N", count)
POSITIVE_COUNT = Kind("N", positive_count)
POSITIVE_NUMBER = Kind("NUMBER", positive_number)
TAINT_KEYS = Kind("KEY,...", taint_keys)
COHORT_KEYS = Kind("KEY,...", cohort_keys)

AnyKind = Kind[Any]
