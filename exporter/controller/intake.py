"""The leader's intake: every firing alert in the journal that has no decision yet is decided
(exporter.model.decision) against the cluster view and the NodeRollbacks in the cluster, and
the decision carried out:

- plan: a new NodeRollback (its name derives from the decision, so a second writer deciding
  the same thing gets AlreadyExists and takes the existing one as its own);
- join: the alert is added to the triggers of the node's active rollback;
- escalate: the node's active rollback takes the stronger action (its spec changes; the
  executor replans it at its next step) and the alert joins it;
- a join or an escalation of a rollback that ended meanwhile (the watch had not shown it yet;
  the write, made at the resourceVersion read, finds it out) is not made: a rollback that
  ended takes no more alerts, and the alert is judged again, as a new rollback; unless that
  rollback deleted the node (or found it gone): then the alert is refused (``unknown_node``),
  though the watch of the nodes may still show the node;
- refused: recorded in the journal with a Warning Event on the node;
- waits: reported once (metric, Event) and decided again at the next pass.

After each pass the intake finds which guard holds each firing action alert that has no
rollback running (refused, waiting, or decided in a dry run: exporter.model.holds), for
``nodesync_alert_held`` and a status line logged when a hold begins; then it counts how each
episode that ended meanwhile ended (exporter.controller.episodes).

Each pass also repeats the cleanup of orphans of an alert episode still firing well after its
last cleanup succeeded (exporter.controller.repeats): drift that outlived it.

Fencing first: a pass carries out the accepted decisions (plan, join, escalate) as it makes
them, and once every accepted alert of the pass is carried out, hands each NodeRollback it
created to the executor (``decide`` yields them), so that their cordons are under way before
anything else of the pass is written. No rollback is driven before the other accepted alerts
of its pass are decided: an escalation in the same delivery changes the rollback before its
first step, rather than after the weaker action asked for a cleanup. Refusals and waits are
decided in the same order but recorded after the last NodeRollback was handed over (journal,
metric, log), and their Events go through the ``EventLane``: written last, at the lowest write
priority, by a task of their own (exporter.controller.audit).

The decision is saved in the journal after its effect in the cluster, so an alert whose
NodeRollback could not be created is decided again; one that was created and whose decision
was not saved (a crash in between) finds its rollback active and joins it.

With ``--rollback.dry-run`` nothing is written to the API server: the NodeRollback a plan would
create is logged, the decision saved as ``dry_run``, and the dry-run decisions count against the
budget of later ones as real rollbacks would.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Protocol

from exporter.controller.audit import Audit, EventLane, alert_event_key
from exporter.controller.episodes import Episodes
from exporter.controller.journal import DRY_RUN, AlertRecord, DecisionRecord, Journal
from exporter.controller.repeats import REPEAT_CLEANUP_AFTER, Repeats, repeat_cleanups
from exporter.controller.rollbacks import RollbackWatch
from exporter.controller.settings import ExecutorSettings
from exporter.kube.errors import AlreadyExists
from exporter.kube.noderollbacks import RollbackWrites, object_json
from exporter.metrics.rollback import RollbackMetrics
from exporter.model.alerts import Alert
from exporter.model.clusterview import ClusterView
from exporter.model.cohorts import CohortTable
from exporter.model.decision import (
    ESCALATE,
    PLAN,
    REFUSED,
    WAITS,
    Decision,
    decide,
    new_rollback,
)
from exporter.model.guards import GuardState, cohort_table
from exporter.model.holds import Hold, holds
from exporter.model.planner import RESOLVED
from exporter.model.rollback import (
    Action,
    NodeRollback,
    Plan,
    Refusal,
    RollbackSpec,
    RollbackStatus,
    Trigger,
)
from exporter.model.rollback_state import add_trigger
from exporter.tasks import TimeSlice

log = logging.getLogger(__name__)


class ClusterViewSource(Protocol):
    """What the intake needs of the cluster watch."""

    def view(self) -> ClusterView: ...


class Intake:
    def __init__(
        self,
        journal: Journal,
        cluster: ClusterViewSource,
        rollbacks: RollbackWatch,
        writes: RollbackWrites,
        audit: Audit,
        lane: EventLane,
        metrics: RollbackMetrics,
        settings: ExecutorSettings,
        *,
        identity: str = "",
        clock: Callable[[], float] = time.time,
        repeat_after: float = REPEAT_CLEANUP_AFTER,
    ) -> None:
        self._journal = journal
        self._cluster = cluster
        self._rollbacks = rollbacks
        self._writes = writes
        self._audit = audit
        self._lane = lane
        self.metrics = metrics
        self._settings = settings
        self._policy = settings.policy
        self._identity = identity
        self._clock = clock
        self._repeats = Repeats(
            journal, rollbacks, self._policy, self._create, identity, after=repeat_after
        )
        self._deferred: dict[tuple[str, float], str] = {}  # alert key -> last deferring reason
        self.decided = 0  # by the last pass
        self.held: tuple[Hold, ...] = ()  # as of the last pass (exporter.model.holds)
        self.cohorts: CohortTable | None = None  # the last pass's
        self._held_seen: set[tuple[str, str, str]] = set()
        self.episodes = Episodes(journal, rollbacks, metrics, settings.dry_run_clear_within)

    async def _state(self) -> GuardState:
        """The rollbacks decided so far: those in the cluster; in a dry run, also the dry-run
        decisions of the journal (which made no objects)."""
        state = self._rollbacks.guard_state()
        if self._settings.dry_run:
            for d in await self._journal.decisions(DRY_RUN):
                if d.reason in (PLAN, ESCALATE):
                    state.accept_decided(d.rollback, d.node, Action(d.action), d.wave, d.decided_at)
        return state

    async def run_once(self) -> int:
        """Decide every alert waiting for a decision and record every Event of it; how many
        were decided."""
        async for _ in self.decide():
            pass
        decided = self.decided
        await self._lane.flush()
        return decided

    async def decide(self) -> AsyncIterator[NodeRollback]:
        """Decide every alert waiting for a decision (``decided`` says how many were). Each
        accepted one is carried out at once; the NodeRollbacks they created are yielded once
        every accepted one was; refusals and waits are recorded after that."""
        self.decided = 0
        view = self._cluster.view()
        # The cohorts as of the pass's start, walked once for all its alerts, its holds and
        # the metrics read until the next pass.
        cohorts = self.cohorts = cohort_table(view, self._policy, self._clock())
        state = await self._state()
        refused: list[tuple[AlertRecord, Refusal, float]] = []
        held: list[tuple[AlertRecord, Refusal]] = []
        created: list[NodeRollback] = []
        to_decide = await self._journal.alerts_to_decide()
        turn = TimeSlice()  # from here: the wait for the journal's thread held no loop
        for alert in to_decide:
            await turn.pause()  # alerts still held back are judged again without any I/O
            now = self._clock()
            while True:
                decision = decide(alert.alert, view, state, self._policy, now, cohorts)
                if decision.verdict in (WAITS, REFUSED):
                    break
                taken, rollback = await self._carry_out(alert, decision, view, state, now)
                if taken:
                    break
                # The rollback it would join or escalate had ended (the watch had not shown
                # it yet): the alert is judged again without it (and without its node if it
                # deleted it).
                state.ended(decision.rollback, rollback)
            if decision.verdict == WAITS:
                assert decision.refusal is not None
                held.append((alert, decision.refusal))
                continue
            waited = self._deferred.pop(alert.key, None)
            self.decided += 1
            self.episodes.decided(alert)
            if decision.verdict == REFUSED:
                assert decision.refusal is not None
                if waited is not None and decision.refusal.reason == RESOLVED:
                    self.episodes.waited[alert.key] = waited  # it ends held
                refused.append((alert, decision.refusal, now))
                continue
            if rollback is not None:
                created.append(rollback)
        if not self._settings.dry_run:
            created += await repeat_cleanups(self._repeats, view, state, self._clock())
        for rollback in created:
            yield rollback
        for alert, refusal, now in refused:
            await turn.pause()
            await self._refuse(alert, refusal, now)
        for alert, refusal in held:
            self._defer(alert, refusal)
        await self._hold(view, state, cohorts, [(a.alert, r.reason) for a, r in held])
        await self.episodes.close()

    async def _hold(
        self,
        view: ClusterView,
        state: GuardState,
        cohorts: CohortTable,
        waiting: list[tuple[Alert, str]],
    ) -> None:
        """Find which guard holds each firing action alert that has no rollback running
        (exporter.model.holds): those waiting now, and those refused or decided in a dry run.
        ``held`` is what the metrics show; a hold that is new or changed its reason is logged
        with its status line."""
        decided = list(waiting)
        for record, verdict, reason in await self._journal.firing_decided((REFUSED, DRY_RUN)):
            decided.append((record.alert, DRY_RUN if verdict == DRY_RUN else reason))
        running = self._rollbacks.guard_state().active_nodes()  # the cluster's, not a dry run's
        self.held = holds(decided, view, state, self._policy, self._clock(), running, cohorts)
        seen = {(h.alertname, h.node, h.guard) for h in self.held}
        for hold in self.held:
            if (hold.alertname, hold.node, hold.guard) not in self._held_seen:
                log.info(
                    "an alert is held: %s",
                    hold.line(),
                    extra={"node": hold.node, "alertname": hold.alertname, "reason": hold.reason},
                )
        self._held_seen = seen

    async def _carry_out(
        self,
        alert: AlertRecord,
        decision: Decision,
        view: ClusterView,
        state: GuardState,
        now: float,
    ) -> tuple[bool, NodeRollback | None]:
        """An accepted decision: its effect, then its record. Whether it was carried out (a
        join or an escalation is not when its rollback had ended), and the NodeRollback it
        created (if not carried out: the ended one as read, None if gone)."""
        plan = decision.plan
        assert plan is not None
        rollback = new_rollback(plan, view, state, self._policy, now, decided_by=self._identity)
        name = rollback.name if decision.verdict == PLAN else decision.rollback
        created = None
        if self._settings.dry_run:
            await self._dry_run(alert, decision, rollback, now)
        elif decision.verdict == PLAN:
            created = await self._create(alert, rollback)
        else:
            joined, current = await self._join(decision.verdict, name, plan)
            if not joined:
                return False, current
        if decision.verdict in (PLAN, ESCALATE):
            state.accept(name, plan, now)
        await self._save(alert, decision.verdict, "", "", name, plan.action.value, now, plan.wave)
        return True, created

    async def _create(self, alert: AlertRecord, rollback: NodeRollback) -> NodeRollback | None:
        try:
            created = await self._writes.create(rollback)
        except AlreadyExists:
            log.info("the rollback exists already", extra={"rollback": rollback.name})
            return None
        log.info(
            "decided a rollback",
            extra={
                "rollback": created.name,
                "action": created.spec.action.value,
                "node": created.spec.node,
                "wave": created.spec.wave,
                "steps": [s.kind.value for s in created.status.steps],
            },
        )
        await self._audit.decided(created, alert.labels.get("alertname", ""))
        return created

    async def _join(self, verdict: str, name: str, plan: Plan) -> tuple[bool, NodeRollback | None]:
        """Add the plan's alert to the triggers of rollback ``name``; an escalation first makes
        that rollback the plan's action. Whether it did (not when the rollback had ended or is
        gone, as the server has it, whatever the watch showed), and the rollback as written or
        read. Each write is made from the object as read, at its resourceVersion, so a rollback
        that ends meanwhile makes it read again and find that out."""
        trigger = Trigger(plan.alertname, plan.alert_fingerprint, plan.alert_starts_at)
        if verdict == ESCALATE:

            def stronger(current: NodeRollback) -> RollbackSpec | None:
                if not current.active:
                    return None
                return dataclasses.replace(
                    current.spec, action=plan.action, delete_node=self._policy.delete_nodes
                )

            escalated = await self._writes.change_spec(name, stronger)
            if escalated is None or escalated.spec.action is not plan.action:
                log.info("the rollback an alert would escalate ended", extra={"rollback": name})
                return False, escalated
            log.info("escalated a rollback", extra={"rollback": name, "to": plan.action.value})

        def joined(current: NodeRollback) -> RollbackStatus | None:
            if verdict != ESCALATE and not current.active:
                return None  # ended: the alert is judged again (the escalated one is taken)
            return add_trigger(current.status, trigger)

        written = await self._writes.change_status(name, joined)
        if written is None or add_trigger(written.status, trigger) != written.status:
            log.info("the rollback an alert would join ended", extra={"rollback": name})
            return False, written
        return True, written

    async def _dry_run(
        self, alert: AlertRecord, decision: Decision, rollback: NodeRollback, now: float
    ) -> None:
        log.info(
            "dry run: would %s",
            "create a NodeRollback" if decision.verdict == PLAN else f"{decision.verdict} it",
            extra={
                "alert": alert.fingerprint,
                "rollback": rollback.name if decision.verdict == PLAN else decision.rollback,
                "object": json.dumps(object_json(rollback), sort_keys=True),
            },
        )
        for step in rollback.status.steps:
            self.metrics.action(step.kind.value, "dry_run")

    async def _save(
        self,
        alert: AlertRecord,
        verdict: str,
        reason: str,
        detail: str,
        rollback: str,
        action: str,
        now: float,
        wave: str = "",
    ) -> None:
        dry = self._settings.dry_run and verdict != REFUSED
        await self._journal.save_decision(
            DecisionRecord(
                alert_key=alert.key,
                verdict=DRY_RUN if dry else verdict,
                reason=verdict if dry else reason,
                detail=detail,
                rollback=rollback,
                node=alert.alert.node,
                action=action or alert.alert.action,
                decided_at=now,
                wave=wave,
            )
        )

    async def _refuse(self, alert: AlertRecord, refusal: Refusal, now: float) -> None:
        await self._save(alert, REFUSED, refusal.reason, refusal.detail, "", "", now)
        self._report(
            alert,
            refusal,
            "refused an alert",
            reason="NodesyncRefused",
            message=f"nodesync will not act on alert {alert.labels.get('alertname', '')} "
            f"({alert.alert.action or 'no action'}): {refusal.reason}: {refusal.detail}",
            type_="Warning",
            key=alert_event_key(alert.key, "refused"),
        )

    def _defer(self, alert: AlertRecord, refusal: Refusal) -> None:
        if self._deferred.get(alert.key) == refusal.reason:
            return  # already reported; the alert is decided again at every pass
        self._deferred[alert.key] = refusal.reason
        self._report(
            alert,
            refusal,
            "holding an alert back",
            reason="NodesyncWaiting",
            message=f"nodesync holds alert {alert.labels.get('alertname', '')} "
            f"({alert.alert.action}) back: {refusal.reason}: {refusal.detail}",
            type_="Normal",
            key=alert_event_key(alert.key, f"deferred/{refusal.reason}"),
        )

    def _report(self, alert: AlertRecord, refusal: Refusal, what: str, **event: str) -> None:
        """A refusal or a wait: counted, logged, and an Event on the node (queued: it waits
        for every rollback's writes)."""
        self.metrics.refusal(refusal.reason)
        log.info(
            what,
            extra={
                "alert": alert.fingerprint,
                "node": alert.alert.node,
                "reason": refusal.reason,
                "detail": refusal.detail,
            },
        )
        self._lane.on_node(alert.alert.node, **event)
