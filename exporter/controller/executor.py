"""The rollback executor: decisions become NodeRollbacks (exporter.controller.intake), and each
active NodeRollback is driven step by step, its status in the API server the record.

One pass (after each committed webhook delivery, after a rollback stops or waits, and every poll
interval), while this controller leads:

1. The intake decides every new alert in the journal. The NodeRollbacks it creates get their
   drivers once every accepted alert of the pass is carried out, before the intake records
   anything else (fencing first: docs/hook.md); refusals are recorded after that, and their
   Events written last (EventLane).
2. Every active NodeRollback without a driver gets one, oldest first. A node rollback's fencing
   steps (cordon, taint: they only keep new pods off a failed node) run at once; the steps after
   them only while fewer than ``--guard.max-concurrent-rollbacks`` are being driven (the others
   stay queued, cordoned: ``Waiting``, reason ``queued``). A rollback that waits (for its node's
   agent, a PodDisruptionBudget, a pause) has no driver until its next attempt is due, so it
   holds no slot.
3. Finished NodeRollbacks older than ``--rollback.retention`` are deleted.

Driving one rollback (exporter.controller.driver) runs its steps in order. For each: the live
state is checked again (exporter.controller.steps); the step is recorded ``running`` with what
it saw (the intent), then acts, then records its Event and its outcome. Every status write
carries the resourceVersion it read (exporter.kube.noderollbacks), so exactly one writer starts
a step. A leader that takes over finds a step ``running`` and runs it again: every step is
idempotent and finds out what its first run did (a cordon it made, a node it deleted), so the
record ends up matching the cluster. A rollback whose node recovered is cancelled and given
back (the cordon and taint its record says it made, or may have made).

Only the leader decides and drives (``--leader-election.enabled``); losing the lead cancels the
drivers, and the next leader resumes from the NodeRollbacks. With ``--rollback.dry-run`` nothing
is written to the API server: decisions are logged and saved as dry runs, and nothing is driven.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from exporter.controller import steps
from exporter.controller.audit import EventLane
from exporter.controller.coordination import Lead, Pause, Schedule
from exporter.controller.driver import Driver
from exporter.controller.intake import Intake
from exporter.controller.journal import JournalError
from exporter.controller.rollbacks import RollbackWatch
from exporter.controller.settings import ExecutorSettings
from exporter.kube.errors import KubeError
from exporter.kube.noderollbacks import RollbackWrites
from exporter.kube.ratelimit import AsyncRateLimiter
from exporter.metrics.rollback import ExecutorStatus, RollbackMetrics
from exporter.model import guards, planner
from exporter.model.clusterview import ClusterView
from exporter.model.cohorts import Cohort
from exporter.model.guards import budget, correlated_failure, wave_cohorts
from exporter.model.rollback import QUEUED, Action, NodeRollback, Phase
from exporter.model.rollback_state import fencing_next
from exporter.model.step_deadlines import StepTimeouts, earliest_deadlines
from exporter.tasks import cancel_and_wait

log = logging.getLogger(__name__)

REFUSAL_REASONS = tuple(dict.fromkeys((*planner.REASONS, *guards.REASONS)))
#: Why a NodeRollback waits, failed or was cancelled, as the metrics say it: the steps' reasons,
#: the guards' that stop a rollback, and ``queued`` (fenced, waiting for a slot); anything else
#: (a status written by hand) is ``other``.
ROLLBACK_REASONS = (
    *steps.REASONS,
    guards.CONTROL_PLANE,
    guards.PROTECTED,
    guards.OTHER_REMEDIATOR,
    QUEUED,
)
OTHER_REASON = "other"

#: How often the executor checks, while idle, that it still leads.
LEADER_CHECK_INTERVAL = 0.5
#: How often finished NodeRollbacks are looked at for deletion, at most (more often with a
#: shorter ``--rollback.retention``).
RETENTION_INTERVAL = 60.0


def _bounded(reasons: Mapping[tuple[Phase, str], int]) -> dict[tuple[str, str], int]:
    """The reasons as label values: known ones, every other one counted as ``other``."""
    bounded: Counter[tuple[str, str]] = Counter()
    known = frozenset(ROLLBACK_REASONS)
    for (phase, reason), n in reasons.items():
        bounded[(phase.value, reason if reason in known else OTHER_REASON)] += n
    return dict(bounded)


class ClusterSource(Protocol):
    """What the executor needs of the cluster watch (exporter.controller.cluster.ClusterWatch)."""

    @property
    def synced(self) -> bool: ...

    async def wait_synced(self) -> None: ...

    def view(self) -> ClusterView: ...

    def lease_renew_time(self, node: str) -> float | None: ...


class Leadership(Protocol):
    """exporter.kube.leader.LeaderElector, or ``AlwaysLeader`` without
    ``--leader-election.enabled``."""

    @property
    def is_leader(self) -> bool: ...

    async def wait_leader(self) -> None: ...


class AlwaysLeader:
    is_leader = True

    async def wait_leader(self) -> None:
        return None


class Executor:
    """Decides and drives while leading. Built by exporter.controller.wiring from its parts:
    the ``intake`` that decides new alerts, the ``driver`` that drives one rollback, and the
    objects it shares with them and the webhook (exporter.controller.coordination): the
    ``schedule`` of its passes, the ``lead`` it publishes, the ``pause`` of the
    correlated-failure guard it computes at each pass."""

    def __init__(
        self,
        intake: Intake,
        driver: Driver,
        lane: EventLane,
        writes: RollbackWrites,
        rollbacks: RollbackWatch,
        cluster: ClusterSource,
        settings: ExecutorSettings,
        metrics: RollbackMetrics,
        *,
        schedule: Schedule,
        lead: Lead,
        pause: Pause,
        leadership: Leadership | None = None,
        limiter: AsyncRateLimiter | None = None,
        clock: Callable[[], float] = time.time,
        poll_interval: float = 5.0,
        retry_initial: float = 1.0,
    ) -> None:
        self.intake = intake
        self._driver = driver
        self._lane = lane
        self._writes = writes
        self.rollbacks = rollbacks
        self._cluster = cluster
        self._settings = settings
        self._policy = settings.policy
        self._timeouts = StepTimeouts(settings.eviction_timeout, settings.cleanup_timeout)
        self.metrics = metrics
        self.schedule = schedule
        self.lead = lead
        self._pause = pause
        self._leadership: Leadership = leadership or AlwaysLeader()
        self._limiter = limiter
        self._clock = clock
        self._poll_interval = poll_interval
        self._retry_initial = retry_initial
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._slots: dict[str, bool] = {}  # driven rollback -> holds a slot
        self._retired_at = 0.0
        self.passes = 0

    # ------------------------------------------------------------------ status

    @property
    def leading(self) -> bool:
        return self.lead.leading

    def status(self) -> ExecutorStatus:
        """For the metrics, at scrape time."""
        paused: bool | None = None
        absolute: int | None = None
        wave: int | None = None
        cohorts: list[Cohort] = []
        synced = self._cluster.synced and self.rollbacks.synced
        if synced:
            view = self._cluster.view()
            now = self._clock()
            paused = correlated_failure(view, self._policy, now).paused
            left = budget(view, self.rollbacks.guard_state(), self._policy, now)
            absolute, wave = left.absolute_remaining, left.wave_remaining
            # The leader's as of its last pass (computed once per pass, not at each scrape).
            table = self.intake.cohorts if self.lead.leading else None
            cohorts = wave_cohorts(view, self._policy, now, table)
        return ExecutorStatus(
            phases=({p.value: n for p, n in self.rollbacks.phases().items()} if synced else None),
            reasons=_bounded(self.rollbacks.reasons()),
            leader=self.lead.leading,
            paused=paused,
            budget_absolute=absolute,
            budget_wave_fraction=wave,
            api_write_tokens=self._limiter.tokens() if self._limiter is not None else None,
            held=(
                tuple((h.alertname, h.node, h.reason) for h in self.intake.held)
                if self.lead.leading
                else None
            ),
            cohorts=cohorts,
            cohort_policy=self._policy.cohorts,
            step_deadlines=earliest_deadlines(self.rollbacks.all(), self._timeouts)
            if synced
            else {},
        )

    # ------------------------------------------------------------------ the loop

    async def run(self) -> None:
        """Decide and drive while leading, until cancelled."""
        await self._cluster.wait_synced()
        await self.rollbacks.wait_synced()
        try:
            while True:
                await self._leadership.wait_leader()
                self.lead.leading = True
                log.info("executing rollbacks", extra={"dry_run": self._settings.dry_run})
                try:
                    await self._lead()
                finally:
                    self.lead.leading = False
                    await self._cancel_tasks()
                log.warning("stopped executing: no longer the leader")
        finally:
            await self._cancel_tasks()

    async def _lead(self) -> None:
        while self._leadership.is_leader:
            self.schedule.clear()
            try:
                await self.run_once()
            except (JournalError, KubeError) as exc:
                log.warning("executor pass failed; trying again", extra={"error": str(exc)})
            except Exception:
                log.exception("executor pass failed; trying again")
            await self._idle()

    async def _idle(self) -> None:
        """Until woken, the next rollback is due, the poll interval passed, or the lead was
        lost (checked every ``LEADER_CHECK_INTERVAL``)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.schedule.next_due(self._poll_interval, self._tasks)
        while self._leadership.is_leader and not self.schedule.tripped:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            await self.schedule.wait(min(remaining, LEADER_CHECK_INTERVAL))

    async def run_once(self) -> None:
        """One pass: decide the new alerts, drive the rollbacks that should move."""
        self.passes += 1
        view = self._cluster.view()
        self._pause.paused = correlated_failure(view, self._policy, self._clock()).paused
        async for created in self.intake.decide():
            self._schedule([created])  # its fencing starts before any refusal is recorded
        if self._settings.dry_run:
            return
        self._schedule()
        await self._retire()

    def _schedule(self, created: Iterable[NodeRollback] = ()) -> None:
        """Drive what should move now. ``created``: NodeRollbacks just created, which the
        watch may not have delivered yet."""
        held = sum(1 for name, slot in self._slots.items() if slot and name in self._tasks)
        active = {r.name: r for r in self.rollbacks.active()}
        fresh = [r for r in created if r.active and r.name not in active]
        for rollback in sorted([*active.values(), *fresh], key=lambda r: (r.created_at, r.name)):
            name = rollback.name
            if name in self._tasks or not self.schedule.due(name):
                continue
            slot = rollback.spec.action is Action.ROLLBACK_NODE
            fencing_only = False
            if slot and held >= self._policy.max_concurrent_rollbacks:
                if not fencing_next(rollback.status):
                    continue  # queued: it goes on when a driven one finishes or waits
                slot, fencing_only = False, True  # cordon and taint need no slot
            held += slot
            self._slots[name] = slot
            task = asyncio.create_task(
                self._drive(name, fencing_only=fencing_only), name=f"rollback-{name}"
            )
            self._tasks[name] = task
            task.add_done_callback(functools.partial(self._task_done, name))

    async def drain(self) -> int:
        """On shutdown, after ``run`` was cancelled and while the Lease is still held: decide
        what the journal acknowledged, so that a stopping leader leaves nothing for
        Alertmanager to send again, and write the Events still queued. How many alerts were
        decided."""
        decided = 0
        synced = self._cluster.synced and self.rollbacks.synced
        if synced and self._leadership.is_leader:
            try:
                decided = await self.intake.run_once()
            except (JournalError, KubeError) as exc:
                log.warning("could not decide the last alerts", extra={"error": str(exc)})
        await self._lane.flush()
        return decided

    async def stop(self) -> None:
        """After ``drain``: drop what could not be written in time."""
        await self._lane.stop()

    async def wait_idle(self) -> None:
        """Wait until no rollback is being driven and every Event is written (for tests and
        shutdown)."""
        while self._tasks:
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        await self._lane.flush()

    def _task_done(self, name: str, task: asyncio.Task[None]) -> None:
        self._tasks.pop(name, None)
        self._slots.pop(name, None)
        if not task.cancelled() and (exc := task.exception()) is not None:
            delay = self._retry_initial
            self.schedule.retry_in(name, delay)
            log.error(
                "driving a rollback stopped; it resumes later",
                extra={"rollback": name, "error": repr(exc), "retry_in": delay},
            )
        self.schedule.trip()

    async def _cancel_tasks(self) -> None:
        await cancel_and_wait(self._tasks.values())

    async def _retire(self) -> None:
        """Delete finished NodeRollbacks past the retention period."""
        now = self._clock()
        retention = self._settings.rollback_retention
        if now - self._retired_at < min(RETENTION_INTERVAL, retention):
            return
        self._retired_at = now
        for rollback in self.rollbacks.all():
            finished = rollback.status.finished_at
            expired = finished is not None and now - finished > retention
            if not rollback.active and expired and await self._writes.delete(rollback):
                log.info("deleted a finished rollback", extra={"rollback": rollback.name})

    async def _drive(self, name: str, *, fencing_only: bool) -> None:
        self.schedule.forget(name)
        await self._driver.drive(name, fencing_only=fencing_only)
