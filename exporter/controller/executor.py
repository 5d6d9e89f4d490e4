"""The rollback executor: alerts in the journal become plans, plans become steps, steps become
idempotent API writes, each recorded in the journal, as an Event and in metrics.

One pass (after each committed webhook delivery, after a plan ends, and every poll interval):

1. Every firing alert without a plan is planned (exporter.model.planner) and checked by the
   guards (exporter.model.guards) against the live cluster view and the plans accepted so far.
   A refusal is saved (state REFUSED) and recorded as a Warning Event on the node; a deferring
   refusal (correlated failure, concurrency) is not saved: the alert is evaluated again at the
   next pass. An accepted plan is saved PENDING, or DRY_RUN with ``--dry-run``.
2. Every PENDING or RUNNING plan without a task gets one. A PENDING plan whose alert resolved
   in the meantime is CANCELLED. Steps run in order; before each the live state is checked again
   (exporter.controller.steps); the step's outcome is recorded as an Event (with a key made of
   the plan id, the step index and the outcome, so a step resumed after a crash does not record
   a second one) and then saved in the journal. A crash between the write and the journal
   re-runs the step, which changes nothing the second time.

Only the leader plans and executes (``--leader-elect``); losing the lead cancels the running
plans, which the next leader resumes. With ``--dry-run`` nothing is written to the API server
at all: plans are logged, saved as DRY_RUN and counted in the metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from exporter.controller.app import CLUSTER, KUBE_API, LEADING, REGISTRY
from exporter.controller.audit import Audit, alert_event_key
from exporter.controller.journal import AlertRecord, Journal, JournalError, PlanRecord
from exporter.controller.settings import ExecutorSettings
from exporter.controller.steps import (
    API_ERROR,
    CORDONED_BY_NODESYNC,
    RECOVERED,
    ROLLBACK_TAINT,
    StepError,
    StepOutcome,
    StepRunner,
    describe_error,
)
from exporter.kube.errors import KubeError
from exporter.kube.informer import Backoff
from exporter.kube.leader import LeaderElector
from exporter.kube.ratelimit import AsyncRateLimiter
from exporter.kube.writer import KubeWriter
from exporter.metrics.collector import SnapshotCollector
from exporter.metrics.rollback import RollbackMetrics, RollbackStatus
from exporter.model import guards, planner
from exporter.model.alerts import RESOLVED
from exporter.model.clusterview import ClusterView
from exporter.model.decision import WAITS, decide
from exporter.model.guards import GuardState, budget, correlated_failure
from exporter.model.rollback import Action, PlanState, Refusal, StepKind, StepState
from exporter.settings.declare import log_fields

log = logging.getLogger(__name__)

REFUSAL_REASONS = tuple(dict.fromkeys((*planner.REASONS, *guards.REASONS)))

#: How often the executor checks, while idle, that it still leads.
LEADER_CHECK_INTERVAL = 0.5

#: How often a step that failed with an API error is tried before the step fails.
STEP_ATTEMPTS = 5


class ClusterSource(Protocol):
    """What the executor needs of the cluster watch (exporter.controller.cluster.ClusterWatch)."""

    @property
    def synced(self) -> bool: ...

    async def wait_synced(self) -> None: ...

    def view(self) -> ClusterView: ...

    def lease_renew_time(self, node: str) -> float | None: ...


class Leadership(Protocol):
    """exporter.kube.leader.LeaderElector, or ``AlwaysLeader`` without ``--leader-elect``."""

    @property
    def is_leader(self) -> bool: ...

    async def wait_leader(self) -> None: ...


class AlwaysLeader:
    is_leader = True

    async def wait_leader(self) -> None:
        return None


@dataclass(frozen=True, slots=True)
class _Stop:
    state: PlanState
    reason: str


class Executor:
    def __init__(
        self,
        journal: Journal,
        writer: KubeWriter,
        cluster: ClusterSource,
        settings: ExecutorSettings,
        metrics: RollbackMetrics,
        *,
        leadership: Leadership | None = None,
        wakeup: asyncio.Event | None = None,
        limiter: AsyncRateLimiter | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        poll_interval: float = 5.0,
        cleanup_poll_interval: float = 1.0,
        retry_initial: float = 1.0,
        retry_max: float = 30.0,
    ) -> None:
        self._journal = journal
        self._writer = writer
        self._cluster = cluster
        self._settings = settings
        self._policy = settings.policy
        self.metrics = metrics
        self._leadership: Leadership = leadership or AlwaysLeader()
        self.wakeup = wakeup or asyncio.Event()
        self._limiter = limiter
        self._clock = clock
        self._sleep = sleep
        self._poll_interval = poll_interval
        self._retry = (retry_initial, retry_max)
        self._audit = Audit(writer, dry_run=settings.dry_run)
        self._steps = StepRunner(
            writer,
            settings,
            lease_renew_time=self._lease_renew_time,
            clock=clock,
            sleep=sleep,
            cleanup_poll_interval=cleanup_poll_interval,
        )
        self._state = GuardState()
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._not_before: dict[int, float] = {}  # plan id -> monotonic time of the next try
        self._failures: dict[int, int] = {}
        self._deferred: dict[tuple[str, float], str] = {}  # alert key -> last deferring reason
        self._leading = False
        self.passes = 0

    # ------------------------------------------------------------------ status

    @property
    def leading(self) -> bool:
        return self._leading

    def status(self) -> RollbackStatus:
        """For the metrics, at scrape time."""
        counts = self._journal.last_counts.plans
        in_progress = counts.get(PlanState.PENDING, 0) + counts.get(PlanState.RUNNING, 0)
        paused: bool | None = None
        absolute: int | None = None
        wave: int | None = None
        if self._cluster.synced:
            view = self._cluster.view()
            now = self._clock()
            paused = correlated_failure(view, self._policy, now).paused
            left = budget(view, self._state, self._policy, now)
            absolute, wave = left.absolute_remaining, left.wave_remaining
        return RollbackStatus(
            plans_in_progress=in_progress,
            leader=self._leading,
            paused=paused,
            budget_absolute=absolute,
            budget_wave_fraction=wave,
            api_write_tokens=self._limiter.tokens() if self._limiter is not None else None,
        )

    # ------------------------------------------------------------------ the loop

    async def run(self) -> None:
        """Plan and execute while leading, until cancelled."""
        await self._cluster.wait_synced()
        try:
            while True:
                await self._leadership.wait_leader()
                self._leading = True
                log.info("executing rollback plans", extra={"dry_run": self._settings.dry_run})
                try:
                    await self._lead()
                finally:
                    self._leading = False
                    await self._cancel_tasks()
                log.warning("stopped executing: no longer the leader")
        finally:
            await self._cancel_tasks()

    async def _lead(self) -> None:
        await self.restore()
        while self._leadership.is_leader:
            self.wakeup.clear()
            try:
                await self.run_once()
            except (JournalError, KubeError) as exc:
                log.warning("executor pass failed; trying again", extra={"error": str(exc)})
            except Exception:
                log.exception("executor pass failed; trying again")
            await self._idle()

    async def _idle(self) -> None:
        """Until woken, the poll interval passed, or the lead was lost (checked every
        ``LEADER_CHECK_INTERVAL``: a lost lead stops the plans well before another controller
        may take over)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._poll_interval
        while self._leadership.is_leader and not self.wakeup.is_set():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(remaining, LEADER_CHECK_INTERVAL)):
                    await self.wakeup.wait()

    async def restore(self) -> None:
        """Rebuild the guards' bookkeeping from the journal (after a start or a new lead)."""
        state = GuardState()
        for record in await self._journal.plans():
            plan = record.plan
            if plan is None or plan.action is not Action.ROLLBACK_NODE:
                continue
            if record.dry_run != self._settings.dry_run:
                continue  # a dry run's plans are not a real run's budget, nor the reverse
            if record.state is PlanState.REFUSED:
                continue
            if record.state is PlanState.CANCELLED and not _touched(record):
                continue
            running = record.state in (PlanState.PENDING, PlanState.RUNNING)
            state.accept(str(record.id), plan, record.created_at, running=running)
        self._state = state

    async def run_once(self) -> None:
        """One pass: plan the new alerts, start the plans that should run."""
        self.passes += 1
        view = self._cluster.view()
        for alert in await self._journal.alerts_to_plan():
            await self._plan(alert, view)
        if self._settings.dry_run:
            return
        now = asyncio.get_running_loop().time()
        for record in await self._journal.plans([PlanState.PENDING, PlanState.RUNNING]):
            if record.dry_run or record.id in self._tasks:
                continue
            if self._not_before.get(record.id, 0.0) > now:
                continue
            task = asyncio.create_task(self._execute(record), name=f"plan-{record.id}")
            self._tasks[record.id] = task
            task.add_done_callback(functools.partial(self._task_done, record.id))

    async def wait_idle(self) -> None:
        """Wait until no plan task runs (for tests and shutdown)."""
        while self._tasks:
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    def _task_done(self, plan_id: int, task: asyncio.Task[None]) -> None:
        self._tasks.pop(plan_id, None)
        if not task.cancelled() and (exc := task.exception()) is not None:
            failures = self._failures.get(plan_id, 0) + 1
            self._failures[plan_id] = failures
            delay = min(self._retry[0] * 2 ** (failures - 1), self._retry[1])
            self._not_before[plan_id] = asyncio.get_running_loop().time() + delay
            log.error(
                "plan execution stopped; it resumes later",
                extra={"plan": plan_id, "error": repr(exc), "retry_in": delay},
            )
        else:
            self._failures.pop(plan_id, None)
            self._not_before.pop(plan_id, None)
        self.wakeup.set()

    async def _cancel_tasks(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # ------------------------------------------------------------------ planning

    async def _plan(self, alert: AlertRecord, view: ClusterView) -> None:
        now = self._clock()
        decision = decide(alert.alert, view, self._state, self._policy, now)
        if decision.verdict == WAITS:
            assert decision.refusal is not None
            await self._defer(alert, decision.refusal)
            return
        self._deferred.pop(alert.key, None)
        if decision.refusal is not None:
            await self._refuse(alert, decision.refusal)
            return
        outcome = decision.plan
        assert outcome is not None
        dry_run = self._settings.dry_run
        state = PlanState.DRY_RUN if dry_run else PlanState.PENDING
        plan_id = await self._journal.save_plan(alert.key, outcome, dry_run=dry_run, state=state)
        self._state.accept(str(plan_id), outcome, now, running=not dry_run)
        log.info(
            "dry run: would execute a plan" if dry_run else "accepted a plan",
            extra={
                "plan": plan_id,
                "action": outcome.action.value,
                "node": outcome.node,
                "wave": outcome.wave,
                "steps": [s.kind.value for s in outcome.steps],
            },
        )
        if dry_run:
            for step in outcome.steps:
                self.metrics.action(step.kind.value, "dry_run")

    async def _refuse(self, alert: AlertRecord, refusal: Refusal) -> None:
        dry_run = self._settings.dry_run
        await self._journal.save_plan(alert.key, refusal, dry_run=dry_run, state=PlanState.REFUSED)
        self.metrics.refusal(refusal.reason)
        log.info(
            "refused an alert",
            extra={
                "alert": alert.fingerprint,
                "node": alert.alert.node,
                "reason": refusal.reason,
                "detail": refusal.detail,
            },
        )
        await self._audit.on_node(
            alert.alert.node,
            reason="NodesyncRefused",
            message=f"nodesync will not act on alert {alert.labels.get('alertname', '')} "
            f"({alert.alert.action or 'no action'}): {refusal.reason}: {refusal.detail}",
            type_="Warning",
            key=alert_event_key(alert.key, "refused"),
        )

    async def _defer(self, alert: AlertRecord, refusal: Refusal) -> None:
        if self._deferred.get(alert.key) == refusal.reason:
            return  # already reported; the alert is evaluated again at every pass
        self._deferred[alert.key] = refusal.reason
        self.metrics.refusal(refusal.reason)
        log.info(
            "holding an alert back",
            extra={
                "alert": alert.fingerprint,
                "node": alert.alert.node,
                "reason": refusal.reason,
                "detail": refusal.detail,
            },
        )
        await self._audit.on_node(
            alert.alert.node,
            reason="NodesyncWaiting",
            message=f"nodesync holds alert {alert.labels.get('alertname', '')} "
            f"({alert.alert.action}) back: {refusal.reason}: {refusal.detail}",
            type_="Normal",
            key=alert_event_key(alert.key, f"deferred/{refusal.reason}"),
        )

    # ------------------------------------------------------------------ execution

    async def _execute(self, record: PlanRecord) -> None:
        plan = record.plan
        assert plan is not None
        key = str(record.id)
        if record.state is PlanState.PENDING:
            alert = await self._journal.alert(record.alert_key)
            if alert is None or alert.status == RESOLVED:
                await self._journal.update_plan(
                    record.id, PlanState.CANCELLED, "the alert resolved before the plan started"
                )
                self._state.release(key)
                log.info("cancelled a plan: its alert resolved", extra={"plan": record.id})
                return
            await self._journal.update_plan(record.id, PlanState.RUNNING)
        log.info("executing a plan", extra={"plan": record.id, "node": plan.node})
        stop: _Stop | None = None
        for step_record in record.steps:
            if step_record.state in (StepState.DONE, StepState.SKIPPED):
                continue
            if step_record.state is StepState.FAILED:  # the controller stopped right after it
                stop = _Stop(PlanState.FAILED, f"{step_record.step.kind.value} failed")
                await self._skip_rest(record, step_record.index, stop.reason)
                break
            outcome = await self._run_step(record, step_record.index, step_record.attempts)
            if outcome.stop is not None:
                stop = _Stop(outcome.stop, outcome.reason)
                await self._skip_rest(record, step_record.index, outcome.reason)
                break
        if stop is not None and stop.reason == RECOVERED:
            await self._undo(record)
        final = stop or _Stop(PlanState.DONE, "")
        await self._journal.update_plan(record.id, final.state, final.reason)
        current = await self._journal.plan(record.id)
        if final.state is PlanState.CANCELLED and current is not None and not _touched(current):
            self._state.release(key)
        else:
            self._state.finish(key)
        log.info(
            "plan finished",
            extra={"plan": record.id, "state": final.state.value, "reason": final.reason},
        )

    async def _run_step(self, record: PlanRecord, index: int, attempts: int) -> StepOutcome:
        plan = record.plan
        assert plan is not None
        step = plan.steps[index]
        backoff = Backoff(*self._retry)
        while True:
            attempts += 1
            try:
                outcome = await self._steps.run(record.id, plan, record.created_at, step)
            except StepError as exc:
                detail = describe_error(exc.error)
                if exc.error.retryable and attempts < STEP_ATTEMPTS:
                    await self._journal.update_step(
                        record.id, index, StepState.PENDING, detail, attempts
                    )
                    log.warning(
                        "step failed; retrying",
                        extra={"plan": record.id, "step": step.kind.value, "error": detail},
                    )
                    await self._sleep(backoff.next())
                    continue
                log.warning(
                    "step failed",
                    extra={"plan": record.id, "step": step.kind.value, "error": detail},
                )
                outcome = StepOutcome(
                    StepState.FAILED, detail, exc.target, reason=API_ERROR, stop=PlanState.FAILED
                )
            await self._audit.step(record.id, index, step.kind, outcome)
            await self._journal.update_step(
                record.id, index, outcome.state, outcome.detail, attempts
            )
            self.metrics.action(step.kind.value, outcome.state.value)
            log.info(
                "step finished",
                extra={
                    "plan": record.id,
                    "step": step.kind.value,
                    "node": step.node,
                    "state": outcome.state.value,
                    "detail": outcome.detail,
                },
            )
            return outcome

    async def _skip_rest(self, record: PlanRecord, index: int, reason: str) -> None:
        for later in record.steps[index + 1 :]:
            if later.state is StepState.PENDING:
                await self._journal.update_step(
                    record.id, later.index, StepState.SKIPPED, f"plan stopped: {reason}"
                )
                self.metrics.action(later.step.kind.value, StepState.SKIPPED.value)

    async def _undo(self, record: PlanRecord) -> None:
        """The node recovered before it was drained: give it back to the scheduler, undoing
        only what this plan did (its own taint; the cordon only if it cordoned the node)."""
        current = await self._journal.plan(record.id)
        if current is None:
            return
        node = record.node
        done = {s.step.kind: s for s in current.steps if s.state is StepState.DONE}
        undone: list[str] = []
        try:
            if StepKind.TAINT in done:
                result = await self._writer.remove_taint(node, ROLLBACK_TAINT.key)
                if result.changed:
                    undone.append(f"removed taint {ROLLBACK_TAINT.key}")
            cordon = done.get(StepKind.CORDON)
            if cordon is not None and cordon.detail == CORDONED_BY_NODESYNC:
                result = await self._writer.uncordon(node)
                if result.changed:
                    undone.append("uncordoned")
            if not undone:
                return
            live = await self._writer.get_node(node)
            await self._writer.record_event(
                kind="Node",
                namespace="",
                name=node,
                uid=live.uid if live is not None else "",
                reason="NodesyncUndone",
                message=f"plan {record.id}: the node recovered before it was drained: "
                + ", ".join(undone),
                type="Normal",
                key=f"plan/{record.id}/undo",
            )
        except KubeError as exc:
            log.warning(
                "could not give a recovered node back", extra={"node": node, "error": str(exc)}
            )
            self.metrics.action("undo", StepState.FAILED.value)
            return
        self.metrics.action("undo", StepState.DONE.value)

    def _lease_renew_time(self, node: str) -> float | None:
        """The node's last Lease renewal as the cluster watch saw it."""
        return self._cluster.lease_renew_time(node)


def _touched(record: PlanRecord) -> bool:
    """Some step of the plan acted (its node counts against the blast radius)."""
    return any(s.state in (StepState.DONE, StepState.FAILED) for s in record.steps)


# ---------------------------------------------------------------- the controller app

EXECUTOR = web.AppKey("rollback_executor", Executor)


def executor_extension(settings: ExecutorSettings) -> Callable[[web.Application], None]:
    """Runs the executor in the controller app. Install it after the webhook's extension
    (``make_app(..., extensions=[webhook_extension(...), executor_extension(...)])``): it reads
    the journal the webhook opens, and is woken by each committed delivery."""

    def extend(app: web.Application) -> None:
        app.cleanup_ctx.append(functools.partial(_executor_ctx, settings))
        if settings.leader_elect:
            app[LEADING] = lambda: EXECUTOR in app and app[EXECUTOR].leading

    return extend


async def _executor_ctx(settings: ExecutorSettings, app: web.Application) -> AsyncIterator[None]:
    from exporter.controller.webhook import ALERTS_RECORDED, JOURNAL

    if JOURNAL not in app:
        raise RuntimeError(
            "the rollback executor needs the journal: install webhook_extension before "
            "executor_extension"
        )
    api = app[KUBE_API]
    limiter = AsyncRateLimiter.per_second(settings.api_qps, settings.api_burst)
    writer = KubeWriter(api, limiter=limiter, dry_run=settings.dry_run)
    elector = (
        LeaderElector(
            api,
            namespace=settings.leader_elect_namespace,
            name=settings.leader_elect_name,
            identity=settings.leader_identity,
        )
        if settings.leader_elect
        else None
    )
    metrics = RollbackMetrics(REFUSAL_REASONS)
    executor = Executor(
        app[JOURNAL],
        writer,
        app[CLUSTER],
        settings,
        metrics,
        leadership=elector,
        wakeup=app.get(ALERTS_RECORDED),
        limiter=limiter,
    )
    app[EXECUTOR] = executor
    collector = SnapshotCollector(lambda: metrics.families(executor.status()))
    app[REGISTRY].register(collector)
    log.info("rollback executor starting", extra=log_fields(settings))
    tasks = [asyncio.create_task(executor.run(), name="rollback-executor")]
    if elector is not None:
        tasks.append(asyncio.create_task(elector.run(), name="leader-election"))
    try:
        yield
    finally:
        for task in tasks:  # the executor stops first, then the elector releases the Lease
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        app[REGISTRY].unregister(collector)
