"""The one-pass decoder (exporter.model.payload_decode) against the field-by-field one
(exporter.model.payload.checked_payload): whatever the body, the fast path either gives up or
gives exactly the payload the checked path gives; it never accepts what the checked path refuses.
And it does not give up on what Alertmanager sends."""

from __future__ import annotations

import json
from typing import get_args, get_type_hints

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.model.alerts import ALERT_STATUSES, WebhookPayload
from exporter.model.payload import (
    MAX_LABELS,
    MAX_NAME_LENGTH,
    MAX_VALUE_LENGTH,
    SUPPORTED_VERSION,
    PayloadError,
    checked_payload,
)
from exporter.model.payload_decode import _Status, _WireBody, decode_payload, well_formed
from tests.model.payload_corpus import AM_BODY, JSON, NAMES, PATHS, RAW, damaged


def _checked(raw: bytes) -> WebhookPayload | str:
    try:
        return checked_payload(raw)
    except PayloadError as exc:
        return exc.message


def _agree(raw: bytes) -> WebhookPayload | None:
    """The property: the fast path's payload is the checked path's, or there is none."""
    fast = well_formed(raw)
    if fast is not None:
        assert _checked(raw) == fast, "the fast path accepted what the checked one reads otherwise"
    return fast


def test_what_alertmanager_posts_takes_the_fast_path() -> None:
    raw = json.dumps(AM_BODY).encode()
    fast = well_formed(raw)
    assert fast is not None
    assert fast == checked_payload(raw)
    assert decode_payload(raw) == fast


@pytest.mark.parametrize("data", [c[1] for c in NAMES], ids=[c[0] for c in NAMES])
def test_valid_bodies_of_the_corpus_take_the_fast_path(data: bytes) -> None:
    assert _agree(data) is not None


@pytest.mark.parametrize(("data", "message"), [c[1:] for c in RAW], ids=[c[0] for c in RAW])
def test_bodies_damaged_below_json_are_left_to_the_checked_path(data: bytes, message: str) -> None:
    assert well_formed(data) is None
    with pytest.raises(PayloadError) as raised:
        decode_payload(data)
    assert raised.value.message.startswith(message)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(PATHS), JSON | st.just(...)), min_size=1, max_size=3))
def test_a_damaged_body_is_read_alike_or_left_to_the_checked_path(
    changes: list[tuple[str, object]],
) -> None:
    _agree(json.dumps(damaged(changes)).encode())


_TEXT = st.text(max_size=4) | st.sampled_from(
    [
        "",
        "\ud800",  # lone surrogates
        "a\udfff",
        "\U0001f600" * 3,  # outside the BMP: one character each, two UTF-16 units
        "n" * MAX_NAME_LENGTH,
        "n" * (MAX_NAME_LENGTH + 1),
        "\U0001f600" * MAX_NAME_LENGTH,
        "\U0001f600" * (MAX_NAME_LENGTH + 1),
        "v" * MAX_VALUE_LENGTH,
        "v" * (MAX_VALUE_LENGTH + 1),
        "\u00e9" * MAX_VALUE_LENGTH,
        "\u00e9" * (MAX_VALUE_LENGTH + 1),
        "2026-11-30T01:02:03Z\n",
        "0001-01-01T00:00:00Z",
        "0123456789abcdef\n",
        "0" * 65,
    ]
)
_MAPS = st.dictionaries(_TEXT, _TEXT | st.integers() | st.none(), max_size=4) | st.builds(
    lambda n: {f"k{i}": "v" for i in range(n)}, st.sampled_from([MAX_LABELS, MAX_LABELS + 1])
)
_FIELDS = [p for p in PATHS if not p.endswith(".0") and p != "alerts"]


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(_FIELDS), _TEXT | _MAPS | st.integers() | st.none()),
        min_size=1,
        max_size=3,
    ),
    st.booleans(),
)
def test_strings_and_maps_at_their_limits_are_read_alike(
    changes: list[tuple[str, object]], ascii_only: bool
) -> None:
    """Lengths count characters (code points) on both paths, escaped or sent as UTF-8 (a lone
    surrogate sent unescaped is invalid UTF-8)."""
    text = json.dumps(damaged(changes), ensure_ascii=ascii_only)
    _agree(text.encode("utf-8", "surrogatepass"))


_EMOJI = "\U0001f600"  # one character, two UTF-16 units, four UTF-8 bytes
_LIMITS: list[tuple[str, object]] = [
    ("alerts.0.labels", {"n" * MAX_NAME_LENGTH: "v"}),
    ("alerts.0.labels", {"n" * (MAX_NAME_LENGTH + 1): "v"}),
    ("alerts.0.labels", {_EMOJI * MAX_NAME_LENGTH: "v"}),
    ("alerts.0.labels", {_EMOJI * (MAX_NAME_LENGTH + 1): "v"}),
    ("alerts.0.labels", {"": "v"}),
    ("alerts.0.annotations", {"a": "v" * MAX_VALUE_LENGTH}),
    ("alerts.0.annotations", {"a": "v" * (MAX_VALUE_LENGTH + 1)}),
    ("alerts.0.annotations", {"a": _EMOJI * MAX_VALUE_LENGTH}),
    ("alerts.0.annotations", {"a": _EMOJI * (MAX_VALUE_LENGTH + 1)}),
    ("groupLabels", {f"k{i}": "v" for i in range(MAX_LABELS)}),
    ("groupLabels", {f"k{i}": "v" for i in range(MAX_LABELS + 1)}),
    ("receiver", "r" * MAX_VALUE_LENGTH),
    ("receiver", "r" * (MAX_VALUE_LENGTH + 1)),
    ("alerts.0.fingerprint", "f" * 64),
    ("alerts.0.fingerprint", "f" * 65),
    ("alerts.0.fingerprint", "0123456789abcdef\n"),
    ("alerts.0.fingerprint", "0123456789ABCDEF"),
    ("alerts.0.fingerprint", "g"),
    ("alerts.0.startsAt", "0001-01-01T00:00:00Z"),
    ("alerts.0.startsAt", "2026-11-30T01:02:03Z\n"),
    ("alerts.0.startsAt", "2026-02-30T01:02:03Z"),
    ("alerts.0.startsAt", "2026-11-30T01:02:03.123456789-07:00"),
    ("alerts.0.endsAt", "0001-01-01T00:00:00Z"),
    ("alerts.0.endsAt", None),
    ("alerts.0.endsAt", "x" * 65),
    ("alerts.0.annotations", None),
    ("alerts.0.generatorURL", None),
    ("truncatedAlerts", 2**63 - 1),
    ("truncatedAlerts", 2**63),
    ("truncatedAlerts", True),
    ("truncatedAlerts", 1.0),
    ("version", 4),
]


@pytest.mark.parametrize(("path", "value"), _LIMITS, ids=[f"{p}={v!r:.24}" for p, v in _LIMITS])
@pytest.mark.parametrize("ascii_only", [True, False], ids=["escaped", "utf-8"])
def test_limits_are_the_checked_path_s(path: str, value: object, ascii_only: bool) -> None:
    """At each limit and one past it, both paths take the same bodies, to the same payload."""
    raw = json.dumps(damaged([(path, value)]), ensure_ascii=ascii_only).encode()
    checked = _checked(raw)
    assert (well_formed(raw) is not None) == isinstance(checked, WebhookPayload)
    _agree(raw)


_BYTES = st.sampled_from(
    [b"\xff", b"\xed\xa0\x80", b"\\ud800", b"\x01", b"\x7f", b"NaN", b"1e999", b"\\", b'"', b"}"]
)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_bytes_spliced_anywhere_are_read_alike(data: st.DataObject) -> None:
    raw = json.dumps(AM_BODY).encode()
    at = data.draw(st.integers(0, len(raw)))
    cut = data.draw(st.integers(0, 3))
    piece = data.draw(_BYTES | st.binary(max_size=3))
    _agree(raw[:at] + piece + raw[at + cut :])


def _with_extra(value: bytes, field: str = "extra") -> bytes:
    """Alertmanager's body with ``field`` set to the raw JSON ``value``."""
    return json.dumps({**AM_BODY, field: "@"}).encode().replace(b'"@"', value)


@pytest.mark.parametrize(
    "value",
    [
        b'"\xed\xa0\x80"',  # not UTF-8: msgspec would skip it unread
        b'"\xff"',
        b"NaN",
        b'"\x01"',
        b"[" * 100_000 + b"]" * 100_000,
    ],
)
def test_what_json_refuses_in_a_field_nodesync_does_not_read_is_refused(value: bytes) -> None:
    raw = _with_extra(value)
    assert well_formed(raw) is None
    with pytest.raises(PayloadError):
        decode_payload(raw)


def test_a_lone_surrogate_in_a_field_nodesync_does_not_read_is_accepted() -> None:
    """msgspec refuses an escaped lone surrogate even where it skips; json.loads takes it, and
    the checked path ignores the field: the delivery is accepted, by the checked path."""
    raw = _with_extra(b'"\\ud800"')
    _agree(raw)
    assert decode_payload(raw) == checked_payload(json.dumps(AM_BODY).encode())


def test_a_number_beyond_python_s_digit_limit_in_an_unread_field_is_accepted() -> None:
    """The one difference, documented: json.loads refuses an integer of more than 4300 digits
    anywhere (Python's limit on converting them); the fast path does not read unknown fields,
    so there such a number does not refuse the delivery. In a field nodesync reads it does."""
    digits = b"9" * 5000
    raw = _with_extra(digits)
    assert "Exceeds the limit" in str(_checked(raw))
    assert decode_payload(raw) == checked_payload(json.dumps(AM_BODY).encode())
    with pytest.raises(PayloadError):
        decode_payload(_with_extra(digits, "truncatedAlerts"))


def test_the_schema_states_the_checked_path_s_constants() -> None:
    assert get_args(get_type_hints(_WireBody)["version"]) == (SUPPORTED_VERSION,)
    assert set(get_args(_Status)) == ALERT_STATUSES
