"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

The Lease's spec is the record: ``holderIdentity``, ``leaseDurationSeconds``, ``acquireTime``,
``renewTime``, ``leaseTransitions``. Every write carries the resourceVersion it was read at, so
of two candidates writing at once exactly one wins; the other gets 409 and keeps following.

- A candidate takes the Lease when it has no holder, or when its record has not changed for
  ``leaseDurationSeconds`` of the candidate's *own* clock (client-go's observed time: clocks of
  different machines are never compared).
- The leader renews every ``retry_period``; when it could not renew for ``renew_deadline``
  (shorter than the lease duration), it stops leading before anyone else may start.
  ``is_leader`` turns false at that deadline even if a request is still hanging.
- On shutdown (``run`` cancelled) the leader releases the Lease (empty holder), so a successor
  takes over at once instead of after the lease duration.

Callbacks run in the elector's task and must be quick (start a task from them if needed).
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from exporter.kube.api import JSONObject, KubeAPI
from exporter.kube.errors import Conflict, InvalidResponse, KubeError, NotFound
from exporter.kube.objects import LeaseSpec
from exporter.kube.observer import CODE_LABEL_TIMEOUT, code_label
from exporter.kube.resources import LEASES
from exporter.model.codec import error_message
from exporter.model.rfc3339 import format_micro_time

log = logging.getLogger(__name__)

#: client-go's JitterFactor for the candidates' retry period.
JITTER_FACTOR = 1.2


@dataclass(frozen=True, slots=True)
class LeaderRecord:
    holder: str
    lease_duration_seconds: int
    acquire_time: str
    renew_time: str
    transitions: int

    @classmethod
    def of(cls, lease: JSONObject) -> LeaderRecord:
        """The record of a Lease; InvalidResponse when its spec does not have the Lease's
        types."""
        try:
            spec = msgspec.convert(lease.get("spec") or {}, LeaseSpec)
        except msgspec.ValidationError as exc:
            raise InvalidResponse(200, "InvalidResponse", error_message(exc, "$.spec")) from exc
        return cls(
            holder=spec.holder_identity or "",
            lease_duration_seconds=spec.lease_duration_seconds or 0,
            acquire_time=spec.acquire_time or "",
            renew_time=spec.renew_time or "",
            transitions=spec.lease_transitions or 0,
        )

    def spec(self) -> JSONObject:
        out: JSONObject = {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "leaseTransitions": self.transitions,
        }
        if self.acquire_time:
            out["acquireTime"] = self.acquire_time
        if self.renew_time:
            out["renewTime"] = self.renew_time
        return out


Callback = Callable[[], None]


class LeaderElector:
    def __init__(
        self,
        api: KubeAPI,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_started_leading: Callback | None = None,
        on_stopped_leading: Callback | None = None,
        on_new_leader: Callable[[str], None] | None = None,
        release_on_cancel: bool = True,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        if not identity:
            raise ValueError("identity must not be empty")
        if not 0 < retry_period < renew_deadline < lease_duration:
            raise ValueError(
                "need 0 < retry_period < renew_deadline < lease_duration, got "
                f"{retry_period} / {renew_deadline} / {lease_duration}"
            )
        self._api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._on_new_leader = on_new_leader
        self._release_on_cancel = release_on_cancel
        self._clock = clock
        self._wall_clock = wall_clock
        self._rng = rng or random.Random()
        self._lease: JSONObject | None = None  # the Lease as last read or written
        self._record: LeaderRecord | None = None
        self._observed_at = 0.0  # our clock when the record last changed
        self._renewed_at: float | None = None  # our clock at the last successful write as holder
        self._leading = False
        self._leading_event = asyncio.Event()
        self._failing = ""  # the code of the current streak of failed attempts ("" when none)
        self._failures = 0

    # ------------------------------------------------------------------ state

    @property
    def is_leader(self) -> bool:
        """True while leading; False from the renew deadline on, even mid-request."""
        return (
            self._leading
            and self._renewed_at is not None
            and self._clock() - self._renewed_at < self.renew_deadline
        )

    @property
    def leader(self) -> str:
        """The holder of the Lease as last observed ("" when none)."""
        return self._record.holder if self._record is not None else ""

    async def wait_leader(self) -> None:
        """Return once this elector leads."""
        await self._leading_event.wait()

    # ------------------------------------------------------------------ the loop

    async def run(self) -> None:
        """Campaign, lead, and campaign again after losing the Lease, until cancelled."""
        try:
            while True:
                await self._acquire()
                self._start_leading()
                await self._renew()
                self._stop_leading()
        finally:
            if self._leading:
                self._stop_leading()
                if self._release_on_cancel:
                    await self._release_quietly()

    async def _acquire(self) -> None:
        while not await self._attempt(self.renew_deadline):
            delay = self.retry_period * (1.0 + self._rng.random() * JITTER_FACTOR)
            await asyncio.sleep(delay)

    async def _renew(self) -> None:
        """Renew every retry period; return when the Lease is lost or the deadline passed."""
        while True:
            await asyncio.sleep(self.retry_period)
            assert self._renewed_at is not None
            remaining = self.renew_deadline - (self._clock() - self._renewed_at)
            if remaining <= 0 or not await self._attempt(remaining):
                if self._record is not None and self._record.holder not in ("", self.identity):
                    log.warning(
                        "lost the lease to another candidate",
                        extra={"lease": self.name, "holder": self._record.holder},
                    )
                    return
                if self._clock() - self._renewed_at >= self.renew_deadline:
                    log.warning(
                        "could not renew the lease before the renew deadline",
                        extra={"lease": self.name},
                    )
                    return

    async def _attempt(self, budget: float) -> bool:
        """One try_acquire_or_renew, bounded by ``budget`` seconds; failures count as no.

        A failure (anything but a lost race, which try_acquire_or_renew answers with False) is
        counted in the observer and logged at WARNING when it starts or changes kind, at DEBUG
        while the same failure repeats, and at INFO once an attempt succeeds again."""
        try:
            async with asyncio.timeout(budget):
                done = await self.try_acquire_or_renew()
        except (KubeError, TimeoutError) as exc:
            code = code_label(exc) if isinstance(exc, KubeError) else CODE_LABEL_TIMEOUT
            observer = self._api.observer
            if observer is not None:
                observer.observe_leader_election_error(code)
            level = logging.DEBUG if code == self._failing else logging.WARNING
            log.log(
                level,
                "leader election: lease attempt failed",
                extra={"lease": self.name, "code": code, "error": str(exc) or "timed out"},
            )
            self._failing = code
            self._failures += 1
            return False
        if self._failing:
            log.info(
                "leader election: lease attempts succeed again",
                extra={"lease": self.name, "failed_attempts": self._failures},
            )
            self._failing, self._failures = "", 0
        return done

    def _start_leading(self) -> None:
        self._leading = True
        self._leading_event.set()
        log.info("started leading", extra={"lease": self.name, "identity": self.identity})
        if self._on_started is not None:
            self._on_started()

    def _stop_leading(self) -> None:
        self._leading = False
        self._leading_event.clear()
        log.info("stopped leading", extra={"lease": self.name, "identity": self.identity})
        if self._on_stopped is not None:
            self._on_stopped()

    # ------------------------------------------------------------------ one round

    def _observe(self, lease: JSONObject) -> None:
        record = LeaderRecord.of(lease)
        if record != self._record:
            previous = self._record.holder if self._record is not None else None
            self._record = record
            self._observed_at = self._clock()
            if record.holder != previous and record.holder and self._on_new_leader is not None:
                self._on_new_leader(record.holder)
        self._lease = lease

    def _wanted(self, current: LeaderRecord | None) -> LeaderRecord:
        now = format_micro_time(self._wall_clock())
        duration = max(1, math.ceil(self.lease_duration))
        if current is not None and current.holder == self.identity and current.acquire_time:
            return LeaderRecord(
                self.identity, duration, current.acquire_time, now, current.transitions
            )
        transitions = current.transitions + 1 if current is not None else 0
        return LeaderRecord(self.identity, duration, now, now, transitions)

    async def try_acquire_or_renew(self) -> bool:
        """Take or renew the Lease once; True when this elector holds it afterwards."""
        path = LEASES.path(self.namespace, self.name)
        try:
            lease: Any = await self._api.get(LEASES, self.name, self.namespace)
        except NotFound:
            body = {
                "apiVersion": LEASES.api_version,
                "kind": LEASES.kind,
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._wanted(None).spec(),
            }
            try:
                created = await self._api.request(
                    "POST", LEASES, "create", LEASES.path(self.namespace), body=body
                )
            except Conflict:  # another candidate created it first
                return False
            self._observe(created)
            self._renewed_at = self._clock()
            return True
        self._observe(lease)
        record = self._record
        assert record is not None
        if record.holder and record.holder != self.identity:
            duration = record.lease_duration_seconds or self.lease_duration
            if self._clock() < self._observed_at + duration:
                return False  # held, and renewed within its duration as far as we saw
        body = dict(lease)
        body["spec"] = {**(lease.get("spec") or {}), **self._wanted(record).spec()}
        try:
            updated = await self._api.request("PUT", LEASES, "update", path, body=body)
        except Conflict:  # someone wrote in between: they won this round
            return False
        self._observe(updated)
        self._renewed_at = self._clock()
        return True

    async def release(self) -> bool:
        """Give the Lease up if this elector holds it: empty holder, duration 1 s."""
        if self._lease is None or self._record is None or self._record.holder != self.identity:
            return True
        now = format_micro_time(self._wall_clock())
        record = LeaderRecord("", 1, now, now, self._record.transitions)
        body = dict(self._lease)
        body["spec"] = {**(self._lease.get("spec") or {}), **record.spec()}
        try:
            updated = await self._api.request(
                "PUT", LEASES, "update", LEASES.path(self.namespace, self.name), body=body
            )
        except Conflict:
            return False
        self._observe(updated)
        self._renewed_at = None
        return True

    async def _release_quietly(self) -> None:
        try:
            async with asyncio.timeout(self.renew_deadline):
                released = await self.release()
        except (KubeError, TimeoutError) as exc:
            log.warning(
                "could not release the lease", extra={"lease": self.name, "error": str(exc)}
            )
            return
        if released:
            log.info("released the lease", extra={"lease": self.name})
