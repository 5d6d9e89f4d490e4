"""Log lines stay bounded: long field values are cut, and lines that clients can repeat at any
rate are logged at most once per interval."""

from __future__ import annotations

import json
import logging

import pytest

from exporter.logs import MAX_FIELD_LENGTH, JSONFormatter, RateLimitedLog, TextFormatter


def _record(**fields: object) -> logging.LogRecord:
    record = logging.LogRecord("t", logging.INFO, __file__, 1, "refused an alert", None, None)
    for k, v in fields.items():
        setattr(record, k, v)
    return record


@pytest.mark.parametrize("formatter", [JSONFormatter(), TextFormatter()])
def test_a_long_field_is_cut(formatter: logging.Formatter) -> None:
    line = formatter.format(_record(node="n" * 16_000, count=3))
    assert len(line) < MAX_FIELD_LENGTH + 200
    assert "(16000 characters)" in line


def test_json_fields_stay_json() -> None:
    entry = json.loads(JSONFormatter().format(_record(node="n" * 5000, ok="short")))
    assert entry["ok"] == "short"
    assert len(entry["node"]) <= MAX_FIELD_LENGTH


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_at_most_one_line_per_key_and_interval(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    limited = RateLimitedLog(logging.getLogger("limited"), interval=60.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger="limited"):
        logged = [limited.log(logging.WARNING, "a", "refused", n=i) for i in range(1000)]
        assert limited.log(logging.WARNING, "b", "other kind")
        clock.now += 59.9
        assert not limited.log(logging.WARNING, "a", "refused")
        clock.now += 0.2
        assert limited.log(logging.WARNING, "a", "refused", n=-1)
    assert logged.count(True) == 1
    lines = [(r.getMessage(), getattr(r, "left_out", 0)) for r in caplog.records]
    assert lines == [("refused", 0), ("other kind", 0), ("refused", 1000)]
