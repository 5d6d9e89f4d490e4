"""Alertmanager webhook payloads (version 4) as plain data.

The receiver validates the JSON and builds these; nothing else sees raw JSON. Timestamps are
Unix seconds; Alertmanager's zero time (0001-01-01T00:00:00Z, "not set") becomes None.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# The label that tells the hook what to do (set by nodesync's alerting rules).
ACTION_LABEL = "nodesync_action"
# The label that names the node an alert is about.
NODE_LABEL = "node"

#: Alert episodes are told apart to the millisecond (see :func:`episode_start`).
EPISODE_PRECISION = 3

FIRING = "firing"
RESOLVED = "resolved"
ALERT_STATUSES = frozenset({FIRING, RESOLVED})


#: Two startsAt of one fingerprint at most this far apart (after rounding) are one episode.
#: Rounding alone is not enough: two writings of one instant less than a millisecond apart
#: (12:00:00.1234996 and 12:00:00.1235) round to neighbouring milliseconds. Alert episodes of
#: one fingerprint start at least a rule evaluation apart (seconds), so nothing else matches.
EPISODE_TOLERANCE = 10.0**-EPISODE_PRECISION + 1e-6


def episode_start(starts_at: float) -> float:
    """An alert's startsAt as part of its episode's identity: rounded to the millisecond, so
    that one episode written with more or fewer fractional digits is still one episode."""
    return round(starts_at, EPISODE_PRECISION)


def same_episode(a: float, b: float) -> bool:
    """Whether two startsAt (of one fingerprint, rounded by episode_start) are one episode."""
    return abs(a - b) <= EPISODE_TOLERANCE


@dataclass(frozen=True, slots=True)
class Alert:
    fingerprint: str
    status: str  # "firing" or "resolved"
    labels: Mapping[str, str]
    starts_at: float
    ends_at: float | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)
    generator_url: str = ""

    @property
    def key(self) -> tuple[str, float]:
        """Identity of one firing episode: Alertmanager re-sends the same fingerprint and
        startsAt with every notification of the group; a new episode has a new startsAt."""
        return (self.fingerprint, self.starts_at)

    @property
    def action(self) -> str:
        return self.labels.get(ACTION_LABEL, "")

    @property
    def node(self) -> str:
        return self.labels.get(NODE_LABEL, "")


@dataclass(frozen=True, slots=True)
class WebhookPayload:
    version: str
    group_key: str
    status: str
    receiver: str
    alerts: tuple[Alert, ...]
    truncated_alerts: int = 0
    group_labels: Mapping[str, str] = field(default_factory=dict)
    common_labels: Mapping[str, str] = field(default_factory=dict)
    common_annotations: Mapping[str, str] = field(default_factory=dict)
    external_url: str = ""
