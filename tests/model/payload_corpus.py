"""A corpus of Alertmanager webhook deliveries, valid and invalid: what Alertmanager 0.25 posts
(``AM_BODY``), that body damaged field by field with the parser's message for each
(``INVALID``), bodies damaged below the JSON level (``RAW``: invalid UTF-8, NaN, deep nesting,
cut short), and valid deliveries whose label values are no Kubernetes names (``NAMES``).

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


def _encoded(b: dict[str, Any]) -> bytes:
    return json.dumps(b).encode()


def _with_receiver(value: bytes) -> bytes:
    return _encoded(body()).replace(b'"receiver": "nodesync-hook"', b'"receiver": ' + value, 1)


#: Bodies damaged below the JSON level: (id, bytes, the start of the 400's message).
RAW: list[tuple[str, bytes, str]] = [
    ("empty", b"", "malformed JSON: Expecting value"),
    ("not json", b"{not json", "malformed JSON: Expecting property name"),
    ("nan", _with_receiver(b"NaN"), "malformed JSON: NaN is not JSON"),
    ("infinity", _with_receiver(b"-Infinity"), "malformed JSON: -Infinity is not JSON"),
    ("invalid utf-8", _with_receiver(b'"\xff\xfe"'), "malformed JSON: not UTF-8"),
    ("cut utf-8", _with_receiver(b'"\xe2\x82"'), "malformed JSON: not UTF-8"),
    ("encoded surrogate", _with_receiver(b'"\xed\xa0\x80"'), "malformed JSON: not UTF-8"),
    ("utf-16", json.dumps(AM_BODY).encode("utf-16"), "malformed JSON: not UTF-8"),
    ("bom", b"\xef\xbb\xbf" + _encoded(body()), "malformed JSON: Unexpected UTF-8 BOM"),
    ("escaped surrogate", _with_receiver(b'"\\ud800"'), "receiver: contains an unpaired"),
    ("deep", b"[" * 100_000 + b"]" * 100_000, "malformed JSON: nested too deeply"),
    ("deep inside", _with_receiver(b"[" * 100_000 + b"]" * 100_000), "malformed JSON: nested"),
    ("shallow nesting", _with_receiver(b"[" * 50 + b"]" * 50), "receiver: must be a string"),
    ("digits", _with_receiver(b"9" * 5000), "malformed JSON: Exceeds the limit"),
    ("cut short", _encoded(body())[:-40], "malformed JSON: "),
    ("trailing data", _encoded(body()) + b"{}", "malformed JSON: Extra data"),
    ("array", b"[]", "the body must be a JSON object, got an array"),
    ("null", b"null", "the body must be a JSON object, got null"),
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
