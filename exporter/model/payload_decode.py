"""Bytes to a WebhookPayload: the webhook's and ``nodesync plan``'s one decoder.

A well-formed body is decoded and checked in one pass by msgspec: the payload's schema (below)
carries the rules of :mod:`exporter.model.payload` as types and constraints, so that a delivery
of 100 alerts is read on the event loop in about half the time of decoding it with ``json.loads``
and checking the result in Python (docs/performance.md). What is
left over is checked here (a fingerprint's digits, each timestamp, a startsAt that is set). At
the first doubt (msgspec refuses the body, or a check here fails) the body goes to
:func:`exporter.model.payload.checked_payload`, which decides again field by field, in order,
and says what is wrong: the messages are that path's, and the fast path accepts nothing the
checked one refuses (tests/model/test_payload_decode.py), only sooner.

msgspec decodes JSON itself; what it would not check where ``json.loads`` does, is checked
first: the whole body must be UTF-8 (msgspec skips unknown fields unread). Both refuse NaN,
Infinity and control characters in strings, lone UTF-16 surrogates (msgspec at once, the
checked path by its surrogate check), and bodies nested deeper than the interpreter's recursion
limit, within a few levels of each other. One difference is kept: an integer of more than 4,300
digits (Python's limit on converting them) in a field nodesync does not read refuses the body on
the checked path only, and the fast path does not read that field.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from exporter.model.alerts import Alert, WebhookPayload, episode_start
from exporter.model.payload import (
    FINGERPRINT,
    MAX_ALERTS,
    MAX_COUNT,
    MAX_FINGERPRINT_LENGTH,
    MAX_LABELS,
    MAX_NAME_LENGTH,
    MAX_TIMESTAMP_LENGTH,
    MAX_VALUE_LENGTH,
    BadTime,
    checked_payload,
    parse_time,
)

_Name = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME_LENGTH)]
_Value = Annotated[str, msgspec.Meta(max_length=MAX_VALUE_LENGTH)]
_Map = Annotated[dict[_Name, _Value], msgspec.Meta(max_length=MAX_LABELS)]
_Time = Annotated[str, msgspec.Meta(max_length=MAX_TIMESTAMP_LENGTH)]
_Status = Literal["firing", "resolved"]  # exporter.model.alerts.ALERT_STATUSES


class _WireAlert(
    msgspec.Struct,
    frozen=True,
    gc=False,
    rename={"starts_at": "startsAt", "ends_at": "endsAt", "generator_url": "generatorURL"},
):
    fingerprint: Annotated[str, msgspec.Meta(max_length=MAX_FINGERPRINT_LENGTH)]
    status: _Status
    labels: _Map
    starts_at: _Time
    ends_at: _Time | None = None
    annotations: _Map | None = None
    generator_url: _Value = ""


class _WireBody(
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
    version: Literal["4"]  # exporter.model.payload.SUPPORTED_VERSION
    group_key: _Value
    status: _Status
    receiver: _Value
    alerts: Annotated[list[_WireAlert], msgspec.Meta(max_length=MAX_ALERTS)]
    truncated_alerts: Annotated[int, msgspec.Meta(ge=0, le=MAX_COUNT)] = 0
    group_labels: _Map | None = None
    common_labels: _Map | None = None
    common_annotations: _Map | None = None
    external_url: _Value = ""


_DECODER = msgspec.json.Decoder(_WireBody)


def decode_payload(raw: bytes) -> WebhookPayload:
    """A WebhookPayload from a request body; PayloadError (one line, naming the field) for
    anything that is not a valid version-4 payload in UTF-8 JSON."""
    return well_formed(raw) or checked_payload(raw)


def well_formed(raw: bytes) -> WebhookPayload | None:
    """The payload when the body is well formed throughout, else None."""
    if not raw.isascii():
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
    try:
        body = _DECODER.decode(raw)
    except (msgspec.DecodeError, RecursionError):  # ValidationError is a DecodeError
        return None
    alerts = []
    for wire in body.alerts:
        alert = _alert(wire)
        if alert is None:
            return None
        alerts.append(alert)
    return WebhookPayload(
        version=body.version,
        group_key=body.group_key,
        status=body.status,
        receiver=body.receiver,
        alerts=tuple(alerts),
        truncated_alerts=body.truncated_alerts,
        group_labels=body.group_labels or {},
        common_labels=body.common_labels or {},
        common_annotations=body.common_annotations or {},
        external_url=body.external_url,
    )


def _alert(wire: _WireAlert) -> Alert | None:
    if FINGERPRINT.fullmatch(wire.fingerprint) is None:
        return None
    try:
        starts_at = parse_time(wire.starts_at)
        ends_at = None if wire.ends_at is None else parse_time(wire.ends_at)
    except BadTime:
        return None
    if starts_at is None:  # Go's zero time: not set
        return None
    return Alert(
        fingerprint=wire.fingerprint,
        status=wire.status,
        labels=wire.labels,
        starts_at=episode_start(starts_at),
        ends_at=ends_at,
        annotations=wire.annotations or {},
        generator_url=wire.generator_url,
    )
