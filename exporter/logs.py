"""Logging setup: plain text for people, one JSON object per line for log pipelines."""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass
from typing import Any

from exporter.settings.declare import setting
from exporter.settings.values import choice


@dataclass(frozen=True, slots=True)
class LogSettings:
    """Every command's logging flags."""

    log_format: str = setting(
        "--log-format",
        "text",
        "log line format",
        choice("text", "json"),
        doc="`text` or `json` (one object per line)",
    )
    log_level: str = setting(
        "--log-level",
        "info",
        "minimum level logged",
        choice("debug", "info", "warning", "error"),
        doc="`debug`, `info`, `warning` or `error`",
    )


# Attributes every LogRecord has; anything else was passed through ``extra=`` and is a field.
_RESERVED = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
}


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _RESERVED}


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
