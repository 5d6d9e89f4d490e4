"""What the journal stores and answers: alert, decision and delivery records, what one delivery
changed, the counts the metrics read, and the corrupt journal set aside at open."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from exporter.model.alerts import FIRING, RESOLVED, Alert
from exporter.model.decision import VERDICTS, WAITS

AlertKey = tuple[str, float]

#: A decision's verdict, beyond those of exporter.model.decision: planned in a dry run.
DRY_RUN = "dry_run"
#: The verdicts a decision is stored with (a wait is not a decision: it is decided again).
DECISION_VERDICTS = (*(v for v in VERDICTS if v != WAITS), DRY_RUN)


@dataclass(frozen=True, slots=True)
class SetAside:
    """A corrupt journal found at open, moved to ``moved_to`` (its ``-wal`` and ``-shm``
    files beside it); what could still be read from it was carried into the fresh journal."""

    path: str
    moved_to: str
    error: str
    alerts: int
    decisions: int
    deliveries: int


@dataclass(frozen=True, slots=True)
class RecordResult:
    """What one delivery changed. ``new``: alert keys seen for the first time (``new_firing`` of
    them firing); ``duplicates``: copies of known alerts that changed nothing; ``resolved``:
    alerts that became resolved (known or new); ``truncated``: the payload's truncatedAlerts."""

    new: int
    duplicates: int
    resolved: int
    truncated: int
    new_firing: int = 0


@dataclass(frozen=True, slots=True)
class AlertRecord:
    fingerprint: str
    starts_at: float
    status: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    received_at: float
    last_seen_at: float
    resolved_at: float | None
    ends_at: float | None = None
    generator_url: str = ""

    @property
    def key(self) -> AlertKey:
        return (self.fingerprint, self.starts_at)

    @property
    def alert(self) -> Alert:
        return Alert(
            fingerprint=self.fingerprint,
            status=self.status,
            labels=self.labels,
            starts_at=self.starts_at,
            ends_at=self.ends_at,
            annotations=self.annotations,
            generator_url=self.generator_url,
        )


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """What was decided about one alert episode: the verdict (exporter.model.decision's, or
    ``dry_run``), the refusal's reason and detail, the NodeRollback it made or joined."""

    alert_key: AlertKey
    verdict: str
    reason: str
    detail: str
    rollback: str
    node: str
    action: str
    decided_at: float
    wave: str = ""


@dataclass(frozen=True, slots=True)
class DeliveryRecord:
    """The audit row of one accepted webhook call."""

    id: int
    received_at: float
    group_key: str
    receiver: str
    status: str
    alerts: int
    truncated: int
    new: int
    duplicates: int
    resolved: int


@dataclass(frozen=True, slots=True)
class JournalCounts:
    """Alerts by status (``firing``, ``resolved``), decisions by verdict (every verdict),
    deliveries."""

    alerts: Mapping[str, int]
    decisions: Mapping[str, int]
    deliveries: int


EMPTY_COUNTS = JournalCounts(
    alerts={FIRING: 0, RESOLVED: 0}, decisions=dict.fromkeys(DECISION_VERDICTS, 0), deliveries=0
)
