"""KubeWriter against the test API server with the real client: each write, its idempotency,
dry runs, conflicts, eviction with PodDisruptionBudgets, deletion preconditions, the write
budget and exactly-once events. Write counts come from the server's own request counters."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import pytest

from exporter.kube.api import JSONObject, KubeAPI
from exporter.kube.errors import Conflict, TooManyRequests
from exporter.kube.resources import Resource
from exporter.kube.writer import AsyncRateLimiter, KubeWriter, event_name
from exporter.model.kube import TAINT_NODESYNC, Taint
from exporter.model.ratelimit import TokenBucket
from nodesync_sim.fake.apiserver import APIServer

NODE = "node-a"
ROLLBACK = Taint(TAINT_NODESYNC, "NoSchedule")


class FakeClock:
    """Monotonic time that moves only when the writer sleeps; ``on_sleep`` runs each time."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self.on_sleep: Callable[[int], None] = lambda n: None

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        self.on_sleep(len(self.sleeps))
        await asyncio.sleep(0)


class AfterRead(KubeAPI):
    """The real client, plus a hook that runs right after each GET returned: lets a test
    change the object between the writer's read and its write, deterministically."""

    def __init__(self, server: APIServer, hook: Callable[[int], None]) -> None:
        super().__init__(server.aio_configuration())
        self._hook = hook
        self.reads = 0

    async def get(
        self, resource: Resource, name: str, namespace: str | None = None, **kw: Any
    ) -> JSONObject:
        obj = await super().get(resource, name, namespace, **kw)
        self.reads += 1
        self._hook(self.reads)
        return obj


def node(name: str = NODE, **spec: Any) -> JSONObject:
    return {"metadata": {"name": name}, "spec": spec}


def pod(name: str, *, labels: dict[str, str] | None = None, **meta: Any) -> JSONObject:
    """A running, ready pod bound to NODE."""
    return {
        "metadata": {"name": name, "namespace": "default", "labels": labels or {}, **meta},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "i"}]},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pdb(name: str, min_available: int, **selector: str) -> JSONObject:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": selector}},
    }


def stored_node(server: APIServer, name: str = NODE) -> JSONObject:
    return server.store.get("nodes", name)


# ---------------------------------------------------------------- reads


async def test_get_node_and_list_pods_on_node(api: KubeAPI, server: APIServer) -> None:
    server.store.create("nodes", node(unschedulable=True))
    server.store.create("pods", pod("here"), namespace="default")
    other = pod("there")
    other["spec"]["nodeName"] = "node-b"
    server.store.create("pods", other, namespace="default")
    writer = KubeWriter(api)
    info = await writer.get_node(NODE)
    assert info is not None
    assert (info.name, info.unschedulable) == (NODE, True)
    assert await writer.get_node("missing") is None
    pods = await writer.list_pods_on_node(NODE)
    assert [(p.name, p.phase, p.ready) for p in pods] == [("here", "Running", True)]
    assert server.counters.writes() == 0


# ---------------------------------------------------------------- cordon, taints, annotations


async def test_cordon_and_uncordon_are_idempotent(api: KubeAPI, server: APIServer) -> None:
    server.store.create("nodes", node())
    writer = KubeWriter(api)

    first = await writer.cordon(NODE)
    assert first.changed
    assert not first.dry_run
    assert stored_node(server)["spec"]["unschedulable"] is True
    second = await writer.cordon(NODE)
    assert not second.changed
    assert "already" in second.detail
    assert server.counters.writes("nodes") == 1

    assert (await writer.uncordon(NODE)).changed
    assert "unschedulable" not in stored_node(server)["spec"]
    assert not (await writer.uncordon(NODE)).changed
    assert server.counters.writes("nodes") == 2


async def test_add_taint_keeps_other_taints_and_is_idempotent(
    api: KubeAPI, server: APIServer
) -> None:
    other = {
        "key": "node.kubernetes.io/not-ready",
        "effect": "NoExecute",
        "timeAdded": "2026-01-01T00:00:00Z",
    }
    server.store.create("nodes", node(taints=[other]))
    writer = KubeWriter(api)

    added = await writer.add_taint(NODE, ROLLBACK)
    assert added.changed
    assert stored_node(server)["spec"]["taints"] == [
        other,
        {"key": TAINT_NODESYNC, "effect": "NoSchedule"},
    ]
    assert not (await writer.add_taint(NODE, ROLLBACK)).changed
    # Same key and effect, another value: updated in place.
    assert (await writer.add_taint(NODE, Taint(TAINT_NODESYNC, "NoSchedule", "wave-1"))).changed
    assert stored_node(server)["spec"]["taints"][1]["value"] == "wave-1"
    assert server.counters.writes("nodes") == 2

    removed = await writer.remove_taint(NODE, TAINT_NODESYNC)
    assert removed.changed
    assert stored_node(server)["spec"]["taints"] == [other]
    assert not (await writer.remove_taint(NODE, TAINT_NODESYNC)).changed
    assert server.counters.writes("nodes") == 3


async def test_removing_the_last_taint_leaves_none(api: KubeAPI, server: APIServer) -> None:
    server.store.create("nodes", node(taints=[{"key": TAINT_NODESYNC, "effect": "NoSchedule"}]))
    assert (await KubeWriter(api).remove_taint(NODE, TAINT_NODESYNC)).changed
    assert not stored_node(server)["spec"].get("taints")


async def test_a_taint_write_that_lost_a_race_reads_again(api: KubeAPI, server: APIServer) -> None:
    server.store.create("nodes", node())
    concurrent = {"key": "example.com/maintenance", "effect": "NoSchedule"}

    def someone_else_taints(reads: int) -> None:
        if reads == 1:  # between the writer's first read and its write
            server.store.patch("nodes", NODE, {"spec": {"taints": [concurrent]}})

    async with AfterRead(server, someone_else_taints) as racing:
        result = await KubeWriter(racing).add_taint(NODE, ROLLBACK)
    assert result.changed
    assert stored_node(server)["spec"]["taints"] == [
        concurrent,
        {"key": TAINT_NODESYNC, "effect": "NoSchedule"},
    ]
    assert server.counters.count("patch", "nodes", 409) == 1
    assert server.counters.count("patch", "nodes", 200) == 1


async def test_a_taint_write_gives_up_when_the_node_keeps_changing(
    api: KubeAPI, server: APIServer
) -> None:
    server.store.create("nodes", node())

    def always_changes(reads: int) -> None:
        server.store.patch("nodes", NODE, {"metadata": {"labels": {"n": str(reads)}}})

    async with AfterRead(server, always_changes) as racing:
        with pytest.raises(Conflict, match="kept changing"):
            await KubeWriter(racing).add_taint(NODE, ROLLBACK)
    assert server.counters.count("patch", "nodes", 409) == 5
    assert not stored_node(server)["spec"].get("taints")


async def test_annotate_node_sets_and_removes(api: KubeAPI, server: APIServer) -> None:
    server.store.create("nodes", {"metadata": {"name": NODE, "annotations": {"keep": "me"}}})
    writer = KubeWriter(api)
    assert (await writer.annotate_node(NODE, {"a": "1", "b": "2"})).changed
    assert not (await writer.annotate_node(NODE, {"a": "1", "gone": None})).changed
    assert (await writer.annotate_node(NODE, {"a": None, "b": "3"})).changed
    assert stored_node(server)["metadata"]["annotations"] == {"keep": "me", "b": "3"}
    assert server.counters.writes("nodes") == 2


async def test_writes_on_a_missing_node_change_nothing(api: KubeAPI, server: APIServer) -> None:
    writer = KubeWriter(api)
    results = [
        await writer.cordon("missing"),
        await writer.uncordon("missing"),
        await writer.add_taint("missing", ROLLBACK),
        await writer.remove_taint("missing", TAINT_NODESYNC),
        await writer.annotate_node("missing", {"a": "1"}),
        await writer.delete_node("missing"),
    ]
    assert [r.changed for r in results] == [False] * 6
    assert all("not found" in r.detail for r in results)
    assert server.counters.writes() == 0


# ---------------------------------------------------------------- delete


async def test_delete_node_is_idempotent(api: KubeAPI, server: APIServer) -> None:
    uid = server.store.create("nodes", node())["metadata"]["uid"]
    writer = KubeWriter(api)
    assert (await writer.delete_node(NODE, uid)).changed
    assert server.store.try_get("nodes", NODE) is None
    again = await writer.delete_node(NODE, uid)
    assert not again.changed
    assert "not found" in again.detail
    assert server.counters.writes("nodes") == 1


async def test_delete_node_refuses_another_object_with_the_same_name(
    api: KubeAPI, server: APIServer
) -> None:
    server.store.create("nodes", node())
    result = await KubeWriter(api).delete_node(NODE, "uid-of-an-older-node")
    assert not result.changed
    assert "another object" in result.detail
    assert server.store.try_get("nodes", NODE) is not None
    assert server.counters.writes() == 0


async def test_delete_node_precondition_holds_when_the_node_is_replaced_mid_way(
    api: KubeAPI, server: APIServer
) -> None:
    server.store.create("nodes", node())

    def rejoin(reads: int) -> None:  # the node is deleted and joins again, with a new uid
        server.store.delete("nodes", NODE)
        server.store.create("nodes", node())

    async with AfterRead(server, rejoin) as racing:
        result = await KubeWriter(racing).delete_node(NODE)
    assert not result.changed
    assert "replaced" in result.detail
    assert server.counters.count("delete", "nodes", 409) == 1
    assert server.store.try_get("nodes", NODE) is not None  # the node that joined again


# ---------------------------------------------------------------- eviction


async def test_evict_succeeds_and_is_idempotent(api: KubeAPI, server: APIServer) -> None:
    uid = server.store.create("pods", pod("web"), namespace="default")["metadata"]["uid"]
    writer = KubeWriter(api)
    result = await writer.evict("default", "web", uid)
    assert (result.outcome, result.attempts) == ("evicted", 1)
    assert server.counters.count("create", "pods/eviction", 201) == 1
    # Graceful: the pod is terminating until its kubelet confirms.
    assert server.store.get("pods", "web", namespace="default")["metadata"]["deletionTimestamp"]
    again = await writer.evict("default", "web", uid)
    assert (again.outcome, again.attempts) == ("evicted", 0)
    assert "terminating" in again.detail
    assert server.counters.writes() == 1


async def test_evict_a_missing_or_replaced_pod_is_gone(api: KubeAPI, server: APIServer) -> None:
    server.store.create("pods", pod("web"), namespace="default")
    writer = KubeWriter(api)
    missing = await writer.evict("default", "nothing-here")
    assert (missing.outcome, missing.attempts) == ("gone", 0)
    replaced = await writer.evict("default", "web", "uid-of-the-old-pod")
    assert (replaced.outcome, replaced.attempts) == ("gone", 0)
    assert server.counters.writes() == 0
    assert (
        server.store.get("pods", "web", namespace="default")["metadata"].get("deletionTimestamp")
        is None
    )


async def test_evict_carries_the_uid_when_the_pod_is_replaced_mid_way(
    api: KubeAPI, server: APIServer
) -> None:
    server.store.create("pods", pod("web"), namespace="default")

    def replace_pod(reads: int) -> None:
        server.store.delete("pods", "web", namespace="default", grace_period_seconds=0)
        server.store.create("pods", pod("web"), namespace="default")

    async with AfterRead(server, replace_pod) as racing:
        result = await KubeWriter(racing).evict("default", "web")
    assert (result.outcome, result.attempts) == ("gone", 1)
    assert server.counters.count("create", "pods/eviction", 409) == 1
    replacement = server.store.get("pods", "web", namespace="default")
    assert replacement["metadata"].get("deletionTimestamp") is None


@pytest.mark.parametrize(
    "meta",
    [
        pytest.param(
            {
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "DaemonSet",
                        "name": "agent",
                        "uid": "ds-uid",
                        "controller": True,
                    }
                ]
            },
            id="daemonset",
        ),
        pytest.param({"annotations": {"kubernetes.io/config.mirror": "hash"}}, id="mirror"),
    ],
)
async def test_evict_skips_daemonset_and_mirror_pods(
    api: KubeAPI, server: APIServer, meta: dict[str, Any]
) -> None:
    server.store.create("pods", pod("special", **meta), namespace="default")
    result = await KubeWriter(api).evict("default", "special")
    assert (result.outcome, result.attempts) == ("skipped", 0)
    assert server.counters.writes() == 0


def backoff_writer(api: KubeAPI, clock: FakeClock) -> KubeWriter:
    return KubeWriter(
        api,
        eviction_backoff_initial=1.0,
        eviction_backoff_max=4.0,
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(7),
    )


async def test_evict_blocked_by_a_budget_is_retried_then_reported_blocked(
    api: KubeAPI, server: APIServer
) -> None:
    server.store.create("pods", pod("db-0", labels={"app": "db"}), namespace="default")
    server.store.create("poddisruptionbudgets", pdb("db", 1, app="db"), namespace="default")
    clock = FakeClock()
    result = await backoff_writer(api, clock).evict("default", "db-0", timeout=20.0)
    assert result.outcome == "blocked"
    assert "PodDisruptionBudget" in result.detail
    assert result.attempts >= 4  # backoff 1, 2, 4, 4 ... s with jitter over 20 s
    assert server.counters.count("create", "pods/eviction", 429) == result.attempts
    assert server.counters.count("create", "pods/eviction", 201) == 0
    # Retried until the timeout, never past it; delays grew exponentially.
    assert clock.now == pytest.approx(20.0)
    assert clock.sleeps[1] > clock.sleeps[0]
    assert (
        server.store.get("pods", "db-0", namespace="default")["metadata"].get("deletionTimestamp")
        is None
    )
    assert server.counters.count("delete") == 0


async def test_evict_succeeds_once_the_budget_allows_it(api: KubeAPI, server: APIServer) -> None:
    server.store.create("pods", pod("db-0", labels={"app": "db"}), namespace="default")
    server.store.create("poddisruptionbudgets", pdb("db", 1, app="db"), namespace="default")
    clock = FakeClock()

    def second_replica_ready(sleeps: int) -> None:
        if sleeps == 2:
            server.store.create("pods", pod("db-1", labels={"app": "db"}), namespace="default")

    clock.on_sleep = second_replica_ready
    result = await backoff_writer(api, clock).evict("default", "db-0", timeout=60.0)
    assert (result.outcome, result.attempts) == ("evicted", 3)
    assert server.counters.count("create", "pods/eviction", 429) == 2


async def test_evict_throttled_until_the_timeout_raises(api: KubeAPI, server: APIServer) -> None:
    server.store.create("pods", pod("web"), namespace="default")
    server.faults.fail_next(1000, 429, path_prefix="/api/v1/namespaces/default/pods/web/eviction")
    clock = FakeClock()
    with pytest.raises(TooManyRequests):
        await backoff_writer(api, clock).evict("default", "web", timeout=5.0)
    assert clock.now == pytest.approx(5.0)


# ---------------------------------------------------------------- dry run


async def test_dry_run_reads_but_writes_nothing(api: KubeAPI, server: APIServer) -> None:
    uid = server.store.create("nodes", node())["metadata"]["uid"]
    pod_uid = server.store.create("pods", pod("web"), namespace="default")["metadata"]["uid"]
    version = server.store.resource_version
    writer = KubeWriter(api, dry_run=True)
    results = [
        await writer.cordon(NODE),
        await writer.add_taint(NODE, ROLLBACK),
        await writer.annotate_node(NODE, {"a": "1"}),
        await writer.delete_node(NODE, uid),
        await writer.record_event(
            kind="Node", namespace="", name=NODE, uid=uid, reason="R", message="m", key="k"
        ),
    ]
    assert all(r.changed and r.dry_run for r in results), results
    assert all(r.detail.startswith("dry run: would ") for r in results)
    eviction = await writer.evict("default", "web", pod_uid)
    assert (eviction.outcome, eviction.attempts, eviction.dry_run) == ("evicted", 0, True)
    # Nothing was sent that writes, and nothing changed.
    assert server.counters.writes() == 0
    assert server.store.resource_version == version
    assert server.counters.count("get") == 5  # each write but the event read the live object
    # A dry run still reports what is already so.
    assert not (await writer.uncordon(NODE)).changed


# ---------------------------------------------------------------- the write budget


async def test_the_write_budget_holds(api: KubeAPI, server: APIServer) -> None:
    server.store.create("nodes", node())
    clock = FakeClock()
    limiter = AsyncRateLimiter(TokenBucket(2.0, 3, clock), clock=clock, sleep=clock.sleep)
    writer = KubeWriter(api, limiter=limiter)
    n = 9
    for i in range(n):
        assert (await writer.annotate_node(NODE, {"n": str(i)})).changed
    assert server.counters.writes() == n
    assert clock.now >= (n - 3) / 2.0 - 1e-9
    # Writes that are not needed take no token.
    before = limiter.tokens()
    assert not (await writer.annotate_node(NODE, {"n": str(n - 1)})).changed
    assert not (await writer.cordon("missing")).changed
    assert limiter.tokens() == before


async def test_eviction_retries_spend_the_budget_too(api: KubeAPI, server: APIServer) -> None:
    server.store.create("pods", pod("db-0", labels={"app": "db"}), namespace="default")
    server.store.create("poddisruptionbudgets", pdb("db", 1, app="db"), namespace="default")
    clock = FakeClock()
    limiter = AsyncRateLimiter(TokenBucket(1.0, 1, clock), clock=clock, sleep=clock.sleep)
    writer = KubeWriter(
        api,
        limiter=limiter,
        eviction_backoff_initial=0.05,
        eviction_backoff_max=0.05,
        clock=clock,
        sleep=clock.sleep,
    )
    result = await writer.evict("default", "db-0", timeout=10.0)
    assert result.outcome == "blocked"
    # Backoff alone would retry every 0.05-0.1 s; the budget allows one write per second.
    assert limiter.waited_seconds > 0
    assert result.attempts <= 1 + 10 + 1
    assert server.counters.count("create", "pods/eviction") == result.attempts


# ---------------------------------------------------------------- events


async def test_events_are_recorded_once_per_key(api: KubeAPI, server: APIServer) -> None:
    uid = server.store.create("nodes", node())["metadata"]["uid"]
    writer = KubeWriter(api, wall_clock=lambda: 1_800_000_000.0)

    async def record(key: str) -> bool:
        result = await writer.record_event(
            kind="Node",
            namespace="",
            name=NODE,
            uid=uid,
            reason="NodesyncCordon",
            message="cordoned by rollback of alert abc",
            type="Warning",
            key=key,
        )
        return result.changed

    assert await record("plan-1/step-0")
    assert not await record("plan-1/step-0")  # a retry, or a restarted controller
    assert await record("plan-1/step-1")
    events = server.store.list("events", namespace="default")
    assert len(events) == 2
    first = server.store.get("events", event_name(NODE, "plan-1/step-0"), namespace="default")
    assert first["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": uid}
    assert (first["reason"], first["type"], first["count"]) == ("NodesyncCordon", "Warning", 1)
    assert first["source"] == {"component": "nodesync-controller"}
    assert first["firstTimestamp"] == first["lastTimestamp"] == "2027-01-15T08:00:00Z"
    assert server.counters.count("create", "events", 201) == 2
    assert server.counters.count("create", "events", 409) == 1


async def test_pod_events_go_to_the_pods_namespace(api: KubeAPI, server: APIServer) -> None:
    created = server.store.create("pods", pod("web"), namespace="default")
    server.store.create("namespaces", {"metadata": {"name": "apps"}})
    writer = KubeWriter(api, component="nodesync-test")
    result = await writer.record_event(
        kind="Pod",
        namespace="apps",
        name="web",
        uid=created["metadata"]["uid"],
        reason="NodesyncEvict",
        message="x" * 5000,
        key="k",
    )
    assert result.changed
    (event,) = server.store.list("events", namespace="apps")
    assert event["involvedObject"]["namespace"] == "apps"
    assert event["source"] == {"component": "nodesync-test"}
    assert len(event["message"]) == 1024
    assert event["type"] == "Normal"


def test_event_names_are_deterministic_and_valid() -> None:
    assert event_name("node-a", "k") == event_name("node-a", "k")
    assert event_name("node-a", "k") != event_name("node-a", "k2")
    long = event_name("n" * 300, "k")
    assert len(long) <= 253
    assert long.startswith("nnn")
    assert ".nodesync-" in long


async def test_event_type_must_be_normal_or_warning(api: KubeAPI) -> None:
    with pytest.raises(ValueError, match="Normal or Warning"):
        await KubeWriter(api).record_event(
            kind="Node",
            namespace="",
            name=NODE,
            uid="",
            reason="R",
            message="m",
            type="Bad",
            key="k",
        )
