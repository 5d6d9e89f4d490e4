"""Alertmanager webhook bodies (version 4) → WebhookPayload, and PayloadError naming the field by
its JSON path for anything malformed. Property: whatever bytes arrive, the only exception is
PayloadError, one line."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, get_args, get_type_hints

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.model.alerts import ALERT_STATUSES, Alert, WebhookPayload
from exporter.model.payload import (
    MAX_ALERTS,
    MAX_LABELS,
    MAX_NAME_LENGTH,
    MAX_VALUE_LENGTH,
    SUPPORTED_VERSION,
    PayloadError,
    Status,
    WireBody,
    decode_payload,
)
from tests.model.payload_corpus import (
    AM_BODY,
    INVALID,
    JSON,
    NAMES,
    PATHS,
    RAW,
    T0,
    body,
    damaged,
)


def parse_payload(value: object, *, ensure_ascii: bool = True) -> WebhookPayload:
    """The payload of ``value`` sent as JSON."""
    text = json.dumps(value, ensure_ascii=ensure_ascii)
    return decode_payload(text.encode("utf-8", "surrogatepass"))


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


@pytest.mark.parametrize(
    ("mutate", "message"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID]
)
def test_malformed_payloads_name_the_field(
    mutate: Callable[[dict[str, Any]], None], message: str
) -> None:
    b = body()
    mutate(b)
    with pytest.raises(PayloadError) as raised:
        parse_payload(b)
    assert raised.value.message == message
    assert raised.value.message == str(raised.value)


@pytest.mark.parametrize(
    ("value", "got"),
    [(None, "null"), ([], "array"), ("x", "str"), (4, "int"), (True, "bool"), (1.5, "float")],
)
def test_the_body_must_be_an_object(value: object, got: str) -> None:
    with pytest.raises(PayloadError) as raised:
        parse_payload(value)
    assert raised.value.message == f"$: expected `object`, got `{got}`"


def test_as_many_alerts_as_the_cap_are_accepted() -> None:
    b = body()
    b["alerts"] = [AM_BODY["alerts"][0]] * MAX_ALERTS
    assert len(parse_payload(b).alerts) == MAX_ALERTS


def test_the_first_bad_alert_is_named_by_its_index() -> None:
    b = body()
    b["alerts"] = [AM_BODY["alerts"][0]] * 3
    b["alerts"][2] = {**AM_BODY["alerts"][0], "startsAt": "later"}
    with pytest.raises(PayloadError) as raised:
        parse_payload(b)
    assert raised.value.message == "$.alerts[2].startsAt: not an RFC 3339 timestamp: 'later'"


_EMOJI = "\U0001f600"  # one character, two UTF-16 units, four UTF-8 bytes
#: (path, value, accepted): at each limit and one past it.
_LIMITS: list[tuple[str, object, bool]] = [
    ("alerts.0.labels", {"n" * MAX_NAME_LENGTH: "v"}, True),
    ("alerts.0.labels", {"n" * (MAX_NAME_LENGTH + 1): "v"}, False),
    ("alerts.0.labels", {_EMOJI * MAX_NAME_LENGTH: "v"}, True),
    ("alerts.0.labels", {_EMOJI * (MAX_NAME_LENGTH + 1): "v"}, False),
    ("alerts.0.labels", {"": "v"}, False),
    ("alerts.0.annotations", {"a": "v" * MAX_VALUE_LENGTH}, True),
    ("alerts.0.annotations", {"a": "v" * (MAX_VALUE_LENGTH + 1)}, False),
    ("alerts.0.annotations", {"a": _EMOJI * MAX_VALUE_LENGTH}, True),
    ("alerts.0.annotations", {"a": _EMOJI * (MAX_VALUE_LENGTH + 1)}, False),
    ("groupLabels", {f"k{i}": "v" for i in range(MAX_LABELS)}, True),
    ("groupLabels", {f"k{i}": "v" for i in range(MAX_LABELS + 1)}, False),
    ("receiver", "r" * MAX_VALUE_LENGTH, True),
    ("receiver", "r" * (MAX_VALUE_LENGTH + 1), False),
    ("alerts.0.fingerprint", "f" * 64, True),
    ("alerts.0.fingerprint", "f" * 65, False),
    ("alerts.0.fingerprint", "0123456789abcdef\n", False),
    ("alerts.0.fingerprint", "0123456789ABCDEF", True),
    ("alerts.0.fingerprint", "g", False),
    ("alerts.0.startsAt", "0001-01-01T00:00:00Z", False),
    ("alerts.0.startsAt", "2026-11-30T01:02:03Z\n", False),
    ("alerts.0.startsAt", "2026-11-30T01:02:03.123456789-07:00", True),
    ("alerts.0.startsAt", "x" * 65, False),
    ("alerts.0.endsAt", "0001-01-01T00:00:00Z", True),
    ("alerts.0.endsAt", None, True),
    ("alerts.0.annotations", None, True),
    ("alerts.0.generatorURL", None, False),
    ("truncatedAlerts", 2**63 - 1, True),
    ("truncatedAlerts", 2**63, False),
    ("alerts.0.labels", {"node": "\ud800"}, False),
]


@pytest.mark.parametrize(
    ("path", "value", "accepted"), _LIMITS, ids=[f"{p}={v!r:.24}" for p, v, _ in _LIMITS]
)
@pytest.mark.parametrize("ascii_only", [True, False], ids=["escaped", "utf-8"])
def test_limits(path: str, value: object, accepted: bool, ascii_only: bool) -> None:
    """Lengths count characters (code points), escaped or sent as UTF-8; a lone surrogate is
    refused either way (unescaped it is not UTF-8)."""
    b = damaged([(path, value)])
    if accepted:
        assert isinstance(parse_payload(b, ensure_ascii=ascii_only), WebhookPayload)
    else:
        with pytest.raises(PayloadError):
            parse_payload(b, ensure_ascii=ascii_only)


def test_a_number_beyond_python_s_digit_limit_in_an_unread_field_is_accepted() -> None:
    """json.loads would refuse an integer of more than 4300 digits anywhere (Python's limit on
    converting them); msgspec skips a field nodesync does not read. In a field nodesync reads
    it is refused."""
    raw = json.dumps({**AM_BODY, "extra": "@"}).encode().replace(b'"@"', b"9" * 5000)
    assert decode_payload(raw) == parse_payload(body())
    with pytest.raises(PayloadError) as raised:
        decode_payload(raw.replace(b'"truncatedAlerts": 2', b'"truncatedAlerts": ' + b"9" * 5000))
    assert raised.value.message.startswith("$.truncatedAlerts: ")


def test_the_schema_states_the_model_s_constants() -> None:
    assert set(get_args(Status)) == ALERT_STATUSES
    assert get_args(get_type_hints(WireBody)["version"]) == (SUPPORTED_VERSION,)


def _parses_or_refuses(value: object) -> None:
    """``value`` (bytes as sent, or a value sent as JSON) is parsed, or refused in one line."""
    try:
        result = decode_payload(value) if isinstance(value, bytes) else parse_payload(value)
    except PayloadError as exc:
        message = exc.message
    else:
        assert isinstance(result, WebhookPayload)
        # what is accepted can be stored: plain strings that encode as UTF-8
        for a in result.alerts:
            assert a.status in ("firing", "resolved")
            json.dumps(dict(a.labels), ensure_ascii=False).encode()
            json.dumps(dict(a.annotations), ensure_ascii=False).encode()
        return
    assert message, "a PayloadError says what is wrong"
    assert "\n" not in message


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_arbitrary_json_raises_nothing_but_payload_error(value: object) -> None:
    _parses_or_refuses(value)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(PATHS), JSON | st.just(...)), min_size=1, max_size=3))
def test_a_damaged_alertmanager_body_raises_nothing_but_payload_error(
    changes: list[tuple[str, object]],
) -> None:
    _parses_or_refuses(damaged(changes))


@pytest.mark.parametrize(("data", "message"), [c[1:] for c in RAW], ids=[c[0] for c in RAW])
def test_bodies_damaged_below_json_are_one_line_payload_errors(data: bytes, message: str) -> None:
    with pytest.raises(PayloadError) as raised:
        decode_payload(data)
    assert raised.value.message == message
    assert len(raised.value.message) < 300


_BYTES = st.sampled_from(
    [b"\xff", b"\xed\xa0\x80", b"\\ud800", b"\x01", b"\x7f", b"NaN", b"1e999", b"\\", b'"', b"}"]
)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_bytes_spliced_anywhere_raise_nothing_but_a_one_line_payload_error(
    data: st.DataObject,
) -> None:
    raw = json.dumps(AM_BODY).encode()
    at = data.draw(st.integers(0, len(raw)))
    cut = data.draw(st.integers(0, 3))
    piece = data.draw(_BYTES | st.binary(max_size=3))
    _parses_or_refuses(raw[:at] + piece + raw[at + cut :])


@pytest.mark.parametrize("data", [c[1] for c in NAMES], ids=[c[0] for c in NAMES])
def test_names_are_not_the_parser_s_business(data: bytes) -> None:
    assert decode_payload(data).alerts  # judged per alert by the planner, not here


def test_decode_accepts_what_alertmanager_posts_as_it_posts_it() -> None:
    assert decode_payload(json.dumps(AM_BODY, separators=(",", ":")).encode()) == parse_payload(
        body()
    )
