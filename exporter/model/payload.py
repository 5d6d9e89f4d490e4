"""Validate an Alertmanager webhook body (version 4, already decoded from JSON) into a
WebhookPayload. Pure: anything malformed raises PayloadError saying which field and what is wrong.

Required: ``version`` ("4"), ``groupKey``, ``status``, ``receiver``, ``alerts``, and per alert
``status``, ``labels``, ``startsAt``, ``fingerprint``. Optional (Alertmanager sends them; older or
other senders may not): ``truncatedAlerts`` (0), ``groupLabels``, ``commonLabels``,
``commonAnnotations``, an alert's ``annotations`` (empty; ``null`` too, as Go encodes a nil map),
``externalURL``, ``generatorURL`` (""), ``endsAt`` (None). Unknown keys are ignored.
Timestamps are RFC 3339 (as Go writes them: up to nanoseconds, ``Z`` or an offset); Go's zero time
``0001-01-01T00:00:00Z`` means "not set": an ``endsAt`` of a firing alert, never a ``startsAt``.
Sizes are capped so one request cannot make the journal store unbounded data.

:func:`checked_payload` decodes bytes this way: UTF-8 JSON (no NaN or Infinity, nesting
bounded), then :func:`parse_payload`, each field in order, the first fault named. The webhook and
``nodesync plan`` call :func:`exporter.model.payload_decode.decode_payload`, which reads a
well-formed body in one pass with the same rules and hands anything else to this module.
"""

from __future__ import annotations

import calendar
import functools
import json
import re
from collections.abc import Mapping
from typing import Final, NoReturn

from exporter.model.alerts import ALERT_STATUSES, Alert, WebhookPayload, episode_start

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
_SURROGATE = re.compile("[\ud800-\udfff]")
#: Go's zero time.Time, 0001-01-01T00:00:00Z, in Unix seconds.
ZERO_TIME: Final[int] = calendar.timegm((1, 1, 1, 0, 0, 0))
_MISSING: Final = object()


class PayloadError(Exception):
    """The body is not a valid Alertmanager webhook payload; the message says why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _get(obj: Mapping[str, object], key: str, path: str) -> object:
    value = obj.get(key, _MISSING)
    if value is _MISSING:
        raise PayloadError(f"{path}{key}: missing")
    return value


def _string(value: object, where: str, *, max_length: int = MAX_VALUE_LENGTH) -> str:
    if not isinstance(value, str):
        raise PayloadError(f"{where}: must be a string, got {_type_name(value)}")
    if len(value) > max_length:
        raise PayloadError(f"{where}: longer than {max_length} characters ({len(value)})")
    if _SURROGATE.search(value):
        raise PayloadError(f"{where}: contains an unpaired UTF-16 surrogate")
    return value


def _optional_string(obj: Mapping[str, object], key: str, path: str) -> str:
    value = obj.get(key, "")
    return _string(value, f"{path}{key}")


def _status(value: object, where: str) -> str:
    status = _string(value, where)
    if status not in ALERT_STATUSES:
        raise PayloadError(f"{where}: must be 'firing' or 'resolved', got {status[:64]!r}")
    return status


def _string_map(value: object, where: str, *, optional: bool) -> dict[str, str]:
    if value is None and optional:
        return {}
    if not isinstance(value, dict):
        raise PayloadError(f"{where}: must be an object of strings, got {_type_name(value)}")
    if len(value) > MAX_LABELS:
        raise PayloadError(f"{where}: more than {MAX_LABELS} entries ({len(value)})")
    result: dict[str, str] = {}
    for name, item in value.items():
        # json.loads only makes string keys; a caller's dict may not
        if not isinstance(name, str) or not name:
            raise PayloadError(f"{where}: names must be non-empty strings, got {name!r:.64}")
        _string(name, f"{where}: name {name[:64]!r}", max_length=MAX_NAME_LENGTH)
        result[name] = _string(item, f"{where}[{name[:64]!r}]")
    return result


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


def _timestamp(value: object, where: str) -> float | None:
    """Unix seconds, or None for Go's zero time."""
    text = _string(value, where, max_length=MAX_TIMESTAMP_LENGTH)
    try:
        return parse_time(text)
    except BadTime as exc:
        raise PayloadError(f"{where}: {exc}") from None


def _count(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PayloadError(f"{where}: must be an integer, got {_type_name(value)}")
    if not 0 <= value <= MAX_COUNT:
        raise PayloadError(f"{where}: out of range: {value}")
    return value


def _checked_alert(value: object, index: int) -> Alert:
    """The alert, every field checked in order: the first fault found is the one raised."""
    path = f"alerts[{index}]."
    if not isinstance(value, dict):
        raise PayloadError(f"alerts[{index}]: must be an object, got {_type_name(value)}")
    fingerprint = _string(
        _get(value, "fingerprint", path), f"{path}fingerprint", max_length=MAX_FINGERPRINT_LENGTH
    )
    if not FINGERPRINT.fullmatch(fingerprint):
        raise PayloadError(f"{path}fingerprint: must be hexadecimal, got {fingerprint!r}")
    starts_at = _timestamp(_get(value, "startsAt", path), f"{path}startsAt")
    if starts_at is None:
        raise PayloadError(f"{path}startsAt: not set (the zero time)")
    # One episode, one key, however precisely a sender writes its start: Alertmanager keeps
    # nanoseconds, an alert pushed again through its API may come back with fewer digits.
    starts_at = episode_start(starts_at)
    ends = value.get("endsAt")
    return Alert(
        fingerprint=fingerprint,
        status=_status(_get(value, "status", path), f"{path}status"),
        labels=_string_map(_get(value, "labels", path), f"{path}labels", optional=False),
        starts_at=starts_at,
        ends_at=None if ends is None else _timestamp(ends, f"{path}endsAt"),
        annotations=_string_map(value.get("annotations"), f"{path}annotations", optional=True),
        generator_url=_optional_string(value, "generatorURL", path),
    )


def parse_payload(body: object) -> WebhookPayload:
    """A WebhookPayload from a decoded JSON body; PayloadError if it is not a valid one."""
    if not isinstance(body, dict):
        raise PayloadError(f"the body must be a JSON object, got {_type_name(body)}")
    version = _get(body, "version", "")
    if version != SUPPORTED_VERSION:
        shown = repr(version[:64]) if isinstance(version, str) else _type_name(version)
        raise PayloadError(f"version: {shown} is not supported (only '{SUPPORTED_VERSION}')")
    alerts = _get(body, "alerts", "")
    if not isinstance(alerts, list):
        raise PayloadError(f"alerts: must be an array, got {_type_name(alerts)}")
    if len(alerts) > MAX_ALERTS:
        raise PayloadError(
            f"alerts: {len(alerts)} alerts, more than {MAX_ALERTS}: set max_alerts on the "
            "Alertmanager receiver"
        )
    return WebhookPayload(
        version=version,
        group_key=_string(_get(body, "groupKey", ""), "groupKey"),
        status=_status(_get(body, "status", ""), "status"),
        receiver=_string(_get(body, "receiver", ""), "receiver"),
        alerts=tuple(_checked_alert(a, i) for i, a in enumerate(alerts)),
        truncated_alerts=_count(body.get("truncatedAlerts", 0), "truncatedAlerts"),
        group_labels=_string_map(body.get("groupLabels"), "groupLabels", optional=True),
        common_labels=_string_map(body.get("commonLabels"), "commonLabels", optional=True),
        common_annotations=_string_map(
            body.get("commonAnnotations"), "commonAnnotations", optional=True
        ),
        external_url=_optional_string(body, "externalURL", ""),
    )


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def checked_payload(raw: bytes) -> WebhookPayload:
    """A WebhookPayload from a request body, every field checked in order; PayloadError for
    anything else: not UTF-8, not JSON (NaN and Infinity are not JSON), nested deeper than the
    decoder goes, or not a valid version-4 payload. The message is one line."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PayloadError(f"malformed JSON: not UTF-8: {exc.reason} at byte {exc.start}") from None
    try:
        body = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise PayloadError("malformed JSON: nested too deeply") from None
    except ValueError as exc:
        raise PayloadError(f"malformed JSON: {exc}") from None
    return parse_payload(body)
