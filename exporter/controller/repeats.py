"""Cleanups of orphans repeated for drift that outlives them.

An alert episode is decided once, and a drift alert keeps its episode while its drift lasts:
drift that appeared during a cleanup, or came back after it, would never be cleaned. So each
pass of the intake also looks at the episodes whose last cleanup of orphans succeeded
(exporter.model.decision.cleanups_to_repeat) and whose alert Alertmanager sent again, still
firing, at least ``after`` (10 minutes) after the node's last cleanup finished: it gets another,
decided as a new rollback (the guards, one per node), named after the episode and which cleanup
of it this is, so that two replicas make the same one. Its record is the NodeRollback: the
journal keeps the episode's one decision. One that would join an active rollback, or that a
guard refuses, is looked at again at the next pass (docs/cleanup.md).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from exporter.controller.journal import AlertRecord, Journal
from exporter.controller.rollbacks import RollbackWatch
from exporter.model.alerts import FIRING
from exporter.model.clusterview import ClusterView
from exporter.model.decision import (
    PLAN,
    REPEAT_CLEANUP_AFTER,
    cleanups_to_repeat,
    decide,
    new_rollback,
)
from exporter.model.guards import GuardPolicy, GuardState
from exporter.model.rollback import Action, NodeRollback

__all__ = ["REPEAT_CLEANUP_AFTER", "Repeats", "repeat_cleanups"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Repeats:
    """What repeating a cleanup needs: the journal (was the alert seen since?), the
    NodeRollbacks, the policy, and how the intake creates a NodeRollback."""

    journal: Journal
    rollbacks: RollbackWatch
    policy: GuardPolicy
    create: Callable[[AlertRecord, NodeRollback], Awaitable[NodeRollback | None]]
    identity: str
    after: float = REPEAT_CLEANUP_AFTER


async def repeat_cleanups(
    repeats: Repeats, view: ClusterView, state: GuardState, now: float
) -> list[NodeRollback]:
    """Create the cleanups to repeat now; the NodeRollbacks created."""
    created: list[NodeRollback] = []
    for repeat in cleanups_to_repeat(repeats.rollbacks.all(), now, repeats.after):
        trigger = repeat.trigger
        alert = await repeats.journal.alert((trigger.fingerprint, trigger.starts_at))
        if (
            alert is None
            or alert.status != FIRING
            or alert.alert.action != Action.CLEANUP_ORPHANS.value
            or alert.last_seen_at < repeat.since + repeats.after
        ):
            continue
        decision = decide(alert.alert, view, state, repeats.policy, now)
        if decision.verdict != PLAN or decision.plan is None:
            continue
        plan = decision.plan
        rollback = new_rollback(
            plan,
            view,
            state,
            repeats.policy,
            now,
            decided_by=repeats.identity,
            attempt=repeat.attempt,
        )
        state.accept(rollback.name, plan, now)
        log.info(
            "the alert still fires after its cleanup: cleaning up again",
            extra={"alert": alert.fingerprint, "after": repeat.last.name},
        )
        again = await repeats.create(alert, rollback)
        if again is not None:
            created.append(again)
    return created
