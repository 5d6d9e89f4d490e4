"""Driving one NodeRollback: its steps in order, each re-checked against the live cluster,
its intent recorded before its effect and its outcome after, until it ends or must wait.

The executor (exporter.controller.executor) decides which rollbacks are driven and when; this
module is what happens to one of them. For each step: exporter.controller.steps re-checks the
node (``precheck``) and acts (``execute``); the step is recorded ``running`` with what it
observed before it acts (the intent), and its outcome with its Event after. Every status write
carries the resourceVersion of the object it is made from (exporter.kube.noderollbacks), so
exactly one writer starts a step: each is made from the object the driver holds, and the object
is read again only when another writer changed it (409). A step found ``running`` (after a
wait, or a crash of another leader) runs again without new intent: every step is idempotent
and finds out what its first run did. A step's writes wait for the API budget at the step's
index (exporter.kube.ratelimit), so that rollbacks not yet begun go before the later steps of
those under way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from exporter.controller.audit import Audit, ObjectRef
from exporter.controller.coordination import Schedule
from exporter.controller.journal import Journal
from exporter.controller.steps import (
    ALERT_RESOLVED,
    API_ERROR,
    RECOVERED,
    StepError,
    StepRunner,
    Wait,
    request_id,
)
from exporter.kube.informer import Backoff
from exporter.kube.noderollbacks import RollbackWrites
from exporter.kube.ratelimit import write_priority
from exporter.metrics.rollback import RollbackMetrics
from exporter.model.alerts import RESOLVED
from exporter.model.rollback import (
    FENCING_STEPS,
    NodeRollback,
    Phase,
    RollbackStatus,
    StepKind,
    StepState,
)
from exporter.model.rollback_state import (
    StepResult,
    cancel,
    current_step,
    initial_status,
    record_outcome,
    replan,
    set_request,
    start_step,
    touched,
    wait_step,
)

log = logging.getLogger(__name__)

#: How often a step whose API call failed (and a retry may fix) is tried before it fails.
STEP_ATTEMPTS = 5


class Driver:
    """Drives NodeRollbacks one call of ``drive`` at a time. A rollback that waits is put on
    ``schedule`` (exporter.controller.coordination), which the executor reads to know when it
    is due again."""

    def __init__(
        self,
        journal: Journal,
        writes: RollbackWrites,
        steps: StepRunner,
        audit: Audit,
        metrics: RollbackMetrics,
        *,
        schedule: Schedule,
        clock: Callable[[], float] = time.time,
        retry: tuple[float, float] = (1.0, 30.0),
    ) -> None:
        self._journal = journal
        self._writes = writes
        self._steps = steps
        self._audit = audit
        self.metrics = metrics
        self._schedule = schedule
        self._clock = clock
        self._retry = retry

    async def drive(self, name: str, *, fencing_only: bool = False) -> None:
        """Run the rollback's steps until it ends or waits; with ``fencing_only``, until its
        next step is not a fencing one (it needs a concurrency slot)."""
        while True:
            rollback = await self._writes.get(name)
            if rollback is None or not rollback.active:
                return
            rollback = await self._bring_up_to_date(rollback)
            if rollback is None:
                return
            index = current_step(rollback.status)
            if index is None:
                return  # bring_up_to_date ended it
            if fencing_only and rollback.status.steps[index].kind not in FENCING_STEPS:
                return
            with write_priority(index):  # later steps yield the budget to earlier ones
                if not await self._step(rollback, index, queued=fencing_only):
                    return

    async def _bring_up_to_date(self, rollback: NodeRollback) -> NodeRollback | None:
        """Write the first status of a rollback created without one, replan an escalated one,
        cancel one whose alerts all resolved before it started."""
        status = rollback.status
        if status.observed_generation == 0:
            # Its creator died before this status and the decision's Event: record it (once,
            # by key), else the rollback would have none.
            await self._audit.decided(rollback, rollback.spec.trigger.alertname)
            fresh = initial_status(rollback.spec, rollback.generation)
            return await self._writes.change_status(
                rollback, lambda r: fresh if r.status.observed_generation == 0 else None
            )
        if rollback.generation > status.observed_generation:
            log.info("replanning an escalated rollback", extra={"rollback": rollback.name})
            return await self._writes.change_status(
                rollback, lambda r: replan(r.status, r.spec, r.generation)
            )
        if status.phase is Phase.PENDING and not touched(status) and await self._resolved(rollback):
            await self._audit.stopped(
                rollback,
                "NodesyncCancelled",
                "every alert of the rollback resolved before it started",
            )
            now = self._clock()
            return await self._writes.change_status(
                rollback,
                lambda r: cancel(r.status, ALERT_RESOLVED, "its alerts resolved", now),
            )
        return rollback

    async def _resolved(self, rollback: NodeRollback) -> bool:
        """Every trigger of the rollback resolved, as this replica's journal knows (an alert it
        never received may still fire: then the rollback goes on)."""
        for trigger in rollback.status.triggers:
            alert = await self._journal.alert((trigger.fingerprint, trigger.starts_at))
            if alert is None or alert.status != RESOLVED:
                return False
        return True

    async def _step(self, rollback: NodeRollback, index: int, *, queued: bool = False) -> bool:
        """Step ``index``: re-check, record the intent, act, record the outcome. True when the
        driver should go on with the next step. ``queued``: driven without a slot (its outcome
        says so when the next step needs one)."""
        started: NodeRollback | None = rollback
        try:
            pre = await self._steps.precheck(rollback, index)
            if isinstance(pre, StepResult):
                return await self._finish(rollback, index, pre, queued=queued)
            if isinstance(pre, Wait):
                await self._wait(rollback, index, pre)
                return False
            if rollback.status.steps[index].state is StepState.PENDING:
                now = self._clock()  # the intent, before the effect
                started = await self._writes.change_status(
                    rollback, lambda r: _intent(r, index, now, pre.observed)
                )
            # else: running already (its intent recorded): resumed after a wait or a restart
            if started is None:
                return False
            outcome = await self._steps.execute(started, index)
        except StepError as exc:
            return await self._failed_call(rollback, index, exc)
        if isinstance(outcome, Wait):
            await self._wait(started, index, outcome)
            return False
        return await self._finish(started, index, outcome, queued=queued)

    async def _wait(
        self, rollback: NodeRollback, index: int, wait: Wait, *, failed_attempt: bool = False
    ) -> None:
        """Record the wait (only when it starts or changes: polling writes nothing) and come
        back to the rollback after ``wait.retry_in``."""
        step = rollback.status.steps[index]
        if failed_attempt or (rollback.status.phase, step.reason, step.message) != (
            Phase.WAITING,
            wait.reason,
            wait.message,
        ):
            until = self._clock() + wait.retry_in
            await self._writes.change_status(
                rollback,
                lambda r: wait_step(
                    r.status,
                    index,
                    wait.reason,
                    wait.message,
                    until,
                    failed_attempt=failed_attempt,
                ),
            )
            log.info(
                "rollback waits",
                extra={"rollback": rollback.name, "reason": wait.reason, "detail": wait.message},
            )
        self._schedule.retry_in(rollback.name, wait.retry_in)

    async def _failed_call(self, rollback: NodeRollback, index: int, exc: StepError) -> bool:
        detail = f"API error {exc.error.code} {exc.error.reason}: {exc.error.message}"[:500]
        attempts = rollback.status.steps[index].attempts
        if exc.error.retryable and attempts < STEP_ATTEMPTS:
            delay = Backoff(*self._retry).next() * 2 ** max(0, attempts - 1)
            log.warning(
                "step failed; retrying",
                extra={"rollback": rollback.name, "step": index, "error": detail},
            )
            wait = Wait(API_ERROR, detail, min(delay, self._retry[1]))
            await self._wait(rollback, index, wait, failed_attempt=True)
            return False
        log.warning(
            "step failed", extra={"rollback": rollback.name, "step": index, "error": detail}
        )
        result = StepResult(StepState.FAILED, detail, reason=API_ERROR, stop=Phase.FAILED)
        return await self._finish(rollback, index, result, target=exc.target)

    async def _finish(
        self,
        rollback: NodeRollback,
        index: int,
        result: StepResult,
        *,
        target: ObjectRef | None = None,
        queued: bool = False,
    ) -> bool:
        """Record the outcome: the Event first (named after the rollback's uid, so a second
        record is refused), then the status; a recovered node is given back before."""
        kind = rollback.status.steps[index].kind
        if target is None and result.pod is not None:  # the pod the step acted on
            pod = result.pod
            target = ObjectRef("Pod", pod.namespace, pod.name, pod.uid)
        target = target or await self._steps.event_target(rollback, index)
        await self._audit.step(rollback, index, result.state, result.message, target)
        if result.stop is Phase.CANCELLED and result.reason == RECOVERED:
            undone = await self._steps.undo(rollback)
            if undone:
                await self._audit.stopped(
                    rollback,
                    "NodesyncUndone",
                    "the node recovered before the rollback finished: " + ", ".join(undone),
                )
                self.metrics.action("undo", StepState.DONE.value)
        now = self._clock()

        written = await self._writes.change_status(
            rollback, lambda r: record_outcome(r, index, result, now, queued=queued)
        )
        self.metrics.action(kind.value, result.state.value)
        log_level = logging.WARNING if result.state is StepState.FAILED else logging.INFO
        log.log(
            log_level,
            "step finished",
            extra={
                "rollback": rollback.name,
                "step": kind.value,
                "node": rollback.spec.node,
                "state": result.state.value,
                "detail": result.message,
            },
        )
        if written is None or not written.active:
            await self._ended(written or rollback)
            return False
        return True

    async def _ended(self, rollback: NodeRollback) -> None:
        status = rollback.status
        if status.action_required:
            await self._audit.stopped(rollback, "NodesyncActionRequired", status.action_required)
        log.info(
            "rollback finished",
            extra={
                "rollback": rollback.name,
                "phase": status.phase.value,
                "reason": status.reason,
                "action_required": status.action_required,
            },
        )


def _intent(
    rollback: NodeRollback, index: int, now: float, observed: dict[str, str] | None
) -> RollbackStatus:
    """Step ``index`` recorded running; a cleanup also records the request id it sends."""
    status = start_step(rollback.status, index, now, observed)
    if status.steps[index].kind is StepKind.CLEANUP_RUNTIME:
        status = set_request(status, index, request_id(rollback))
    return status
