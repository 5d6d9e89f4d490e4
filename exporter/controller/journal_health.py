"""Whether the journal takes writes, and what the controller does while it does not.

The webhook records through :meth:`JournalHealth.record`: every delivery must commit within
``--journal.commit-timeout``. A delivery the journal could not commit is answered 503 (the
webhook's part) and the journal is reported *not writable*: ``/readyz`` fails with the reason,
``nodesync_journal_writable`` is 0, and one WARNING line says why (not one per request). It
stays so until a write commits again: a later delivery, or the probe (a write about the size of
a large delivery, committed then removed) this module makes every second while the journal is
not writable. While it is, a write also runs every ten seconds, so that a filesystem that froze
with no delivery in flight is noticed too; and every second the file at the path is compared
with the one open (device and inode), so that a journal deleted or replaced while the
controller runs stops readiness without waiting for a delivery.

The reasons (exporter.controller.journal): ``timeout`` (a commit did not finish in time: a
frozen filesystem, a lock another process holds, a disk that stalls; while the journal's thread
is stuck, deliveries are answered 503 at once instead of queueing behind it), ``locked``,
``full``, ``io``, ``readonly``, ``corrupt``, ``replaced`` (until the file at the path is the
open one again, e.g. moved back: otherwise restart the controller), ``other``.

Nothing acknowledged is lost meanwhile: a 503 is only answered for what did not commit (or may
commit late, which makes Alertmanager's retry a duplicate), and the alerts acknowledged before
stay in the open journal, where the intake still decides them.

At start a corrupt journal is moved aside and a fresh one started with what could be read from
it (exporter.controller.journal.SetAside), with an ERROR line naming both files and
``nodesync_journal_set_aside_total`` at 1: a controller that refused to start would stop every
rollback of the cluster until someone moved the file, while the journal is an intake that
Alertmanager fills again (it re-sends firing alerts) and rollbacks are NodeRollbacks in the API
server. docs/webhook.md, "When the journal fails".
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Final

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric

from exporter.controller.journal import (
    CLOSED,
    FAILURE_REASONS,
    Journal,
    JournalError,
    JournalTimeout,
    RecordResult,
)
from exporter.metrics.collector import SnapshotCollector
from exporter.metrics.webhook import journal_health_families
from exporter.model.alerts import WebhookPayload
from exporter.tasks import cancel_and_wait

log = logging.getLogger(__name__)

#: How often the file at the path is compared with the open one, and a journal that is not
#: writable is probed.
CHECK_INTERVAL: Final = 1.0
#: How often a writable journal is written to when nothing else writes (checks per probe).
PROBE_EVERY: Final = 10
#: The share of the commit timeout a write waits for a lock another process holds: a lock held
#: throughout fails the write cleanly (``locked``, nothing committed) just before the deadline,
#: which bounds what SQLite cannot (a flush that does not return).
LOCK_WAIT_SHARE: Final = 0.9


class JournalHealth:
    """The journal's writability, as the writes and the checks find it. Start :meth:`run` as a
    task; the webhook calls :meth:`record`, readiness :meth:`not_ready`."""

    def __init__(
        self,
        journal: Journal,
        *,
        commit_timeout: float,
        check_interval: float = CHECK_INTERVAL,
        probe_every: int = PROBE_EVERY,
    ) -> None:
        self.journal = journal
        self.commit_timeout = commit_timeout
        self._interval = check_interval
        self._probe_every = probe_every
        self._problem: JournalError | None = None
        self._since = 0.0
        self._unavailable = dict.fromkeys(FAILURE_REASONS, 0)
        self._set_aside = 0 if journal.set_aside is None else 1
        self._registry: CollectorRegistry | None = None
        self._collector: SnapshotCollector | None = None
        self._task: asyncio.Task[None] | None = None

    def problem(self) -> JournalError | None:
        """Why the journal takes no writes now; None when it does."""
        busy = self.journal.busy_for()
        if busy is not None and busy >= self.commit_timeout:
            return JournalTimeout(
                f"journal: a write has not finished for {busy:.1f} s (a frozen filesystem, or "
                "a lock another process holds)"
            )
        return self._problem

    def not_ready(self) -> str | None:
        """For /readyz: None when the journal takes writes, else why not."""
        problem = self.problem()
        return None if problem is None else f"journal not writable ({problem.reason}): {problem}"

    async def record(self, payload: WebhookPayload, *, received_at: float) -> RecordResult:
        """Journal.record within the commit timeout; JournalError when it did not commit."""
        try:
            result = await self.journal.record(
                payload, received_at=received_at, within=self.commit_timeout
            )
        except JournalError as exc:
            self._failed(exc)
            raise
        self._succeeded()
        return result

    def _failed(self, exc: JournalError) -> None:
        if exc.reason == CLOSED:
            return  # shutting down
        if self._problem is None:  # counted and logged once per outage, by its first reason
            self._unavailable[exc.reason] += 1
            log.warning(
                "the journal takes no writes: answering 503 and not ready until a write "
                "commits again",
                extra={"reason": exc.reason, "error": str(exc), "journal": self.journal.path},
            )
            self._since = time.monotonic()
        self._problem = exc

    def _succeeded(self) -> None:
        if self._problem is None:
            return
        log.info(
            "the journal takes writes again",
            extra={
                "was": self._problem.reason,
                "seconds": round(time.monotonic() - self._since, 3),
                "journal": self.journal.path,
            },
        )
        self._problem = None

    async def check_once(self, *, write: bool) -> None:
        """One check: compare the file with the open one, or write (``write``, and always
        while the journal is not writable)."""
        if self.journal.closed:
            return
        if self.problem() is not None and self._problem is None:  # stuck, noticed by no write
            stuck = self.problem()
            assert stuck is not None
            self._failed(stuck)
        busy = self.journal.busy_for()
        if busy is not None and busy >= self.commit_timeout:
            return  # the stuck write's end will tell; do not queue behind it
        write = write or self._problem is not None
        try:
            if write:
                await self.journal.probe(within=self.commit_timeout)
            else:
                await self.journal.check(within=self.commit_timeout)
        except JournalError as exc:
            self._failed(exc)
            return
        if write:  # only a commit says writes commit again (a check may pass meanwhile)
            self._succeeded()

    async def run(self) -> None:
        checks = 0
        while not self.journal.closed:
            await asyncio.sleep(self._interval)
            checks += 1
            try:
                await self.check_once(write=checks % self._probe_every == 0)
            except Exception:  # a bug here must not end the checks
                log.exception("checking the journal failed")

    def families(self) -> list[Metric]:
        return journal_health_families(
            writable=self.problem() is None,
            unavailable=self._unavailable,
            set_aside=self._set_aside,
        )

    def start(self, registry: CollectorRegistry) -> None:
        """Serve the metrics in ``registry`` and start the checks."""
        self._registry = registry
        self._collector = SnapshotCollector(self.families)
        registry.register(self._collector)
        self._task = asyncio.create_task(self.run(), name="journal-checks")

    async def stop(self) -> None:
        """Stop the checks and the metrics, close the journal."""
        if self._task is not None:
            await cancel_and_wait([self._task])
        if self._registry is not None and self._collector is not None:
            self._registry.unregister(self._collector)
        await self.journal.close()


def _log_set_aside(journal: Journal) -> None:
    aside = journal.set_aside
    if aside is None:
        return
    log.error(
        "the journal was corrupt: moved it aside and started a fresh one with what could be "
        "read from it; alerts it held that could not be read come back when Alertmanager "
        "notifies their group again (at the latest after its repeat_interval, while they fire)",
        extra={
            "journal": aside.path,
            "moved_to": aside.moved_to,
            "error": aside.error,
            "alerts_kept": aside.alerts,
            "decisions_kept": aside.decisions,
            "deliveries_kept": aside.deliveries,
        },
    )


async def start_journal(
    path: str, *, commit_timeout: float, registry: CollectorRegistry
) -> JournalHealth:
    """Open the journal (a corrupt one is moved aside), serve its health metrics and start its
    checks; ``await health.stop()`` undoes it."""
    journal = await Journal.open(
        path, busy_timeout=commit_timeout * LOCK_WAIT_SHARE, set_aside_corrupt=True
    )
    _log_set_aside(journal)
    health = JournalHealth(journal, commit_timeout=commit_timeout)
    health.start(registry)
    return health
