"""Leader election against the test API server with the real client: one leader of two, takeover
after expiry or at once after a release, 409 races, and stepping down when renewal fails."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from exporter.kube.api import KubeAPI
from exporter.kube.errors import InvalidResponse
from exporter.kube.leader import LeaderElector, LeaderRecord
from nodesync_sim.fake.apiserver import APIServer
from tests.kube.conftest import eventually

NAMESPACE = "kube-system"
LEASE = "nodesync-controller"
# Short times for tests; the protocol is the same as with the defaults (15 s / 10 s / 2 s).
FAST: dict[str, float] = {"lease_duration": 1.0, "renew_deadline": 0.6, "retry_period": 0.1}


def elector(api: KubeAPI, identity: str, **kw: Any) -> LeaderElector:
    return LeaderElector(api, namespace=NAMESPACE, name=LEASE, identity=identity, **{**FAST, **kw})


@asynccontextmanager
async def running(e: LeaderElector) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(e.run(), name=f"elector {e.identity}")
    try:
        yield task
    finally:
        if not task.done():
            task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def leads(e: LeaderElector, within: float = 10.0) -> None:
    async with asyncio.timeout(within):
        await e.wait_leader()


async def stop(e: LeaderElector) -> None:
    """Cancel a running elector's task (found by name) and wait for it."""
    (task,) = [t for t in asyncio.all_tasks() if t.get_name() == f"elector {e.identity}"]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def lease_spec(server: APIServer) -> dict[str, Any]:
    spec: dict[str, Any] = server.store.get("leases", LEASE, namespace=NAMESPACE)["spec"]
    return spec


def lease_updates(server: APIServer) -> int:
    return server.counters.count("update", "leases", 200)


class Monitor:
    """Samples both electors on every loop turn and remembers if both ever led at once."""

    def __init__(self, *electors: LeaderElector) -> None:
        self.electors = electors
        self.both = 0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            if sum(e.is_leader for e in self.electors) > 1:
                self.both += 1
            await asyncio.sleep(0.005)

    async def __aenter__(self) -> Monitor:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self._task


async def until_leader(electors: tuple[LeaderElector, ...], within: float = 10.0) -> LeaderElector:
    await eventually(lambda: any(e.is_leader for e in electors), "a leader", within)
    return next(e for e in electors if e.is_leader)


async def test_exactly_one_of_two_leads(api: KubeAPI, server: APIServer) -> None:
    events: list[str] = []
    a = elector(api, "a", on_started_leading=lambda: events.append("a+"))
    b = elector(api, "b", on_started_leading=lambda: events.append("b+"))
    async with running(a), running(b), Monitor(a, b) as monitor:
        leader = await until_leader((a, b))
        follower = b if leader is a else a
        # Let the leader renew a few times; the follower must keep following.
        start = lease_updates(server)
        await eventually(lambda: lease_updates(server) >= start + 5, "five renewals")
        assert leader.is_leader
        assert not follower.is_leader
        assert monitor.both == 0
        assert follower.leader == leader.identity
        spec = lease_spec(server)
        assert spec["holderIdentity"] == leader.identity
        assert spec["leaseDurationSeconds"] == 1
        assert spec["leaseTransitions"] == 0
        assert spec["acquireTime"] < spec["renewTime"]
    assert events == [f"{leader.identity}+"]


async def test_the_other_takes_over_after_the_lease_expires(
    api: KubeAPI, server: APIServer
) -> None:
    a = elector(api, "a", release_on_cancel=False)  # a crash: nothing is released
    b = elector(api, "b")
    a_task = asyncio.create_task(a.run())
    try:
        await leads(a)
        async with running(b):
            await eventually(lambda: b.leader == "a", "b to see a's lease")
            crashed_at = time.monotonic()
            a_task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await a_task
            assert lease_spec(server)["holderIdentity"] == "a"
            await eventually(lambda: b.is_leader, "b to take over")
            # Not before a's last renewal, as b saw it, was a lease duration old.
            assert time.monotonic() - crashed_at >= 1.0 - FAST["retry_period"] - 0.05
            spec = lease_spec(server)
            assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 1)
    finally:
        a_task.cancel()


async def test_a_released_lease_is_taken_at_once(api: KubeAPI, server: APIServer) -> None:
    # A long lease: a takeover within a few seconds can only come from the release.
    slow = {"lease_duration": 30.0, "renew_deadline": 20.0, "retry_period": 0.1}
    stopped: list[str] = []
    a = elector(api, "a", on_stopped_leading=lambda: stopped.append("a"), **slow)
    b = elector(api, "b", **slow)
    async with running(a):
        await leads(a)
        async with running(b):
            await eventually(lambda: b.leader == "a", "b to follow a")
            assert not b.is_leader
            await stop(a)
            assert stopped == ["a"]
            assert not a.is_leader
            await eventually(lambda: b.is_leader, "b to take the released lease", within=5.0)
            assert lease_spec(server)["holderIdentity"] == "b"


@pytest.mark.parametrize("existing", [False, True], ids=["create-race", "update-race"])
async def test_a_409_race_resolves_to_one_leader(
    api: KubeAPI, server: APIServer, existing: bool
) -> None:
    if existing:  # a released lease: free for anyone
        server.store.create(
            "leases",
            {"metadata": {"name": LEASE}, "spec": {"holderIdentity": "", "leaseTransitions": 3}},
            namespace=NAMESPACE,
        )
    # Both candidates read before either writes.
    server.faults.add_latency(
        0.3, path_prefix=f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases", verb="get"
    )
    a, b = elector(api, "a"), elector(api, "b")
    results = await asyncio.gather(a.try_acquire_or_renew(), b.try_acquire_or_renew())
    assert sorted(results) == [False, True]
    winner = a if results[0] else b
    verb = "update" if existing else "create"
    assert server.counters.count(verb, "leases", 409) == 1
    assert server.counters.count(verb, "leases") == 2
    spec = lease_spec(server)
    assert spec["holderIdentity"] == winner.identity
    assert spec["leaseTransitions"] == (4 if existing else 0)


async def test_the_leader_steps_down_when_it_cannot_renew(api: KubeAPI, server: APIServer) -> None:
    transitions: list[str] = []
    a = elector(
        api,
        "a",
        on_started_leading=lambda: transitions.append("start"),
        on_stopped_leading=lambda: transitions.append("stop"),
    )
    async with running(a):
        await leads(a)
        server.faults.fail_next(100_000, 500, path_prefix="/apis/coordination.k8s.io")
        await eventually(lambda: not a.is_leader, "a to step down", within=5.0)
        await eventually(lambda: transitions == ["start", "stop"], "the stop callback")
        server.faults.clear()
        # Still the holder in the Lease: it renews again at once.
        await eventually(lambda: a.is_leader, "a to lead again")
        assert transitions == ["start", "stop", "start"]
        assert lease_spec(server)["leaseTransitions"] == 0


async def test_is_leader_turns_false_at_the_deadline_even_mid_request(
    api: KubeAPI, server: APIServer
) -> None:
    a = elector(api, "a")
    async with running(a):
        await leads(a)
        # Renewals now hang far longer than the renew deadline.
        server.faults.add_latency(30.0, path_prefix="/apis/coordination.k8s.io", verb="get")
        await eventually(lambda: not a.is_leader, "a to stop claiming leadership", within=5.0)
        server.faults.clear()


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


def test_a_lease_spec_of_other_types_is_an_invalid_response() -> None:
    with pytest.raises(InvalidResponse, match=r"\$\.spec\.leaseTransitions: expected `int"):
        LeaderRecord.of({"spec": {"holderIdentity": "a", "leaseTransitions": "2"}})
    record = LeaderRecord.of({"spec": {"holderIdentity": "a", "renewTime": None}})
    assert (record.holder, record.renew_time, record.transitions) == ("a", "", 0)
