"""How each decided alert episode ended, counted once: after each of the leader's passes, the
resolved alerts of the journal whose outcome is not written yet are judged
(exporter.model.outcomes) with the NodeRollback they made or joined, and each outcome known is
written into the journal's decision, then counted in ``nodesync_alert_episodes_total``.

The end is known from Alertmanager's resolved notification (``send_resolved``, on in the
shipped route), which the journal records once per episode, and, for an episode a rollback ran
for, from that rollback's end. Writing the outcome is a conditional update (only where none is
written): a retried or duplicated notification changes nothing, and a pass that runs again, or
a restart, counts nothing twice. The journal is one replica's: an episode is counted by the
replica that led when it ended, from its own journal; after a failover, an episode both
replicas decided in turn can be counted by each (the sum over replicas then counts it twice).
"""

from __future__ import annotations

import logging

from exporter.controller.journal import AlertKey, DecisionRecord, Journal
from exporter.controller.journal.records import AlertRecord
from exporter.controller.rollbacks import RollbackWatch
from exporter.metrics.rollback import RollbackMetrics
from exporter.model.outcomes import Episode, outcome
from exporter.model.rollback import Action

log = logging.getLogger(__name__)

#: The outcome written for an end that is not counted: an alert of no action rule, or a
#: rollback deleted before its end was seen.
NOT_COUNTED = ""


class Episodes:
    def __init__(
        self,
        journal: Journal,
        rollbacks: RollbackWatch,
        metrics: RollbackMetrics,
        clear_within: float,
    ) -> None:
        self._journal = journal
        self._rollbacks = rollbacks
        self._metrics = metrics
        self._clear_within = clear_within
        #: The guard's reason each alert waited under before it resolved undecided (the
        #: intake notes it when it refuses the alert as resolved; kept in memory only).
        self.waited: dict[AlertKey, str] = {}

    def decided(self, record: AlertRecord) -> None:
        """An alert was decided: an action rule's name is exported from now on."""
        if record.alert.action not in ("", Action.NONE.value):
            self._metrics.rule(record.labels.get("alertname", ""))

    def episode(self, record: AlertRecord, decision: DecisionRecord) -> Episode:
        rollback = self._rollbacks.get(decision.rollback) if decision.rollback else None
        ended = record.ends_at if record.ends_at is not None else record.resolved_at
        return Episode(
            action=record.alert.action,
            decided_at=decision.decided_at,
            resolved_at=ended,
            verdict=decision.verdict,
            reason=decision.reason,
            waited=self.waited.get(record.key, ""),
            phase=rollback.status.phase if rollback is not None else None,
            rollback_reason=rollback.status.reason if rollback is not None else "",
        )

    async def close(self) -> int:
        """Write and count the outcome of every episode whose end is known; how many were
        counted."""
        counted = 0
        for record, decision in await self._journal.ended_episodes():
            episode = self.episode(record, decision)
            result = outcome(episode, self._clear_within)
            if result is None:
                if not self._untold(episode, decision):
                    continue  # it goes on: judged again at the next pass
                result = NOT_COUNTED
            new = await self._journal.write_outcome(record.key, result)
            self.waited.pop(record.key, None)
            if not new or result == NOT_COUNTED:
                continue
            alertname = record.labels.get("alertname", "")
            self._metrics.episode(alertname, result)
            counted += 1
            log.info(
                "an alert episode ended",
                extra={"alertname": alertname, "node": record.alert.node, "outcome": result},
            )
        return counted

    def _untold(self, episode: Episode, decision: DecisionRecord) -> bool:
        """An ended episode that has no outcome and never will: of no action rule, or whose
        rollback is not in the cluster once the watch has listed them (deleted)."""
        if episode.action in ("", Action.NONE.value):
            return True
        return bool(decision.rollback) and episode.phase is None and self._rollbacks.synced
