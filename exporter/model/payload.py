"""Bytes to a WebhookPayload: the webhook's and ``nodesync plan``'s one decoder of an
Alertmanager webhook body (version 4). Pure: anything malformed raises PayloadError, one line
that names the field by its JSON path (``$.alerts[0].startsAt: ...``) and says what is wrong.

The body is decoded and checked in one pass by msgspec against the schema below, which carries
the rules as types and constraints; what a type cannot say is checked after it, each with the
field's path: a fingerprint's hex digits, each timestamp, a startsAt that is set. Fields are
checked in the order they come; a missing one is found at the end of its object.

Required: ``version`` ("4"), ``groupKey``, ``status``, ``receiver``, ``alerts``, and per alert
``status``, ``labels``, ``startsAt``, ``fingerprint``. Optional (Alertmanager sends them; older or
other senders may not): ``truncatedAlerts`` (0), ``groupLabels``, ``commonLabels``,
``commonAnnotations``, an alert's ``annotations`` (empty; ``null`` too, as Go encodes a nil map),
``externalURL``, ``generatorURL`` (""), ``endsAt`` (None). Unknown keys are ignored.
Timestamps are RFC 3339 (as Go writes them: up to nanoseconds, ``Z`` or an offset); Go's zero time
``0001-01-01T00:00:00Z`` means "not set": an ``endsAt`` of a firing alert, never a ``startsAt``.
Sizes are capped so one request cannot make the journal store unbounded data; lengths count
characters (code points).

JSON itself: UTF-8 throughout (checked first, since msgspec skips unknown fields unread), no
NaN or Infinity, no control characters in strings, no lone UTF-16 surrogate (escaped or not,
wherever it is), nested no deeper than the interpreter's recursion limit.
"""

from __future__ import annotations

import calendar
import functools
import re
from typing import Annotated, Final, Literal

import msgspec

from exporter.model.alerts import Alert, WebhookPayload, episode_start
from exporter.model.codec import error_message, lower_first

SUPPORTED_VERSION: Final = "4"
#: More alerts than this in one notification is refused: set the receiver's ``max_alerts``
#: (Alertmanager then sends the first ones and counts the rest in truncatedAlerts).
MAX_ALERTS: Final = 1000
MAX_LABELS: Final = 256  # per label or annotation set
MAX_NAME_LENGTH: Final = 1024  # label and annotation names
MAX_VALUE_LENGTH: Final = 16384  # every other string: values, URLs, groupKey, receiver
MAX_FINGERPRINT_LENGTH: Final = 64
MAX_TIMESTAMP_LENGTH: Final = 64  # startsAt, endsAt
MAX_COUNT: Final = 2**63 - 1  # truncatedAlerts (a signed 64-bit integer in storage)

_TIMESTAMP = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:[Zz]|([+-])(\d{2}):(\d{2}))",
    re.ASCII,
)
FINGERPRINT = re.compile(rf"[0-9a-fA-F]{{1,{MAX_FINGERPRINT_LENGTH}}}", re.ASCII)
#: Go's zero time.Time, 0001-01-01T00:00:00Z, in Unix seconds.
ZERO_TIME: Final[int] = calendar.timegm((1, 1, 1, 0, 0, 0))


class PayloadError(Exception):
    """The body is not a valid Alertmanager webhook payload; the message says where and why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# ---------------------------------------------------------------- the schema

_Name = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME_LENGTH)]
_Value = Annotated[str, msgspec.Meta(max_length=MAX_VALUE_LENGTH)]
_Map = Annotated[dict[_Name, _Value], msgspec.Meta(max_length=MAX_LABELS)]
_Time = Annotated[str, msgspec.Meta(max_length=MAX_TIMESTAMP_LENGTH)]
Status = Literal["firing", "resolved"]  # exporter.model.alerts.ALERT_STATUSES


class WireAlert(
    msgspec.Struct,
    frozen=True,
    gc=False,
    rename={"starts_at": "startsAt", "ends_at": "endsAt", "generator_url": "generatorURL"},
):
    """One alert as Alertmanager writes it."""

    fingerprint: Annotated[str, msgspec.Meta(max_length=MAX_FINGERPRINT_LENGTH)]
    status: Status
    labels: _Map
    starts_at: _Time
    ends_at: _Time | None = None
    annotations: _Map | None = None
    generator_url: _Value = ""


class WireBody(
    msgspec.Struct,
    frozen=True,
    gc=False,
    rename={
        "group_key": "groupKey",
        "truncated_alerts": "truncatedAlerts",
        "group_labels": "groupLabels",
        "common_labels": "commonLabels",
        "common_annotations": "commonAnnotations",
        "external_url": "externalURL",
    },
):
    """The body as Alertmanager writes it."""

    version: Literal["4"]  # SUPPORTED_VERSION
    group_key: _Value
    status: Status
    receiver: _Value
    alerts: Annotated[list[WireAlert], msgspec.Meta(max_length=MAX_ALERTS)]
    truncated_alerts: Annotated[int, msgspec.Meta(ge=0, le=MAX_COUNT)] = 0
    group_labels: _Map | None = None
    common_labels: _Map | None = None
    common_annotations: _Map | None = None
    external_url: _Value = ""


_DECODER = msgspec.json.Decoder(WireBody)
_TOO_MANY = f"$.alerts: expected `array` of length <= {MAX_ALERTS}"
_OTHER_VERSION = "$.version: invalid enum value "


# ---------------------------------------------------------------- decoding


def decode_payload(raw: bytes) -> WebhookPayload:
    """A WebhookPayload from a request body; PayloadError (one line, naming the field's path)
    for anything that is not a valid version-4 payload in UTF-8 JSON."""
    if not raw.isascii():
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PayloadError(
                f"malformed JSON: not UTF-8: {exc.reason} at byte {exc.start}"
            ) from None
    try:
        body = _DECODER.decode(raw)
    except msgspec.ValidationError as exc:
        raise PayloadError(_worded(error_message(exc))) from None
    except msgspec.DecodeError as exc:
        text = str(exc).removeprefix("JSON is malformed: ")
        raise PayloadError(f"malformed JSON: {lower_first(text)}") from None
    except RecursionError:
        raise PayloadError("malformed JSON: nested too deeply") from None
    return WebhookPayload(
        version=body.version,
        group_key=body.group_key,
        status=body.status,
        receiver=body.receiver,
        alerts=tuple(_alert(wire, f"$.alerts[{i}]") for i, wire in enumerate(body.alerts)),
        truncated_alerts=body.truncated_alerts,
        group_labels=body.group_labels or {},
        common_labels=body.common_labels or {},
        common_annotations=body.common_annotations or {},
        external_url=body.external_url,
    )


def _worded(message: str) -> str:
    """The two refusals a sender can act on, said so."""
    if message == _TOO_MANY:
        return f"{message}: set max_alerts on the Alertmanager receiver"
    if message.startswith(_OTHER_VERSION):
        version = message.removeprefix(_OTHER_VERSION)  # quoted
        if len(version) > 66:
            version = f"{version[:65]}...'"
        return f"$.version: {version} is not supported (only '{SUPPORTED_VERSION}')"
    return message


def _alert(wire: WireAlert, path: str) -> Alert:
    if FINGERPRINT.fullmatch(wire.fingerprint) is None:
        raise PayloadError(f"{path}.fingerprint: must be hexadecimal, got {wire.fingerprint!r}")
    starts_at = _timestamp(wire.starts_at, f"{path}.startsAt")
    if starts_at is None:
        raise PayloadError(f"{path}.startsAt: not set (the zero time)")
    return Alert(
        fingerprint=wire.fingerprint,
        status=wire.status,
        labels=wire.labels,
        # One episode, one key, however precisely a sender writes its start: Alertmanager keeps
        # nanoseconds, an alert pushed again through its API may come back with fewer digits.
        starts_at=episode_start(starts_at),
        ends_at=None if wire.ends_at is None else _timestamp(wire.ends_at, f"{path}.endsAt"),
        annotations=wire.annotations or {},
        generator_url=wire.generator_url,
    )


def _timestamp(text: str, path: str) -> float | None:
    try:
        return parse_time(text)
    except BadTime as exc:
        raise PayloadError(f"{path}: {exc}") from None


# ---------------------------------------------------------------- timestamps


class BadTime(ValueError):
    """What is wrong with a timestamp's text (the caller names the field)."""


@functools.lru_cache(maxsize=4096)
def parse_time(text: str) -> float | None:
    """Unix seconds, or None for Go's zero time; BadTime if ``text`` is none. Memoized:
    Alertmanager sends the same few startsAt and endsAt again in every notification of a group."""
    match = _TIMESTAMP.fullmatch(text)
    if match is None:
        raise BadTime(f"not an RFC 3339 timestamp: {text!r}")
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction, sign, off_hours, off_minutes = match.groups()[6:]
    if not (year >= 1 and 1 <= month <= 12 and 1 <= day <= calendar.monthrange(year, month)[1]):
        raise BadTime(f"no such date: {text!r}")
    if hour > 23 or minute > 59 or second > 59:
        raise BadTime(f"no such time: {text!r}")
    offset = 0
    if sign is not None:
        if int(off_hours) > 23 or int(off_minutes) > 59:
            raise BadTime(f"bad UTC offset: {text!r}")
        offset = (int(off_hours) * 3600 + int(off_minutes) * 60) * (1 if sign == "+" else -1)
    whole: int = calendar.timegm((year, month, day, hour, minute, second)) - offset
    if whole == ZERO_TIME and not (fraction and int(fraction)):
        return None
    if fraction:
        return whole + int(fraction) / float(10 ** len(fraction))
    return float(whole)
