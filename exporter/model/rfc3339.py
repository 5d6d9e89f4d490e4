"""The API server's times as text: ``Time`` (RFC 3339, whole seconds) and ``MicroTime`` (RFC 3339
with microseconds, e.g. a Lease's renewTime), to and from Unix seconds. Pure."""

from __future__ import annotations

from datetime import UTC, datetime


def format_time(seconds: float) -> str:
    """``2024-05-01T12:00:00Z``: a ``metav1.Time`` (the fraction is dropped, as the API does)."""
    return datetime.fromtimestamp(int(seconds), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(seconds: float) -> str:
    """``2024-05-01T12:00:00.123456Z``: a ``metav1.MicroTime``."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: object) -> float | None:
    """Unix seconds from an RFC 3339 time (any precision, any offset; none means UTC), or None
    when ``text`` is not one."""
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()
