"""Alertmanager webhook bodies (version 4) → WebhookPayload, and PayloadError naming the field for
anything malformed. Property: whatever JSON arrives, the only exception is PayloadError."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.model.alerts import Alert, WebhookPayload
from exporter.model.payload import (
    MAX_ALERTS,
    MAX_LABELS,
    MAX_NAME_LENGTH,
    MAX_VALUE_LENGTH,
    PayloadError,
    parse_payload,
)

# 2026-11-30T01:02:03Z
T0 = 1_796_000_523.0

# What Alertmanager 0.25 posts (two alerts: one firing, one resolved).
AM_BODY: dict[str, Any] = {
    "receiver": "nodesync-hook",
    "status": "firing",
    "alerts": [
        {
            "status": "firing",
            "labels": {
                "alertname": "NodesyncNodeJoinFailed",
                "node": "worker-1",
                "nodesync_action": "rollback_node",
            },
            "annotations": {"summary": "worker-1 failed to join"},
            "startsAt": "2026-11-30T01:02:03.123456789Z",
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus:9090/graph?g0.expr=up",
            "fingerprint": "0123456789abcdef",
        },
        {
            "status": "resolved",
            "labels": {"alertname": "NodesyncNodeJoinFailed", "node": "worker-2"},
            "annotations": {},
            "startsAt": "2026-11-30T02:02:03+01:00",
            "endsAt": "2026-11-30T01:07:03.5Z",
            "generatorURL": "",
            "fingerprint": "fedcba9876543210",
        },
    ],
    "groupLabels": {"alertname": "NodesyncNodeJoinFailed"},
    "commonLabels": {"alertname": "NodesyncNodeJoinFailed"},
    "commonAnnotations": {},
    "externalURL": "http://alertmanager:9093",
    "version": "4",
    "groupKey": '{}/{nodesync_action=~"rollback_node"}:{alertname="NodesyncNodeJoinFailed"}',
    "truncatedAlerts": 2,
}


def body() -> dict[str, Any]:
    return copy.deepcopy(AM_BODY)


def test_an_alertmanager_body_is_parsed() -> None:
    payload = parse_payload(body())
    assert payload == WebhookPayload(
        version="4",
        group_key=AM_BODY["groupKey"],
        status="firing",
        receiver="nodesync-hook",
        alerts=(
            Alert(
                fingerprint="0123456789abcdef",
                status="firing",
                labels=AM_BODY["alerts"][0]["labels"],
                starts_at=T0 + 0.123,  # to the millisecond: the episode's identity
                ends_at=None,
                annotations={"summary": "worker-1 failed to join"},
                generator_url="http://prometheus:9090/graph?g0.expr=up",
            ),
            Alert(
                fingerprint="fedcba9876543210",
                status="resolved",
                labels=AM_BODY["alerts"][1]["labels"],
                starts_at=T0,
                ends_at=T0 + 300.5,
                annotations={},
                generator_url="",
            ),
        ),
        truncated_alerts=2,
        group_labels={"alertname": "NodesyncNodeJoinFailed"},
        common_labels={"alertname": "NodesyncNodeJoinFailed"},
        common_annotations={},
        external_url="http://alertmanager:9093",
    )


def test_optional_fields_may_be_missing_or_null() -> None:
    b = body()
    for key in ("truncatedAlerts", "groupLabels", "commonLabels", "externalURL"):
        del b[key]
    b["commonAnnotations"] = None
    for a in b["alerts"]:
        del a["endsAt"], a["generatorURL"]
    b["alerts"][0]["annotations"] = None
    del b["alerts"][1]["annotations"]
    b["unknownKey"] = [1, 2]
    payload = parse_payload(b)
    assert (payload.truncated_alerts, payload.group_labels, payload.external_url) == (0, {}, "")
    assert payload.common_annotations == {}
    assert [(a.ends_at, a.annotations, a.generator_url) for a in payload.alerts] == [
        (None, {}, ""),
        (None, {}, ""),
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-30T01:02:03Z", T0),
        ("2026-11-30t01:02:03z", T0),
        ("2026-11-30T01:02:03.5Z", T0 + 0.5),
        ("2026-11-30T01:02:03.500000000Z", T0 + 0.5),
        ("2026-11-30T03:32:03+02:30", T0),
        ("2026-11-29T23:02:03-02:00", T0),
        ("2026-11-30T01:02:03.000001Z", T0 + 0.000001),
        ("1970-01-01T00:00:00Z", 0.0),
        ("2024-02-29T00:00:00Z", 1_709_164_800.0),
    ],
)
def test_timestamps(text: str, expected: float) -> None:
    b = body()
    b["alerts"][0]["startsAt"] = text
    b["alerts"][0]["endsAt"] = text
    alert = parse_payload(b).alerts[0]
    assert alert.starts_at == round(expected, 3)  # an episode's identity: to the millisecond
    assert alert.ends_at == pytest.approx(expected, abs=1e-6)


def test_one_episode_written_with_more_or_fewer_digits_is_one_key() -> None:
    keys = set()
    for text in ("2026-11-30T01:02:03.123Z", "2026-11-30T01:02:03.123456789Z",
                 "2026-11-30T01:02:03.1230004Z", "2026-11-30T03:32:03.123+02:30"):  # fmt: skip
        b = body()
        b["alerts"][0]["startsAt"] = text
        keys.add(parse_payload(b).alerts[0].key)
    assert len(keys) == 1


def test_the_same_instant_is_the_same_key_whatever_its_spelling() -> None:
    spellings = [
        "2026-11-30T01:02:03.25Z",
        "2026-11-30T01:02:03.250000000Z",
        "2026-11-30T02:02:03.25+01:00",
    ]
    keys = set()
    for text in spellings:
        b = body()
        b["alerts"][0]["startsAt"] = text
        keys.add(parse_payload(b).alerts[0].key)
    assert keys == {("0123456789abcdef", T0 + 0.25)}


def _set(path: str, value: object) -> Callable[[dict[str, Any]], None]:
    """A mutation setting ``path`` (dots; numbers index lists) to ``value``."""

    def mutate(b: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = b
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        target[int(last) if last.isdigit() else last] = value

    return mutate


def _delete(path: str) -> Callable[[dict[str, Any]], None]:
    def mutate(b: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = b
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        del target[last]

    return mutate


LONG = "x" * (MAX_VALUE_LENGTH + 1)

INVALID: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("version missing", _delete("version"), r"^version: missing$"),
    ("version 3", _set("version", "3"), r"^version: '3' is not supported \(only '4'\)$"),
    ("version number", _set("version", 4), r"^version: a number is not supported"),
    ("groupKey missing", _delete("groupKey"), r"^groupKey: missing$"),
    ("groupKey number", _set("groupKey", 7), r"^groupKey: must be a string, got a number$"),
    ("groupKey too long", _set("groupKey", LONG), rf"^groupKey: longer than {MAX_VALUE_LENGTH}"),
    ("receiver null", _set("receiver", None), r"^receiver: must be a string, got null$"),
    (
        "status other",
        _set("status", "pending"),
        r"^status: must be 'firing' or 'resolved', got 'pending'$",
    ),
    ("alerts missing", _delete("alerts"), r"^alerts: missing$"),
    ("alerts object", _set("alerts", {}), r"^alerts: must be an array, got an object$"),
    (
        "alert not an object",
        _set("alerts.1", "x"),
        r"^alerts\[1\]: must be an object, got a string$",
    ),
    (
        "alert status",
        _set("alerts.0.status", "FIRING"),
        r"^alerts\[0\]\.status: must be 'firing' or 'resolved'",
    ),
    ("alert status missing", _delete("alerts.1.status"), r"^alerts\[1\]\.status: missing$"),
    ("labels missing", _delete("alerts.0.labels"), r"^alerts\[0\]\.labels: missing$"),
    (
        "labels null",
        _set("alerts.0.labels", None),
        r"^alerts\[0\]\.labels: must be an object of strings, got null$",
    ),
    (
        "labels list",
        _set("alerts.0.labels", ["a"]),
        r"^alerts\[0\]\.labels: must be an object of strings, got an array$",
    ),
    (
        "label value number",
        _set("alerts.0.labels.node", 3),
        r"^alerts\[0\]\.labels\['node'\]: must be a string, got a number$",
    ),
    (
        "label value bool",
        _set("alerts.0.labels.node", True),
        r"^alerts\[0\]\.labels\['node'\]: must be a string, got a boolean$",
    ),
    (
        "label name empty",
        _set("alerts.0.labels.", "x"),
        r"^alerts\[0\]\.labels: names must be non-empty strings",
    ),
    (
        "label name long",
        _set(f"alerts.0.labels.{'n' * (MAX_NAME_LENGTH + 1)}", "x"),
        rf"alerts\[0\]\.labels: name .* longer than {MAX_NAME_LENGTH}",
    ),
    (
        "label value long",
        _set("alerts.0.labels.node", LONG),
        r"^alerts\[0\]\.labels\['node'\]: longer than",
    ),
    (
        "too many labels",
        _set("alerts.0.labels", {f"l{i}": "" for i in range(MAX_LABELS + 1)}),
        rf"^alerts\[0\]\.labels: more than {MAX_LABELS} entries",
    ),
    (
        "surrogate",
        _set("alerts.0.labels.node", "\ud800"),
        r"^alerts\[0\]\.labels\['node'\]: contains an unpaired UTF-16 surrogate$",
    ),
    (
        "annotation number",
        _set("alerts.1.annotations", {"summary": 1.5}),
        r"^alerts\[1\]\.annotations\['summary'\]: must be a string, got a number$",
    ),
    (
        "groupLabels list",
        _set("groupLabels", []),
        r"^groupLabels: must be an object of strings, got an array$",
    ),
    (
        "commonLabels value",
        _set("commonLabels", {"a": None}),
        r"^commonLabels\['a'\]: must be a string, got null$",
    ),
    ("startsAt missing", _delete("alerts.0.startsAt"), r"^alerts\[0\]\.startsAt: missing$"),
    (
        "startsAt zero",
        _set("alerts.0.startsAt", "0001-01-01T00:00:00Z"),
        r"^alerts\[0\]\.startsAt: not set \(the zero time\)$",
    ),
    (
        "startsAt number",
        _set("alerts.0.startsAt", T0),
        r"^alerts\[0\]\.startsAt: must be a string, got a number$",
    ),
    (
        "startsAt no zone",
        _set("alerts.0.startsAt", "2026-11-30T01:02:03"),
        r"^alerts\[0\]\.startsAt: not an RFC 3339 timestamp: '2026-11-30T01:02:03'$",
    ),
    ("startsAt date only", _set("alerts.0.startsAt", "2026-11-30"), r"not an RFC 3339 timestamp"),
    (
        "startsAt 10 digits",
        _set("alerts.0.startsAt", "2026-11-30T01:02:03.1234567891Z"),
        r"not an RFC 3339 timestamp",
    ),
    (
        "startsAt non-ASCII digits",
        _set("alerts.0.startsAt", "٢٠٢٦-11-30T01:02:03Z"),
        r"not an RFC 3339 timestamp",
    ),
    (
        "startsAt Feb 30",
        _set("alerts.0.startsAt", "2026-02-30T01:02:03Z"),
        r"^alerts\[0\]\.startsAt: no such date",
    ),
    ("startsAt year 0", _set("alerts.0.startsAt", "0000-01-01T00:00:00Z"), r"no such date"),
    ("startsAt 24h", _set("alerts.0.startsAt", "2026-11-30T24:00:00Z"), r"no such time"),
    ("startsAt leap second", _set("alerts.0.startsAt", "2026-12-31T23:59:60Z"), r"no such time"),
    ("startsAt offset", _set("alerts.0.startsAt", "2026-11-30T01:02:03+24:00"), r"bad UTC offset"),
    (
        "endsAt garbage",
        _set("alerts.1.endsAt", "soon"),
        r"^alerts\[1\]\.endsAt: not an RFC 3339 timestamp: 'soon'$",
    ),
    (
        "fingerprint missing",
        _delete("alerts.1.fingerprint"),
        r"^alerts\[1\]\.fingerprint: missing$",
    ),
    (
        "fingerprint empty",
        _set("alerts.0.fingerprint", ""),
        r"^alerts\[0\]\.fingerprint: must be hexadecimal, got ''$",
    ),
    (
        "fingerprint not hex",
        _set("alerts.0.fingerprint", "xyz"),
        r"must be hexadecimal, got 'xyz'",
    ),
    (
        "fingerprint long",
        _set("alerts.0.fingerprint", "a" * 65),
        r"^alerts\[0\]\.fingerprint: longer than 64",
    ),
    (
        "generatorURL list",
        _set("alerts.0.generatorURL", []),
        r"^alerts\[0\]\.generatorURL: must be a string, got an array$",
    ),
    ("externalURL long", _set("externalURL", LONG), r"^externalURL: longer than"),
    ("truncated negative", _set("truncatedAlerts", -1), r"^truncatedAlerts: out of range: -1$"),
    ("truncated huge", _set("truncatedAlerts", 2**63), r"^truncatedAlerts: out of range"),
    (
        "truncated float",
        _set("truncatedAlerts", 1.0),
        r"^truncatedAlerts: must be an integer, got a number$",
    ),
    (
        "truncated bool",
        _set("truncatedAlerts", True),
        r"^truncatedAlerts: must be an integer, got a boolean$",
    ),
    (
        "too many alerts",
        _set("alerts", [AM_BODY["alerts"][0]] * (MAX_ALERTS + 1)),
        rf"^alerts: {MAX_ALERTS + 1} alerts, more than {MAX_ALERTS}: set max_alerts",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "message"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID]
)
def test_malformed_payloads_name_the_field(
    mutate: Callable[[dict[str, Any]], None], message: str
) -> None:
    b = body()
    mutate(b)
    with pytest.raises(PayloadError, match=message) as raised:
        parse_payload(b)
    assert raised.value.message == str(raised.value)


@pytest.mark.parametrize("value", [None, [], "x", 4, True, 1.5])
def test_the_body_must_be_an_object(value: object) -> None:
    with pytest.raises(PayloadError, match=r"^the body must be a JSON object, got "):
        parse_payload(value)


def test_as_many_alerts_as_the_cap_are_accepted() -> None:
    b = body()
    b["alerts"] = [AM_BODY["alerts"][0]] * MAX_ALERTS
    assert len(parse_payload(b).alerts) == MAX_ALERTS


def test_a_non_string_key_from_a_caller_is_refused() -> None:
    b = body()
    b["groupLabels"] = {1: "x"}
    with pytest.raises(PayloadError, match=r"^groupLabels: names must be non-empty strings"):
        parse_payload(b)


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.sampled_from(["4", "firing", "resolved", "2026-11-30T01:02:03Z", "0001-01-01T00:00:00Z"]),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=5)
    ),
    max_leaves=30,
)

PATHS = [
    "version",
    "groupKey",
    "status",
    "receiver",
    "truncatedAlerts",
    "groupLabels",
    "commonLabels",
    "commonAnnotations",
    "externalURL",
    "alerts",
    "alerts.0",
    "alerts.0.status",
    "alerts.0.labels",
    "alerts.0.labels.node",
    "alerts.0.annotations",
    "alerts.0.startsAt",
    "alerts.0.endsAt",
    "alerts.0.generatorURL",
    "alerts.0.fingerprint",
    "alerts.1.labels",
    "alerts.1.endsAt",
]


def _parses_or_refuses(value: object) -> None:
    try:
        result = parse_payload(value)
    except PayloadError as exc:
        message = exc.message
    else:
        message = ""
        assert isinstance(result, WebhookPayload)
        # what is accepted can be stored: plain strings that encode as UTF-8
        for a in result.alerts:
            assert a.status in ("firing", "resolved")
            json.dumps(dict(a.labels), ensure_ascii=False).encode()
            json.dumps(dict(a.annotations), ensure_ascii=False).encode()
        return
    assert message, "a PayloadError says what is wrong"


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_arbitrary_json_raises_nothing_but_payload_error(value: object) -> None:
    _parses_or_refuses(value)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(PATHS), JSON | st.just(...)), min_size=1, max_size=3))
def test_a_damaged_alertmanager_body_raises_nothing_but_payload_error(
    changes: list[tuple[str, object]],
) -> None:
    b = body()
    for path, value in changes:
        try:
            (_delete(path) if value is ... else _set(path, value))(b)
        except (KeyError, IndexError, TypeError, ValueError):
            continue  # an earlier change removed the parent
    _parses_or_refuses(b)
