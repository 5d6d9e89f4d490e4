"""Leader election against a real kube-apiserver 1.20: two electors, each with a client of its
own as the controller's service account, with the shipped leader-election RBAC
(deploy/overlays/ha: a Role for the Lease nodesync/nodesync-controller). Exactly one leads;
when the leader dies without releasing (as after SIGKILL) the other takes over once the lease
has expired, when it stops gracefully the other takes over at its next retry; never both."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from exporter.kube.leader import LeaderElector
from exporter.model.rfc3339 import parse_time
from nodesync_sim.real.kube_apiserver import (
    CONTROLLER,
    SERVICE_ACCOUNT_NAMESPACE,
    LocalKubeAPIServer,
)
from tests.support.kubeapi import delete_namespace
from tests.support.realkube import (
    LEADER_ELECTION_RBAC,
    all_closed,
    code,
    connect,
    eventually,
    rbac_applied,
    received,
    requests,
    user_of,
)

pytestmark = [pytest.mark.kubeapi, pytest.mark.timeout(90)]

NAMESPACE = SERVICE_ACCOUNT_NAMESPACE
LEASE = "nodesync-controller"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE}"
# Shorter than the defaults (15 s / 10 s / 2 s) to keep the test short; the protocol is the same.
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 4.0, 3.0, 0.5
#: Slack for the requests themselves on a loaded 2-core machine, for the lower bound: an early
#: takeover is the bug it catches, and a busy machine only ever makes a takeover later. How soon
#: a takeover comes is checked attempt by attempt (:class:`Attempts`), not by the clock, which a
#: busy machine stretches without limit.
SLACK = 0.5


@pytest.fixture
def leader_rbac(kubeapi: LocalKubeAPIServer) -> Iterator[None]:
    """Namespace nodesync with the shipped leader-election Role, removed after the test."""
    kubeapi.ok("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    try:
        with rbac_applied(kubeapi, CONTROLLER, [LEADER_ELECTION_RBAC], [LEASE_PATH]):
            yield
    finally:
        delete_namespace(kubeapi, NAMESPACE)


class Monitor:
    """Samples both electors' is_leader every few milliseconds: were both ever leading?"""

    def __init__(self, *electors: LeaderElector) -> None:
        self.electors = electors
        self.both = 0
        self.samples = 0

    async def run(self) -> None:
        while True:
            leading = [e for e in self.electors if e.is_leader]
            self.samples += 1
            if len(leading) > 1:
                self.both += 1
            await asyncio.sleep(0.005)


@contextlib.asynccontextmanager
async def election(
    server: LocalKubeAPIServer, *, release_on_cancel: bool
) -> AsyncIterator[tuple[dict[str, asyncio.Task[None]], list[LeaderElector], Monitor]]:
    """Two electors (a, b) with clients of their own, running, and a monitor of them."""
    async with contextlib.AsyncExitStack() as stack:
        electors = []
        for identity in ("controller-a", "controller-b"):
            api = await stack.enter_async_context(await connect(server, CONTROLLER))
            electors.append(
                LeaderElector(
                    api,
                    namespace=NAMESPACE,
                    name=LEASE,
                    identity=identity,
                    lease_duration=LEASE_DURATION,
                    renew_deadline=RENEW_DEADLINE,
                    retry_period=RETRY_PERIOD,
                    release_on_cancel=release_on_cancel,
                )
            )
        monitor = Monitor(*electors)
        tasks = {e.identity: asyncio.create_task(e.run(), name=e.identity) for e in electors}
        watcher = asyncio.create_task(monitor.run())
        try:
            yield tasks, electors, monitor
        finally:
            for task in [*tasks.values(), watcher]:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    await all_closed(server)
    assert monitor.both == 0, "both electors led at once"
    assert monitor.samples > 100


class Attempts:
    """Every ``try_acquire_or_renew`` of one elector: when it started (its monotonic clock), what
    it answered (None: it raised, e.g. its time ran out), and when, on the elector's clock, it had
    last seen the Lease's record change (before and after the attempt)."""

    def __init__(self, elector: LeaderElector) -> None:
        self.calls: list[tuple[float, bool | None, float, float]] = []
        inner = elector.try_acquire_or_renew

        async def recorded() -> bool:
            started, seen = time.monotonic(), elector._observed_at
            answer: bool | None = None
            try:
                answer = await inner()
                return answer
            finally:
                self.calls.append((started, answer, seen, elector._observed_at))

        elector.try_acquire_or_renew = recorded  # type: ignore[method-assign]

    def answered_from(self, since: float) -> list[bool]:
        """The answers of the attempts that started at ``since`` or later."""
        return [
            answer
            for started, answer, _, _ in self.calls
            if started >= since and answer is not None
        ]

    def refused_an_expired_lease(self, duration: float) -> list[float]:
        """Start times of attempts that answered "held" although the record they found had not
        changed for a whole lease duration before they started (the takeover came late)."""
        return [
            started
            for started, answer, seen, after in self.calls
            if answer is False and after == seen and started >= seen + duration
        ]


def _updates(server: LocalKubeAPIServer, since: float) -> list[dict[str, Any]]:
    """The electors' successful writes of the Lease (create and update) since ``since`` (Unix
    time), oldest first, each with the spec it wrote (audit level Request)."""
    found = [
        e
        for e in requests(server, user=user_of(server, CONTROLLER), resource="leases")
        if e["objectRef"].get("namespace") == NAMESPACE and received(e) >= since
    ]
    writes = [e for e in found if e["verb"] in ("create", "update") and code(e) in (200, 201)]
    return sorted(writes, key=lambda e: e["stageTimestamp"])


def _spec(event: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = event["requestObject"]["spec"]
    return spec


def _holders(server: LocalKubeAPIServer, since: float) -> list[tuple[str, dict[str, Any]]]:
    """(holderIdentity written, spec) of every write since ``since``."""
    return [(_spec(e).get("holderIdentity", ""), _spec(e)) for e in _updates(server, since)]


async def _one_leader(
    server: LocalKubeAPIServer, electors: list[LeaderElector], since: float
) -> tuple[LeaderElector, LeaderElector]:
    await eventually(lambda: any(e.is_leader for e in electors), "a leader", within=15)
    (leader,) = [e for e in electors if e.is_leader]
    (other,) = [e for e in electors if e is not leader]

    def writes_by(elector: LeaderElector) -> int:
        return sum(1 for holder, _ in _holders(server, since) if holder == elector.identity)

    # The other follows: it sees the holder and stays a candidate while the leader renews.
    await eventually(lambda: other.leader == leader.identity, "the follower to see the holder")
    target = writes_by(leader) + 2
    while writes_by(leader) < target:  # two more renewals
        assert not other.is_leader
        await asyncio.sleep(0.1)
    assert leader.is_leader
    assert not other.is_leader
    return leader, other


async def test_the_leader_dies_without_releasing_and_the_other_takes_over_after_the_lease(
    kubeapi: LocalKubeAPIServer, leader_rbac: None
) -> None:
    since = time.time()
    async with election(kubeapi, release_on_cancel=False) as (tasks, electors, _):
        leader, other = await _one_leader(kubeapi, electors, since)
        attempts = Attempts(other)
        # As after a SIGKILL: its task ends, and nothing more is written.
        tasks[leader.identity].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await tasks[leader.identity]
        killed = time.monotonic()
        assert not leader.is_leader
        await eventually(lambda: other.is_leader, "the other to take over", within=30)
        took = time.monotonic() - killed

    # Not before the lease expired on the other's clock, and soon after: it saw the last
    # renewal at one of its attempts and took over at the first attempt past the duration
    # (a held answer only while the record it found had changed within a lease duration).
    assert took >= LEASE_DURATION - RETRY_PERIOD - SLACK
    assert attempts.refused_an_expired_lease(LEASE_DURATION) == []
    holders = _holders(kubeapi, since)
    last_renewal = [spec for holder, spec in holders if holder == leader.identity][-1]
    taken = next(spec for holder, spec in holders if holder == other.identity)
    # One leader, then the other: no write of the other's before the takeover.
    sequence = [holder for holder, _ in holders]
    first = sequence.index(other.identity)
    assert set(sequence[:first]) == {leader.identity}
    assert set(sequence[first:]) == {other.identity}
    assert taken["leaseTransitions"] == last_renewal["leaseTransitions"] + 1
    # The server's record: acquired at least a lease duration after the last renewal.
    acquired, renewed = parse_time(taken["acquireTime"]), parse_time(last_renewal["renewTime"])
    assert acquired is not None
    assert renewed is not None
    assert acquired - renewed >= LEASE_DURATION - 0.05, (taken, last_renewal)
    live = kubeapi.ok("GET", LEASE_PATH)["spec"]
    assert (live["holderIdentity"], live["leaseDurationSeconds"]) == (other.identity, 4)
    print(f"takeover {took:.2f} s after the leader died")


async def test_a_graceful_stop_releases_and_the_other_takes_over_at_its_next_retry(
    kubeapi: LocalKubeAPIServer, leader_rbac: None
) -> None:
    since = time.time()
    async with election(kubeapi, release_on_cancel=True) as (tasks, electors, _):
        leader, other = await _one_leader(kubeapi, electors, since)
        attempts = Attempts(other)
        tasks[leader.identity].cancel()  # a SIGTERM: run() releases the Lease on its way out
        with contextlib.suppress(asyncio.CancelledError):
            await tasks[leader.identity]
        released = time.monotonic()
        await eventually(lambda: other.is_leader, "the other to take over", within=30)
        took = time.monotonic() - released

    # No attempt that started after the release found the Lease held: the other took it at
    # its next attempt, without waiting for the lease to expire (one still under way when the
    # leader released it may have found it held).
    assert False not in attempts.answered_from(released)
    sequence = [(holder, spec["leaseDurationSeconds"]) for holder, spec in _holders(kubeapi, since)]
    released_at = sequence.index(("", 1))  # the release: no holder, a duration of 1 s
    assert set(sequence[:released_at]) == {(leader.identity, 4)}
    after = sequence[released_at + 1 :]
    if after[-1] == ("", 1):  # the other's own release when the test stopped it
        after.pop()
    assert after
    assert set(after) == {(other.identity, 4)}
    print(f"takeover {took:.2f} s after the release")
    # Everything the electors asked was allowed by the shipped Role.
    electors_requests = requests(kubeapi, user=user_of(kubeapi, CONTROLLER), resource="leases")
    assert not [e for e in electors_requests if code(e) == 403 and received(e) >= since]
