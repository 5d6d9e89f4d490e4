"""The controller's rollback hook, put together: the journal, the webhook, the intake, the step
runner, the driver and the executor, each built here and given what it needs.

``rollback_extensions(webhook, executor)`` is what ``make_app(..., extensions=...)`` takes. It
makes the objects the parts share (exporter.controller.coordination): one ``Schedule`` the
webhook trips after a delivery and the executor waits on, one ``Lead`` the executor publishes
and the webhook reads. Their cleanup contexts run after the API client's and the cluster
watch's (exporter.controller.app), in this order:

1. the journal opens (``app[JOURNAL]``), the webhook starts recording in it, old entries are
   pruned every ``PRUNE_INTERVAL``;
2. the executor starts: with leader election its elector, the NodeRollback watch, and the
   executor's loop.

They stop in the reverse order: the executor first (a step cut short stays recorded running,
for the next leader to re-check), then it decides what the webhook acknowledged (no new
delivery comes: the server is closed by then), then the elector releases the Lease, and the
journal closes last.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import NoReturn

from aiohttp import web
from prometheus_client.metrics_core import Metric

from exporter.controller.audit import Audit, EventLane
from exporter.controller.coordination import Lead, Pause, Schedule
from exporter.controller.driver import Driver
from exporter.controller.executor import REFUSAL_REASONS, ClusterSource, Executor, Leadership
from exporter.controller.intake import Intake
from exporter.controller.journal import Journal, JournalError
from exporter.controller.journal_health import start_journal
from exporter.controller.keys import (
    CLUSTER,
    COHORT_KEYS,
    EXECUTOR,
    JOURNAL,
    KUBE_API,
    LEAD,
    READINESS,
    REGISTRY,
    SCHEDULE,
    WEBHOOK,
)
from exporter.controller.rollbacks import RollbackWatch
from exporter.controller.settings import ExecutorSettings, WebhookSettings
from exporter.controller.steps import StepRunner
from exporter.controller.webhook import PATH, Webhook, load_token
from exporter.kube.leader import LeaderElector
from exporter.kube.noderollbacks import RollbackWrites
from exporter.kube.ratelimit import AsyncRateLimiter
from exporter.kube.writer import KubeWriter
from exporter.metrics.collector import SnapshotCollector
from exporter.metrics.rollback import RollbackMetrics
from exporter.metrics.webhook import WebhookMetrics, journal_families
from exporter.model.outcomes import OUTCOMES
from exporter.settings.declare import log_fields
from exporter.tasks import cancel_and_wait

log = logging.getLogger(__name__)

Extension = Callable[[web.Application], None]

#: How often old journal entries are pruned (also once at start).
PRUNE_INTERVAL = 3600.0
#: How long a stopping leader spends deciding the alerts it acknowledged, at most.
DRAIN_TIMEOUT = 5.0
#: How long the executor waits between passes when nothing wakes it.
POLL_INTERVAL = 5.0


def rollback_extensions(
    webhook: WebhookSettings,
    executor: ExecutorSettings | None = None,
    *,
    poll_interval: float = POLL_INTERVAL,
) -> list[Extension]:
    """The webhook and (given its settings) the executor, sharing one schedule and one lead.
    Reads the token file now, before anything starts: WebhookConfigError if there is no usable
    token. ``poll_interval``: the executor's, see ``executor_extension``."""
    schedule = Schedule()
    lead = Lead(elected=executor is not None and executor.leader_elect)
    extensions = [webhook_extension(webhook, schedule=schedule, lead=lead)]
    if executor is not None:
        extensions.append(
            executor_extension(executor, schedule=schedule, lead=lead, poll_interval=poll_interval)
        )
    return extensions


def webhook_extension(
    settings: WebhookSettings, *, schedule: Schedule | None = None, lead: Lead | None = None
) -> Extension:
    """``POST /alerts`` and the journal, alone (no executor: nothing waits on ``schedule``,
    and without ``lead`` the replica is never a follower). Reads the token file now."""
    token = load_token(settings)
    shared = schedule or Schedule()
    leading = lead or Lead()

    def extend(app: web.Application) -> None:
        webhook = Webhook(settings, token, WebhookMetrics(app[REGISTRY]), shared, leading)
        app[WEBHOOK] = webhook
        app[SCHEDULE] = shared
        app[LEAD] = leading
        app.cleanup_ctx.append(functools.partial(_journal_ctx, settings, webhook))
        app.router.add_route("*", PATH, webhook.receive)

    return extend


async def _journal_ctx(
    settings: WebhookSettings, webhook: Webhook, app: web.Application
) -> AsyncIterator[None]:
    registry = app[REGISTRY]
    health = await start_journal(
        settings.journal_path, commit_timeout=settings.journal_commit_timeout, registry=registry
    )
    journal = health.journal
    app[JOURNAL] = journal
    app[READINESS].append(health.not_ready)
    collector = SnapshotCollector(functools.partial(_journal_families, journal))
    registry.register(collector)
    webhook.serve(health)
    pruning = asyncio.create_task(_prune(journal, settings.journal_retention), name="prune")
    log.info("webhook ready", extra={"path": PATH, "journal": settings.journal_path})
    try:
        yield
    finally:
        webhook.serve(None)
        await cancel_and_wait([pruning])
        registry.unregister(collector)
        await health.stop()


def _journal_families(journal: Journal) -> list[Metric]:
    counts = journal.last_counts
    return journal_families(counts.alerts, counts.decisions, counts.deliveries)


async def _prune(journal: Journal, retention: float) -> NoReturn:
    while True:
        try:
            removed = await journal.prune(time.time() - retention)
            if removed:
                log.info("journal pruned", extra={"alerts_removed": removed})
        except JournalError as exc:
            log.warning("cannot prune the journal", extra={"error": str(exc)})
        except Exception:
            log.exception("pruning the journal failed")
        await asyncio.sleep(PRUNE_INTERVAL)


def executor_extension(
    settings: ExecutorSettings,
    *,
    schedule: Schedule,
    lead: Lead,
    poll_interval: float = POLL_INTERVAL,
) -> Extension:
    """Runs the executor in the controller app, on the journal the webhook opens: install it
    after ``webhook_extension`` with the same ``schedule`` and ``lead``
    (``rollback_extensions`` does). ``poll_interval``: how long the executor waits between
    passes when nothing wakes it (a pass also deletes the NodeRollbacks past their retention)."""

    def extend(app: web.Application) -> None:
        app[COHORT_KEYS] = settings.policy.cohorts.cohort_keys  # the cluster view keeps them
        app.cleanup_ctx.append(
            functools.partial(_executor_ctx, settings, schedule, lead, poll_interval)
        )

    return extend


def build_executor(
    journal: Journal,
    writer: KubeWriter,
    writes: RollbackWrites,
    rollbacks: RollbackWatch,
    cluster: ClusterSource,
    settings: ExecutorSettings,
    metrics: RollbackMetrics,
    *,
    schedule: Schedule | None = None,
    lead: Lead | None = None,
    leadership: Leadership | None = None,
    limiter: AsyncRateLimiter | None = None,
    identity: str = "",
    clock: Callable[[], float] = time.time,
    poll_interval: float = POLL_INTERVAL,
    step_poll_interval: float = 1.0,
    retry_initial: float = 1.0,
    retry_max: float = 30.0,
) -> Executor:
    """The executor with its intake, step runner and driver, sharing one audit (Events through
    ``writer``; those that can wait through one ``EventLane``), one ``schedule`` and one
    correlated-failure pause."""
    schedule = schedule or Schedule()
    pause = Pause()
    audit = Audit(writer, dry_run=settings.dry_run)
    lane = EventLane(audit)
    intake = Intake(
        journal,
        cluster,
        rollbacks,
        writes,
        audit,
        lane,
        metrics,
        settings,
        identity=identity,
        clock=clock,
    )
    steps = StepRunner(
        writer,
        settings,
        lease_renew_time=cluster.lease_renew_time,
        correlated_failure=pause,
        clock=clock,
        poll_interval=step_poll_interval,
    )
    driver = Driver(
        journal,
        writes,
        steps,
        audit,
        metrics,
        schedule=schedule,
        clock=clock,
        retry=(retry_initial, retry_max),
    )
    return Executor(
        intake,
        driver,
        lane,
        writes,
        rollbacks,
        cluster,
        settings,
        metrics,
        schedule=schedule,
        lead=lead or Lead(elected=leadership is not None),
        pause=pause,
        leadership=leadership,
        limiter=limiter,
        clock=clock,
        poll_interval=poll_interval,
        retry_initial=retry_initial,
    )


def _elector(settings: ExecutorSettings, app: web.Application) -> LeaderElector | None:
    if not settings.leader_elect:
        return None
    return LeaderElector(
        app[KUBE_API],
        namespace=settings.leader_elect_namespace,
        name=settings.leader_elect_name,
        identity=settings.leader_identity,
        lease_duration=settings.leader_elect_lease_duration,
        renew_deadline=settings.leader_elect_renew_deadline,
        retry_period=settings.leader_elect_retry_period,
    )


async def _executor_ctx(
    settings: ExecutorSettings,
    schedule: Schedule,
    lead: Lead,
    poll_interval: float,
    app: web.Application,
) -> AsyncIterator[None]:
    if JOURNAL not in app:
        raise RuntimeError(
            "the rollback executor needs the journal: install webhook_extension before "
            "executor_extension"
        )
    api = app[KUBE_API]
    limiter = AsyncRateLimiter.per_second(settings.api_qps, settings.api_burst)
    elector = _elector(settings, app)
    rollbacks = RollbackWatch(api)
    metrics = RollbackMetrics(REFUSAL_REASONS, OUTCOMES)
    executor = build_executor(
        app[JOURNAL],
        KubeWriter(api, limiter=limiter, dry_run=settings.dry_run),
        RollbackWrites(api, limiter=limiter),
        rollbacks,
        app[CLUSTER],
        settings,
        metrics,
        schedule=schedule,
        lead=lead,
        leadership=elector,
        limiter=limiter,
        identity=settings.leader_identity,
        poll_interval=poll_interval,
    )
    app[EXECUTOR] = executor
    collector = SnapshotCollector(functools.partial(_executor_families, executor))
    app[REGISTRY].register(collector)
    log.info("rollback executor starting", extra=log_fields(settings))
    running = asyncio.create_task(executor.run(), name="rollback-executor")
    others: list[asyncio.Task[None]] = []
    if elector is not None:
        others.append(asyncio.create_task(elector.run(), name="leader-election"))
    others.append(asyncio.create_task(rollbacks.run(), name="noderollbacks-watch"))
    try:
        yield
    finally:
        await cancel_and_wait([running])
        await _drain(executor)
        await executor.stop()
        await cancel_and_wait(others)
        app[REGISTRY].unregister(collector)


def _executor_families(executor: Executor) -> list[Metric]:
    return executor.metrics.families(executor.status())


async def _drain(executor: Executor) -> None:
    """Decide what the journal acknowledged, for at most ``DRAIN_TIMEOUT``."""
    try:
        async with asyncio.timeout(DRAIN_TIMEOUT):
            decided = await executor.drain()
    except TimeoutError:
        return
    if decided:
        log.info("decided the last alerts before stopping", extra={"alerts": decided})
