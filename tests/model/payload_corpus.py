"""A corpus of Alertmanager webhook deliveries, valid and invalid: what Alertmanager 0.25 posts
(``AM_BODY``), that body damaged field by field with the decoder's message for each
(``INVALID``: each names the field by its JSON path), bodies damaged below the JSON level
(``RAW``: invalid UTF-8, NaN, deep nesting, cut short), and valid deliveries whose label values
are no Kubernetes names (``NAMES``).

The parser's tests (tests/model/test_payload.py) and the agreement of ``nodesync plan`` with the
webhook (tests/controller/test_plan_agrees.py) read it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from exporter.model.payload import MAX_ALERTS, MAX_LABELS, MAX_NAME_LENGTH, MAX_VALUE_LENGTH

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


def damaged(changes: list[tuple[str, object]]) -> dict[str, Any]:
    """Alertmanager's body with each (path, value) set, or deleted where the value is ``...``;
    a change whose parent an earlier one removed is skipped."""
    b = body()
    for path, value in changes:
        try:
            (_delete(path) if value is ... else _set(path, value))(b)
        except (KeyError, IndexError, TypeError, ValueError):
            continue
    return b


INVALID: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("version missing", _delete("version"), "$.version: missing"),
    ("version 3", _set("version", "3"), "$.version: '3' is not supported (only '4')"),
    ("version number", _set("version", 4), "$.version: expected `str`, got `int`"),
    ("groupKey missing", _delete("groupKey"), "$.groupKey: missing"),
    ("groupKey number", _set("groupKey", 7), "$.groupKey: expected `str`, got `int`"),
    (
        "groupKey too long",
        _set("groupKey", LONG),
        f"$.groupKey: expected `str` of length <= {MAX_VALUE_LENGTH}",
    ),
    ("receiver null", _set("receiver", None), "$.receiver: expected `str`, got `null`"),
    (
        "status other",
        _set("status", "pending"),
        "$.status: invalid enum value 'pending'",
    ),
    ("alerts missing", _delete("alerts"), "$.alerts: missing"),
    ("alerts object", _set("alerts", {}), "$.alerts: expected `array`, got `object`"),
    (
        "alert not an object",
        _set("alerts.1", "x"),
        "$.alerts[1]: expected `object`, got `str`",
    ),
    (
        "alert status",
        _set("alerts.0.status", "FIRING"),
        "$.alerts[0].status: invalid enum value 'FIRING'",
    ),
    ("alert status missing", _delete("alerts.1.status"), "$.alerts[1].status: missing"),
    ("labels missing", _delete("alerts.0.labels"), "$.alerts[0].labels: missing"),
    (
        "labels null",
        _set("alerts.0.labels", None),
        "$.alerts[0].labels: expected `object`, got `null`",
    ),
    (
        "labels list",
        _set("alerts.0.labels", ["a"]),
        "$.alerts[0].labels: expected `object`, got `array`",
    ),
    (
        "label value number",
        _set("alerts.0.labels.node", 3),
        "$.alerts[0].labels[...]: expected `str`, got `int`",
    ),
    (
        "label value bool",
        _set("alerts.0.labels.node", True),
        "$.alerts[0].labels[...]: expected `str`, got `bool`",
    ),
    (
        "label name empty",
        _set("alerts.0.labels.", "x"),
        "$.alerts[0].labels: a key: expected `str` of length >= 1",
    ),
    (
        "label name long",
        _set(f"alerts.0.labels.{'n' * (MAX_NAME_LENGTH + 1)}", "x"),
        "$.alerts[0].labels: a key: expected `str` of length <= 1024",
    ),
    (
        "label value long",
        _set("alerts.0.labels.node", LONG),
        "$.alerts[0].labels[...]: expected `str` of length <= 16384",
    ),
    (
        "too many labels",
        _set("alerts.0.labels", {f"l{i}": "" for i in range(MAX_LABELS + 1)}),
        "$.alerts[0].labels: expected `object` of length <= 256",
    ),
    (
        "surrogate",
        _set("alerts.0.labels.node", "\ud800"),
        "malformed JSON: unexpected end of escaped utf-16 surrogate pair (byte 147)",
    ),
    (
        "annotation number",
        _set("alerts.1.annotations", {"summary": 1.5}),
        "$.alerts[1].annotations[...]: expected `str`, got `float`",
    ),
    (
        "groupLabels list",
        _set("groupLabels", []),
        "$.groupLabels: expected `object | null`, got `array`",
    ),
    (
        "commonLabels value",
        _set("commonLabels", {"a": None}),
        "$.commonLabels[...]: expected `str`, got `null`",
    ),
    ("startsAt missing", _delete("alerts.0.startsAt"), "$.alerts[0].startsAt: missing"),
    (
        "startsAt zero",
        _set("alerts.0.startsAt", "0001-01-01T00:00:00Z"),
        "$.alerts[0].startsAt: not set (the zero time)",
    ),
    (
        "startsAt number",
        _set("alerts.0.startsAt", T0),
        "$.alerts[0].startsAt: expected `str`, got `float`",
    ),
    (
        "startsAt no zone",
        _set("alerts.0.startsAt", "2026-11-30T01:02:03"),
        "$.alerts[0].startsAt: not an RFC 3339 timestamp: '2026-11-30T01:02:03'",
    ),
    (
        "startsAt date only",
        _set("alerts.0.startsAt", "2026-11-30"),
        "$.alerts[0].startsAt: not an RFC 3339 timestamp: '2026-11-30'",
    ),
    (
        "startsAt 10 digits",
        _set("alerts.0.startsAt", "2026-11-30T01:02:03.1234567891Z"),
        "$.alerts[0].startsAt: not an RFC 3339 timestamp: '2026-11-30T01:02:03.1234567891Z'",
    ),
    (
        "startsAt non-ASCII digits",
        _set("alerts.0.startsAt", "٢٠٢٦-11-30T01:02:03Z"),
        "$.alerts[0].startsAt: not an RFC 3339 timestamp: '٢٠٢٦-11-30T01:02:03Z'",
    ),
    (
        "startsAt Feb 30",
        _set("alerts.0.startsAt", "2026-02-30T01:02:03Z"),
        "$.alerts[0].startsAt: no such date: '2026-02-30T01:02:03Z'",
    ),
    (
        "startsAt year 0",
        _set("alerts.0.startsAt", "0000-01-01T00:00:00Z"),
        "$.alerts[0].startsAt: no such date: '0000-01-01T00:00:00Z'",
    ),
    (
        "startsAt 24h",
        _set("alerts.0.startsAt", "2026-11-30T24:00:00Z"),
        "$.alerts[0].startsAt: no such time: '2026-11-30T24:00:00Z'",
    ),
    (
        "startsAt leap second",
        _set("alerts.0.startsAt", "2026-12-31T23:59:60Z"),
        "$.alerts[0].startsAt: no such time: '2026-12-31T23:59:60Z'",
    ),
    (
        "startsAt offset",
        _set("alerts.0.startsAt", "2026-11-30T01:02:03+24:00"),
        "$.alerts[0].startsAt: bad UTC offset: '2026-11-30T01:02:03+24:00'",
    ),
    (
        "endsAt garbage",
        _set("alerts.1.endsAt", "soon"),
        "$.alerts[1].endsAt: not an RFC 3339 timestamp: 'soon'",
    ),
    (
        "fingerprint missing",
        _delete("alerts.1.fingerprint"),
        "$.alerts[1].fingerprint: missing",
    ),
    (
        "fingerprint empty",
        _set("alerts.0.fingerprint", ""),
        "$.alerts[0].fingerprint: must be hexadecimal, got ''",
    ),
    (
        "fingerprint not hex",
        _set("alerts.0.fingerprint", "xyz"),
        "$.alerts[0].fingerprint: must be hexadecimal, got 'xyz'",
    ),
    (
        "fingerprint long",
        _set("alerts.0.fingerprint", "a" * 65),
        "$.alerts[0].fingerprint: expected `str` of length <= 64",
    ),
    (
        "generatorURL list",
        _set("alerts.0.generatorURL", []),
        "$.alerts[0].generatorURL: expected `str`, got `array`",
    ),
    (
        "externalURL long",
        _set("externalURL", LONG),
        "$.externalURL: expected `str` of length <= 16384",
    ),
    ("truncated negative", _set("truncatedAlerts", -1), "$.truncatedAlerts: expected `int` >= 0"),
    (
        "truncated huge",
        _set("truncatedAlerts", 2**63),
        "$.truncatedAlerts: expected `int` <= 9223372036854775807",
    ),
    (
        "truncated float",
        _set("truncatedAlerts", 1.0),
        "$.truncatedAlerts: expected `int`, got `float`",
    ),
    (
        "truncated bool",
        _set("truncatedAlerts", True),
        "$.truncatedAlerts: expected `int`, got `bool`",
    ),
    (
        "too many alerts",
        _set("alerts", [AM_BODY["alerts"][0]] * (MAX_ALERTS + 1)),
        f"$.alerts: expected `array` of length <= {MAX_ALERTS}: set max_alerts on the Alertmanager "
        "receiver",
    ),
]


def _encoded(b: dict[str, Any]) -> bytes:
    return json.dumps(b).encode()


def _with_extra(value: bytes) -> bytes:
    """Alertmanager's body with a field nodesync does not read set to the raw JSON ``value``."""
    return _encoded({**AM_BODY, "extra": "@"}).replace(b'"@"', value)


def _with_receiver(value: bytes) -> bytes:
    return _encoded(body()).replace(b'"receiver": "nodesync-hook"', b'"receiver": ' + value, 1)


#: Bodies damaged below the JSON level: (id, bytes, the 400's message).
RAW: list[tuple[str, bytes, str]] = [
    ("empty", b"", "malformed JSON: input data was truncated"),
    ("not json", b"{not json", "malformed JSON: object keys must be strings (byte 1)"),
    ("nan", _with_receiver(b"NaN"), "malformed JSON: invalid character (byte 13)"),
    ("infinity", _with_receiver(b"-Infinity"), "malformed JSON: invalid character (byte 14)"),
    (
        "invalid utf-8",
        _with_receiver(b'"\xff\xfe"'),
        "malformed JSON: not UTF-8: invalid start byte at byte 14",
    ),
    (
        "cut utf-8",
        _with_receiver(b'"\xe2\x82"'),
        "malformed JSON: not UTF-8: invalid continuation byte at byte 14",
    ),
    (
        "encoded surrogate",
        _with_receiver(b'"\xed\xa0\x80"'),
        "malformed JSON: not UTF-8: invalid continuation byte at byte 14",
    ),
    (
        "utf-16",
        json.dumps(AM_BODY).encode("utf-16"),
        "malformed JSON: not UTF-8: invalid start byte at byte 0",
    ),
    ("bom", b"\xef\xbb\xbf" + _encoded(body()), "malformed JSON: invalid character (byte 0)"),
    (
        "escaped surrogate",
        _with_receiver(b'"\\ud800"'),
        "malformed JSON: unexpected end of escaped utf-16 surrogate pair (byte 20)",
    ),
    ("deep", b"[" * 100_000 + b"]" * 100_000, "$: expected `object`, got `array`"),
    (
        "deep, unread",
        _with_extra(b"[" * 100_000 + b"]" * 100_000),
        "malformed JSON: nested too deeply",
    ),
    (
        "not UTF-8, unread",
        _with_extra(b'"\xff"'),
        "malformed JSON: not UTF-8: invalid start byte at byte 989",
    ),
    ("NaN, unread", _with_extra(b"NaN"), "malformed JSON: invalid character (byte 988)"),
    (
        "control character, unread",
        _with_extra(b'"\x01"'),
        "malformed JSON: invalid character (byte 989)",
    ),
    (
        "deep inside",
        _with_receiver(b"[" * 100_000 + b"]" * 100_000),
        "$.receiver: expected `str`, got `array`",
    ),
    (
        "shallow nesting",
        _with_receiver(b"[" * 50 + b"]" * 50),
        "$.receiver: expected `str`, got `array`",
    ),
    ("digits", _with_receiver(b"9" * 5000), "$.receiver: number out of range"),
    ("cut short", _encoded(body())[:-40], "malformed JSON: input data was truncated"),
    ("trailing data", _encoded(body()) + b"{}", "malformed JSON: trailing characters (byte 979)"),
    ("array", b"[]", "$: expected `object`, got `array`"),
    ("null", b"null", "$: expected `object`, got `null`"),
]


def _named(fingerprint: str, **labels: str) -> dict[str, Any]:
    one = copy.deepcopy(AM_BODY["alerts"][0])
    one["fingerprint"] = fingerprint
    one["labels"] = {**one["labels"], **labels}
    return one


#: Valid deliveries with label values that are no Kubernetes names: (id, bytes, the reason
#: each alert is refused by a cluster without nodes, in order).
NAMES: list[tuple[str, bytes, list[str]]] = [
    (
        "dotdot and a valid name",
        _encoded(body() | {"alerts": [_named("a001", node=".."), _named("a002", node="ok-1")]}),
        ["invalid_name", "unknown_node"],
    ),
    (
        "subresource",
        _encoded(body() | {"alerts": [_named("a003", node="old-0/status")]}),
        ["invalid_name"],
    ),
    (
        "16,000 characters",
        _encoded(body() | {"alerts": [_named("a004", node="n" * 16_000)]}),
        ["invalid_name"],
    ),
    (
        "namespace and pod",
        _encoded(
            body()
            | {
                "alerts": [
                    _named("a005", nodesync_action="evict_pod", namespace="../x", pod="p"),
                    _named("a006", nodesync_action="evict_pod", namespace="ns", pod="p/log"),
                    _named("a007", nodesync_action="evict_pod", namespace="ns", pod="p-1"),
                ]
            }
        ),
        ["invalid_name", "invalid_name", "unknown_node"],
    ),
]


#: Any JSON value, for damaging bodies.
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
