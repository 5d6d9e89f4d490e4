"""Leader election against both API servers (contract suite, tests/kube/cluster.py): two
electors, each with a client of its own as the controller's service account (on the real
kube-apiserver 1.20 with the shipped leader-election RBAC, deploy/overlays/ha: a Role for the
Lease nodesync/nodesync-controller). Exactly one leads, never both; when the leader dies without
releasing (as after SIGKILL) the other takes over once the lease has expired, when it stops
gracefully the other takes over at its next retry; two candidates racing get one 409 and one
leader. Stepping down when renewals fail or hang needs the test server's fault injection."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from exporter.kube.api import KubeAPI
from exporter.kube.leader import LeaderElector
from exporter.kube.resources import Resource
from exporter.model.rfc3339 import parse_time
from nodesync_sim.real.kube_apiserver import (
    CONTROLLER,
    SERVICE_ACCOUNT_NAMESPACE,
    LocalKubeAPIServer,
)
from tests.kube.cluster import FAKE, REAL, Cluster
from tests.support.kubeapi import delete_namespace
from tests.support.realkube import LEADER_ELECTION_RBAC, rbac_applied
from tests.support.wait import until_async

pytestmark = pytest.mark.timeout(90)

NAMESPACE = SERVICE_ACCOUNT_NAMESPACE
LEASE = "nodesync-controller"
#: Short times for the tests; the protocol is the same as with the defaults (15 s / 10 s / 2 s).
#: Longer on the real server: its requests go through TLS, etcd and a loaded 2-core machine.
TIMES: dict[str, dict[str, float]] = {
    FAKE: {"lease_duration": 1.0, "renew_deadline": 0.6, "retry_period": 0.1},
    REAL: {"lease_duration": 4.0, "renew_deadline": 3.0, "retry_period": 0.5},
}
#: Slack for the requests themselves, for the lower bound of a takeover: an early takeover is
#: the bug it catches, and a busy machine only ever makes a takeover later. How soon a takeover
#: comes is checked attempt by attempt (:class:`Attempts`), not by the clock, which a busy
#: machine stretches without limit.
SLACK = 0.5


@pytest.fixture
def leader_rbac(kubeapi: LocalKubeAPIServer) -> Iterator[None]:
    """Namespace nodesync with the shipped leader-election Role, removed after the test."""
    kubeapi.ok("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    try:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE}"
        with rbac_applied(kubeapi, CONTROLLER, [LEADER_ELECTION_RBAC], [path]):
            yield
    finally:
        delete_namespace(kubeapi, NAMESPACE)


@pytest.fixture
def lease(cluster: Cluster, request: pytest.FixtureRequest) -> str:
    """The Lease's path; its namespace exists (and on the real server, the Role for it)."""
    if cluster.kind == REAL:
        request.getfixturevalue("leader_rbac")
    else:
        cluster.create(cluster.path("namespaces"), {"metadata": {"name": NAMESPACE}})
    return cluster.path("leases", LEASE, NAMESPACE)


class Writes(KubeAPI):
    """The product's client, keeping every Lease write that succeeded, with the spec it wrote,
    in a list shared by the electors (in the order they were answered)."""

    def __init__(self, configuration: Any, written: list[tuple[str, dict[str, Any]]]) -> None:
        super().__init__(configuration)
        self.written = written
        self.after_get: asyncio.Barrier | None = None

    async def get(self, resource: Resource, *args: Any, **kw: Any) -> Any:
        try:
            return await super().get(resource, *args, **kw)
        finally:
            # Both candidates read (found the Lease or not) before either writes; a read that
            # raised NotFound waits too, or the other could create first and read it held.
            if self.after_get is not None:
                await self.after_get.wait()

    async def request(
        self, method: str, resource: Resource, verb: str, path: str, **kw: Any
    ) -> Any:
        answer = await super().request(method, resource, verb, path, **kw)
        if verb in ("create", "update"):
            spec: dict[str, Any] = kw["body"]["spec"]
            self.written.append((str(spec.get("holderIdentity", "")), spec))
        return answer


class Election:
    """Electors, each with a client of its own, and what they wrote."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.times = TIMES[cluster.kind]
        self.written: list[tuple[str, dict[str, Any]]] = []
        self.stack = contextlib.AsyncExitStack()

    async def elector(self, identity: str, **kw: Any) -> LeaderElector:
        configuration = await self.cluster.configuration(CONTROLLER)
        api = await self.stack.enter_async_context(Writes(configuration, self.written))
        return LeaderElector(
            api, namespace=NAMESPACE, name=LEASE, identity=identity, **{**self.times, **kw}
        )

    def holders(self) -> list[str]:
        return [holder for holder, _ in self.written]


@contextlib.asynccontextmanager
async def election(cluster: Cluster) -> AsyncIterator[Election]:
    """Electors made in the block are closed after it, and their connections gone (a request
    cancelled in flight is closed by aiohttp in the background, and must be done before the
    test's event loop ends)."""
    e = Election(cluster)
    async with e.stack:
        yield e
    await until_async(
        lambda: cluster.connections() == [], timeout=10, what="the electors' connections to close"
    )


@contextlib.asynccontextmanager
async def running(*electors: LeaderElector) -> AsyncIterator[dict[str, asyncio.Task[None]]]:
    """The electors running, and a monitor that fails the test if both ever led at once."""
    both, samples = 0, 0

    async def monitor() -> None:
        nonlocal both, samples
        while True:
            samples += 1
            if sum(e.is_leader for e in electors) > 1:
                both += 1
            await asyncio.sleep(0.005)

    tasks = {e.identity: asyncio.create_task(e.run(), name=e.identity) for e in electors}
    watcher = asyncio.create_task(monitor())
    try:
        yield tasks
    finally:
        for task in [*tasks.values(), watcher]:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    assert both == 0, "both electors led at once"
    assert samples > 20


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
        return [a for started, a, _, _ in self.calls if started >= since and a is not None]

    def refused_an_expired_lease(self, duration: float) -> list[float]:
        """Start times of attempts that answered "held" although the record they found had not
        changed for a whole lease duration before they started (the takeover came late)."""
        return [
            started
            for started, answer, seen, after in self.calls
            if answer is False and after == seen and started >= seen + duration
        ]


async def one_leader(e: Election, a: LeaderElector, b: LeaderElector) -> LeaderElector:
    """The leader, once the other follows it and it renewed twice more."""
    await until_async(lambda: a.is_leader or b.is_leader, timeout=15, what="a leader")
    leader, other = (a, b) if a.is_leader else (b, a)
    await until_async(
        lambda: other.leader == leader.identity, timeout=10, what="the follower to see it"
    )
    target = e.holders().count(leader.identity) + 2
    while e.holders().count(leader.identity) < target:  # two more renewals
        assert not other.is_leader
        await asyncio.sleep(0.05)
    assert leader.is_leader
    assert not other.is_leader
    return leader


# ---------------------------------------------------------------- two electors


async def test_exactly_one_of_two_leads(cluster: Cluster, lease: str) -> None:
    started: list[str] = []
    async with election(cluster) as e:
        a = await e.elector("controller-a", on_started_leading=lambda: started.append("a"))
        b = await e.elector("controller-b", on_started_leading=lambda: started.append("b"))
        async with running(a, b):
            leader = await one_leader(e, a, b)
            follower = b if leader is a else a
            renewals = e.holders().count(leader.identity)
            await until_async(
                lambda: e.holders().count(leader.identity) > renewals,
                timeout=20,
                what="one more renewal",
            )
            assert not follower.is_leader
            assert follower.leader == leader.identity
            spec = cluster.get(lease)["spec"]
            assert spec["holderIdentity"] == leader.identity
            assert spec["leaseDurationSeconds"] == int(e.times["lease_duration"])
            assert spec["acquireTime"] < spec["renewTime"]
            assert spec["leaseTransitions"] == 0
            assert set(e.holders()) == {leader.identity}  # the follower never wrote
    assert started == [leader.identity[-1]]


async def test_the_leader_dies_without_releasing_and_the_other_takes_over_after_the_lease(
    cluster: Cluster, lease: str
) -> None:
    async with election(cluster) as e:
        a = await e.elector("controller-a", release_on_cancel=False)
        b = await e.elector("controller-b", release_on_cancel=False)
        async with running(a, b) as tasks:
            leader = await one_leader(e, a, b)
            other = b if leader is a else a
            attempts = Attempts(other)
            # As after a SIGKILL: its task ends, and nothing more is written.
            tasks[leader.identity].cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await tasks[leader.identity]
            killed = time.monotonic()
            assert not leader.is_leader
            assert cluster.get(lease)["spec"]["holderIdentity"] == leader.identity
            await until_async(lambda: other.is_leader, timeout=30, what="the other to take over")
            took = time.monotonic() - killed

    # Not before the lease expired on the other's clock, and soon after: it saw the last
    # renewal at one of its attempts and took over at the first attempt past the duration
    # (a held answer only while the record it found had changed within a lease duration).
    duration, retry = e.times["lease_duration"], e.times["retry_period"]
    assert took >= duration - retry - SLACK
    assert attempts.refused_an_expired_lease(duration) == []
    # One leader, then the other: no write of the other's before the takeover.
    sequence = e.holders()
    first = sequence.index(other.identity)
    assert set(sequence[:first]) == {leader.identity}
    assert set(sequence[first:]) == {other.identity}
    last_renewal = e.written[first - 1][1]
    taken = e.written[first][1]
    assert taken["leaseTransitions"] == last_renewal["leaseTransitions"] + 1
    # The record: acquired at least a lease duration after the last renewal.
    acquired, renewed = parse_time(taken["acquireTime"]), parse_time(last_renewal["renewTime"])
    assert acquired is not None
    assert renewed is not None
    assert acquired - renewed >= duration - 0.05, (taken, last_renewal)
    live = cluster.get(lease)["spec"]
    assert (live["holderIdentity"], live["leaseTransitions"]) == (other.identity, 1)


async def test_a_graceful_stop_releases_and_the_other_takes_over_at_its_next_retry(
    cluster: Cluster, lease: str
) -> None:
    # A long lease: a takeover before it expired can only come from the release.
    slow = {"lease_duration": 30.0, "renew_deadline": 20.0}
    stopped: list[str] = []
    async with election(cluster) as e:
        a = await e.elector("controller-a", on_stopped_leading=lambda: stopped.append("a"), **slow)
        b = await e.elector("controller-b", on_stopped_leading=lambda: stopped.append("b"), **slow)
        async with running(a, b) as tasks:
            leader = await one_leader(e, a, b)
            other = b if leader is a else a
            attempts = Attempts(other)
            tasks[leader.identity].cancel()  # a SIGTERM: run() releases the Lease on its way out
            with contextlib.suppress(asyncio.CancelledError):
                await tasks[leader.identity]
            released = time.monotonic()
            assert stopped == [leader.identity[-1]]
            assert not leader.is_leader
            await until_async(lambda: other.is_leader, timeout=15, what="the other to take over")
            assert cluster.get(lease)["spec"]["holderIdentity"] == other.identity

    # No attempt that started after the release found the Lease held: the other took it at
    # its next attempt, without waiting for the lease to expire (one still under way when the
    # leader released it may have found it held).
    assert False not in attempts.answered_from(released)
    sequence = [(holder, spec["leaseDurationSeconds"]) for holder, spec in e.written]
    released_at = sequence.index(("", 1))  # the release: no holder, a duration of 1 s
    assert set(sequence[:released_at]) == {(leader.identity, 30)}
    after = sequence[released_at + 1 :]
    if after[-1] == ("", 1):  # the other's own release when the test stopped it
        after.pop()
    assert after
    assert set(after) == {(other.identity, 30)}


@pytest.mark.parametrize("existing", [False, True], ids=["create-race", "update-race"])
async def test_a_409_race_resolves_to_one_leader(
    cluster: Cluster, lease: str, existing: bool
) -> None:
    verb = "update" if existing else "create"
    if existing:  # a released lease: free for anyone
        body = {"metadata": {"name": LEASE}, "spec": {"holderIdentity": "", "leaseTransitions": 3}}
        cluster.create(cluster.path("leases", namespace=NAMESPACE), body)

    def requests() -> list[int]:
        found = cluster.requests(verb=verb, resource="leases", name=LEASE, namespace=NAMESPACE)
        return [r.code for r in found]

    before = len(requests())  # earlier tests' requests, on the shared real server
    async with election(cluster) as e:
        a, b = await e.elector("controller-a"), await e.elector("controller-b")
        barrier = asyncio.Barrier(2)
        for elector in (a, b):
            elector._api.after_get = barrier  # type: ignore[attr-defined]
        async with asyncio.timeout(30):  # a candidate stuck at the barrier fails, not hangs
            results = await asyncio.gather(a.try_acquire_or_renew(), b.try_acquire_or_renew())
    assert sorted(results) == [False, True]
    winner = a if results[0] else b
    await cluster.expect(
        lambda: sorted(requests()[before:]), [201 if verb == "create" else 200, 409]
    )
    spec = cluster.get(lease)["spec"]
    assert spec["holderIdentity"] == winner.identity
    assert spec["leaseTransitions"] == (4 if existing else 0)


# ---------------------------------------------------------------- renewals that fail


# Only the test server can fail renewals on demand (on the real one: tests/controller's outage).
@pytest.mark.parametrize("cluster", [FAKE], indirect=True)
async def test_the_leader_steps_down_when_it_cannot_renew(cluster: Cluster, lease: str) -> None:
    transitions: list[str] = []
    async with election(cluster) as e:
        a = await e.elector(
            "controller-a",
            on_started_leading=lambda: transitions.append("start"),
            on_stopped_leading=lambda: transitions.append("stop"),
        )
        async with running(a):
            await until_async(lambda: a.is_leader, timeout=10, what="a to lead")
            cluster.fake.faults.fail_next(100_000, 500, path_prefix="/apis/coordination.k8s.io")
            await until_async(lambda: not a.is_leader, timeout=5, what="a to step down")
            await until_async(
                lambda: transitions == ["start", "stop"], timeout=5, what="the stop callback"
            )
            cluster.fake.faults.clear()
            # Still the holder in the Lease: it renews again at once.
            await until_async(lambda: a.is_leader, timeout=10, what="a to lead again")
            assert transitions == ["start", "stop", "start"]
            assert cluster.get(lease)["spec"]["leaseTransitions"] == 0


# Only the test server can make renewals hang on demand.
@pytest.mark.parametrize("cluster", [FAKE], indirect=True)
async def test_is_leader_turns_false_at_the_deadline_even_mid_request(
    cluster: Cluster, lease: str
) -> None:
    async with election(cluster) as e:
        a = await e.elector("controller-a")
        async with running(a):
            await until_async(lambda: a.is_leader, timeout=10, what="a to lead")
            # Renewals now hang far longer than the renew deadline.
            cluster.fake.faults.add_latency(30.0, path_prefix="/apis/coordination.k8s.io")
            await until_async(
                lambda: not a.is_leader, timeout=5, what="a to stop claiming leadership"
            )
            cluster.fake.faults.clear()


# ---------------------------------------------------------------- settings (no request)


def elector(api: KubeAPI, identity: str, **kw: Any) -> LeaderElector:
    return LeaderElector(
        api, namespace=NAMESPACE, name=LEASE, identity=identity, **{**TIMES[FAKE], **kw}
    )


@pytest.mark.parametrize(
    "times",
    [
        {"lease_duration": 10.0, "renew_deadline": 10.0, "retry_period": 2.0},
        {"lease_duration": 15.0, "renew_deadline": 10.0, "retry_period": 10.0},
        {"lease_duration": 15.0, "renew_deadline": 10.0, "retry_period": 0.0},
    ],
)
def test_rejects_inconsistent_times(api: KubeAPI, times: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="retry_period < renew_deadline < lease_duration"):
        elector(api, "a", **times)


def test_needs_an_identity(api: KubeAPI) -> None:
    with pytest.raises(ValueError, match="identity"):
        elector(api, "")
