"""Logging setup: plain text for people, one JSON object per line for log pipelines."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from exporter.settings.declare import setting
from exporter.settings.values import choice


@dataclass(frozen=True, slots=True)
class LogSettings:
    """Every command's logging flags."""

    log_format: str = setting(
        "--log.format",
        "text",
        "log line format",
        choice("text", "json"),
        doc="`text` or `json` (one object per line)",
        aliases=("--log-format",),
    )
    log_level: str = setting(
        "--log.level",
        "info",
        "minimum level logged",
        choice("debug", "info", "warning", "error"),
        doc="`debug`, `info`, `warning` or `error`",
        aliases=("--log-level",),
    )


# Attributes every LogRecord has; anything else was passed through ``extra=`` and is a field.
_RESERVED = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
}


#: A field's text is cut to this many characters: a value from outside (an alert's label, a
#: client's header) cannot make a log line of any length.
MAX_FIELD_LENGTH = 1024


def _bounded(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_FIELD_LENGTH:
        return f"{value[: MAX_FIELD_LENGTH - 40]}... ({len(value)} characters)"
    return value


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: _bounded(v) for k, v in vars(record).items() if k not in _RESERVED}


class RateLimitedLog:
    """One kind of line (``key``, from a bounded set) at most once per ``interval``: the first
    at once, later ones only when the interval has passed, saying how many were left out
    (``left_out``). For what clients or the system can repeat at any rate."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        interval: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._interval = interval
        self._clock = clock
        self._next: dict[str, float] = {}
        self._left_out: Counter[str] = Counter()

    def log(self, level: int, key: str, msg: str, **fields: Any) -> bool:
        """Log ``msg`` with ``fields`` unless a line of this key was logged within the
        interval; whether it was logged."""
        now = self._clock()
        if now < self._next.get(key, now):
            self._left_out[key] += 1
            return False
        self._next[key] = now + self._interval
        left_out = self._left_out.pop(key, 0)
        if left_out:
            fields["left_out"] = left_out
        self._logger.log(level, msg, extra=fields)
        return True


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(_fields(record))
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = " ".join(f"{k}={v!r}" for k, v in _fields(record).items())
        return f"{line} {extra}" if extra else line


def setup_logging(fmt: str, level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    formatter: logging.Formatter = JSONFormatter() if fmt == "json" else TextFormatter()
    if isinstance(formatter, JSONFormatter):
        formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's access log would log every scrape; keep it for debug only.
    logging.getLogger("aiohttp.access").setLevel(
        logging.DEBUG if level == "debug" else logging.WARNING
    )
