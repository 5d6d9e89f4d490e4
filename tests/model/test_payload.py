"""Alertmanager webhook bodies (version 4) → WebhookPayload, and PayloadError naming the field for
anything malformed. Property: whatever JSON arrives, the only exception is PayloadError."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.model.alerts import Alert, WebhookPayload
from exporter.model.payload import MAX_ALERTS, PayloadError, parse_payload
from exporter.model.payload_decode import decode_payload
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
    _parses_or_refuses(damaged(changes))


@pytest.mark.parametrize(("data", "message"), [c[1:] for c in RAW], ids=[c[0] for c in RAW])
def test_bodies_damaged_below_json_are_one_line_payload_errors(data: bytes, message: str) -> None:
    with pytest.raises(PayloadError) as raised:
        decode_payload(data)
    assert raised.value.message.startswith(message), raised.value.message
    assert "\n" not in raised.value.message
    assert len(raised.value.message) < 300


@pytest.mark.parametrize("data", [c[1] for c in NAMES], ids=[c[0] for c in NAMES])
def test_names_are_not_the_parser_s_business(data: bytes) -> None:
    assert decode_payload(data).alerts  # judged per alert by the planner, not here


def test_decode_accepts_what_alertmanager_posts() -> None:
    assert decode_payload(json.dumps(AM_BODY).encode()) == parse_payload(body())
