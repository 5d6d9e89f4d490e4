"""Settings declared once: the field's default is the declared default parsed, groups nest,
and the typed settings are built from parsed values."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import pytest

from exporter.settings.declare import (
    Setting,
    build,
    changed,
    group,
    log_fields,
    setting,
    settings_of,
)
from exporter.settings.values import BOOLEAN, POSITIVE_COUNT, POSITIVE_DURATION

SHARED = Setting("--shared", "x", "shared between two classes")


@dataclass(frozen=True, slots=True)
class Inner:
    limit: int = setting("--limit", "3", "a limit", POSITIVE_COUNT)


@dataclass(frozen=True, slots=True)
class Outer:
    period: float = setting("--period", "1m30s", "a period", POSITIVE_DURATION)
    enabled: bool = setting("--enabled", "false", "a switch", BOOLEAN)
    inner: Inner = group(Inner)
    shared: str = SHARED.field()
    secret: str = field(default="", repr=False)


@dataclass(frozen=True, slots=True)
class Limits:
    """A model value: it knows no flags."""

    limit: int


@dataclass(frozen=True, slots=True)
class Holder:
    limits: Limits = group(Inner, builds=Limits)


def test_the_default_is_the_declared_default_parsed() -> None:
    assert Outer() == Outer(period=90.0, enabled=False, inner=Inner(limit=3), shared="x")


def test_settings_of_includes_groups_in_order() -> None:
    assert [s.flag for s in settings_of(Outer)] == [
        "--period",
        "--enabled",
        "--limit",
        "--shared",
    ]


def test_each_setting_names_its_variable_and_destination() -> None:
    (period, *_) = settings_of(Outer)
    assert (period.environment, period.dest) == ("NODESYNC_PERIOD", "period")
    dotted = Setting("--web.listen-address", "", "x")
    assert (dotted.environment, dotted.dest) == (
        "NODESYNC_WEB_LISTEN_ADDRESS",
        "web_listen_address",
    )
    assert Setting("--node-name", "", "x", env="NODE_NAME").environment == "NODE_NAME"


def test_build_from_a_namespace_and_a_mapping() -> None:
    values = {"period": 5.0, "enabled": True, "limit": 7, "shared": "y"}
    expected = Outer(period=5.0, enabled=True, inner=Inner(limit=7), shared="y")
    assert build(Outer, values) == expected
    assert build(Outer, argparse.Namespace(**values)) == expected


def test_changed_keeps_the_other_values_and_refuses_unknown_names() -> None:
    base = Outer(period=5.0, secret="hush")
    assert changed(base, limit=9) == Outer(period=5.0, inner=Inner(limit=9), secret="hush")
    with pytest.raises(KeyError, match="no setting nope"):
        changed(base, nope=1)


def test_a_default_that_does_not_parse_fails_at_declaration() -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        Setting("--period", "soon", "x", POSITIVE_DURATION)
    with pytest.raises(ValueError, match="starts with --"):
        Setting("period", "1s", "x")


def test_log_fields_flatten_groups_and_leave_out_secrets() -> None:
    fields = log_fields(Outer(secret="hush"))
    assert fields == {"period": 90.0, "enabled": False, "limit": 3, "shared": "x"}


def test_a_group_that_builds_a_model_value_holds_it() -> None:
    assert Holder() == Holder(limits=Limits(limit=3))
    assert [s.flag for s in settings_of(Holder)] == ["--limit"]
    assert build(Holder, {"limit": 7}) == Holder(limits=Limits(limit=7))
    assert changed(Holder(), limit=9) == Holder(limits=Limits(limit=9))
    assert log_fields(Holder(limits=Limits(limit=4))) == {"limit": 4}
