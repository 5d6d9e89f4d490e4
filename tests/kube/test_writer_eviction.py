"""KubeWriter's evictions and Events against both API servers (contract suite,
tests/kube/cluster.py), as the controller's service account: the Eviction version from
discovery, its uid precondition and idempotency, PodDisruptionBudgets that block it until they
allow one, retries within the write budget, and Events recorded once per key, found by the
object's uid as ``kubectl describe`` finds them."""

from __future__ import annotations

import asyncio
import random
import subprocess
from typing import Any

import pytest

from exporter.kube.api import KubeAPI
from exporter.kube.errors import TooManyRequests
from exporter.kube.writer import AsyncRateLimiter, KubeWriter, event_name
from exporter.model.ratelimit import TokenBucket
from nodesync_sim.real.kube_apiserver import ADMIN, LocalKubeAPIServer
from tests.kube.cluster import FAKE, REAL, Cluster, RealCluster
from tests.kube.writer_support import (
    FakeClock,
    Recording,
    after_read,
    budget,
    pod,
    pod_path,
    terminating,
    update_budget,
)

pytestmark = pytest.mark.timeout(90)

DB = {"app": "db"}


def evictions(cluster: Cluster, name: str) -> list[int]:
    """The statuses of the product's evictions of one pod of the test's namespace."""
    found = cluster.requests(
        verb="create", resource="pods", subresource="eviction", name=name,
        namespace=cluster.namespace,
    )  # fmt: skip
    return [r.code for r in found]


def reads_of(cluster: Cluster, name: str) -> list[str]:
    """The verbs of the product's requests on one pod of the test's namespace (no eviction)."""
    return [r.verb for r in cluster.requests(name=name, namespace=cluster.namespace)]


def backoff_writer(api: KubeAPI, clock: FakeClock, **kw: Any) -> KubeWriter:
    return KubeWriter(
        api,
        eviction_backoff_initial=1.0,
        eviction_backoff_max=4.0,
        clock=clock,
        sleep=clock.sleep,
        rng=random.Random(7),
        **kw,
    )


# ---------------------------------------------------------------- eviction


async def test_eviction_uses_the_version_from_discovery_and_is_idempotent(
    cluster: Cluster, controller_api: KubeAPI, node: str
) -> None:
    namespace = cluster.namespace
    uid = pod(cluster, "web", node)["metadata"]["uid"]
    async with Recording(await cluster.configuration()) as api:
        writer = KubeWriter(api)
        result = await writer.evictions.evict(namespace, "web", uid)
        assert (result.outcome, result.attempts) == ("evicted", 1), result
        # No kubelet confirms the deletion: the pod stays Terminating, which counts as evicted.
        assert terminating(cluster, "web")
        again = await writer.evictions.evict(namespace, "web", uid)
        assert (again.outcome, again.attempts) == ("evicted", 0), again
        assert "terminating" in again.detail
        version = await writer.evictions.eviction_api_version()
    # 1.20 serves policy/v1beta1 only; the test server serves policy/v1 as 1.22 and later do.
    assert version == {FAKE: "policy/v1", REAL: "policy/v1beta1"}[cluster.kind]

    # The version came from the core group's discovery, read once; the body carried it and the
    # pod's uid.
    path = f"{pod_path(cluster, 'web')}/eviction"
    assert [(m, p) for m, p, _ in api.sent] == [
        ("GET", pod_path(cluster, "web")),
        ("GET", "/api/v1"),
        ("POST", path),
        ("GET", pod_path(cluster, "web")),  # the second eviction: already terminating
    ]
    body = api.sent[2][2]
    assert (body["apiVersion"], body["kind"]) == (version, "Eviction")
    assert body["deleteOptions"]["preconditions"] == {"uid": uid}
    await cluster.expect(lambda: evictions(cluster, "web"), [201])


# Only 1.20 refuses it: the test server models 1.22 and later, which take both versions.
@pytest.mark.parametrize("cluster", [REAL], indirect=True)
async def test_a_1_20_server_refuses_a_policy_v1_eviction(cluster: Cluster, node: str) -> None:
    assert isinstance(cluster, RealCluster)
    pod(cluster, "web", node)
    v1 = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web"}}
    refused = cluster.server.request("POST", f"{pod_path(cluster, 'web')}/eviction", v1)
    assert (refused.status, refused.body["reason"]) == (400, "BadRequest")


async def test_evict_a_missing_or_replaced_pod_is_gone(
    cluster: Cluster, controller_api: KubeAPI, node: str
) -> None:
    pod(cluster, "web", node)
    writer = KubeWriter(controller_api)
    missing = await writer.evictions.evict(cluster.namespace, "nothing-here")
    assert (missing.outcome, missing.attempts) == ("gone", 0)
    replaced = await writer.evictions.evict(cluster.namespace, "web", "uid-of-the-old-pod")
    assert (replaced.outcome, replaced.attempts) == ("gone", 0)
    assert not terminating(cluster, "web")
    await cluster.expect(lambda: reads_of(cluster, "web"), ["get"])
    assert evictions(cluster, "web") == []


async def test_evict_carries_the_uid_when_the_pod_is_replaced_mid_way(
    cluster: Cluster, controller_api: KubeAPI, node: str
) -> None:
    pod(cluster, "web", node)

    def replace_pod(reads: int) -> None:
        cluster.delete(pod_path(cluster, "web"))
        pod(cluster, "web", node)

    async with await after_read(cluster, replace_pod) as racing:
        result = await KubeWriter(racing).evictions.evict(cluster.namespace, "web")
    assert (result.outcome, result.attempts) == ("gone", 1)
    await cluster.expect(lambda: evictions(cluster, "web"), [409])
    assert not terminating(cluster, "web")


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
                        "uid": "3f1c0a52-5f7e-4f0e-9a55-2b9d2f3c1a01",
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
    cluster: Cluster, controller_api: KubeAPI, node: str, meta: dict[str, Any]
) -> None:
    pod(cluster, "special", node, **meta)
    result = await KubeWriter(controller_api).evictions.evict(cluster.namespace, "special")
    assert (result.outcome, result.attempts) == ("skipped", 0)
    await cluster.expect(lambda: reads_of(cluster, "special"), ["get"])


async def test_evict_blocked_by_a_budget_is_retried_then_reported_blocked(
    cluster: Cluster, controller_api: KubeAPI, node: str
) -> None:
    pod(cluster, "db-0", node, labels=DB)
    budget(cluster, "db", 1, **DB)
    clock = FakeClock()
    writer = backoff_writer(controller_api, clock)
    result = await writer.evictions.evict(cluster.namespace, "db-0", timeout=20.0)
    assert result.outcome == "blocked"
    assert "PodDisruptionBudget" in result.detail
    assert result.attempts >= 4  # backoff 1, 2, 4, 4 ... s with jitter over 20 s
    await cluster.expect(lambda: evictions(cluster, "db-0"), [429] * result.attempts)
    # Retried until the timeout, never past it; delays grew exponentially.
    assert clock.now == pytest.approx(20.0)
    assert clock.sleeps[1] > clock.sleeps[0]
    assert not terminating(cluster, "db-0")


async def test_evict_succeeds_once_the_budget_allows_it(
    cluster: Cluster, controller_api: KubeAPI, node: str
) -> None:
    pod(cluster, "db-0", node, labels=DB)
    budget(cluster, "db", 1, **DB)
    clock = FakeClock()

    def second_replica_ready(sleeps: int) -> None:
        if sleeps == 2:
            pod(cluster, "db-1", node, labels=DB)
            update_budget(cluster, "db")

    clock.on_sleep = second_replica_ready
    result = await backoff_writer(controller_api, clock).evictions.evict(
        cluster.namespace, "db-0", timeout=60.0
    )
    assert (result.outcome, result.attempts) == ("evicted", 3)
    await cluster.expect(lambda: evictions(cluster, "db-0"), [429, 429, 201])
    assert terminating(cluster, "db-0")
    # The server took the disruption from the budget's status itself.
    pdb = cluster.get(cluster.path("poddisruptionbudgets", "db", cluster.namespace))
    assert pdb["status"]["disruptionsAllowed"] == 0
    assert list(pdb["status"]["disruptedPods"]) == ["db-0"]


# Only the test server can answer 429 without a budget behind it.
@pytest.mark.parametrize("cluster", [FAKE], indirect=True)
async def test_evict_throttled_until_the_timeout_raises(
    cluster: Cluster, controller_api: KubeAPI, node: str
) -> None:
    pod(cluster, "web", node)
    cluster.fake.faults.fail_next(1000, 429, path_prefix=f"{pod_path(cluster, 'web')}/eviction")
    clock = FakeClock()
    with pytest.raises(TooManyRequests):
        await backoff_writer(controller_api, clock).evictions.evict(
            cluster.namespace, "web", timeout=5.0
        )
    assert clock.now == pytest.approx(5.0)


async def test_eviction_retries_spend_the_budget_too(
    cluster: Cluster, controller_api: KubeAPI, node: str
) -> None:
    pod(cluster, "db-0", node, labels=DB)
    budget(cluster, "db", 1, **DB)
    clock = FakeClock()
    limiter = AsyncRateLimiter(TokenBucket(1.0, 1, clock), clock=clock, sleep=clock.sleep)
    writer = KubeWriter(
        controller_api,
        limiter=limiter,
        eviction_backoff_initial=0.05,
        eviction_backoff_max=0.05,
        clock=clock,
        sleep=clock.sleep,
    )
    result = await writer.evictions.evict(cluster.namespace, "db-0", timeout=10.0)
    assert result.outcome == "blocked"
    # Backoff alone would retry every 0.05-0.1 s; the budget allows one write per second.
    assert limiter.waited_seconds > 0
    assert result.attempts <= 1 + 10 + 1
    await cluster.expect(lambda: len(evictions(cluster, "db-0")), result.attempts)


# ---------------------------------------------------------------- events


def _kubectl(server: LocalKubeAPIServer, *args: str) -> str:
    result = subprocess.run(
        ["kubectl", "--kubeconfig", str(server.kubeconfig(ADMIN)), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


async def test_events_are_recorded_once_per_key_and_found_by_the_uid(
    cluster: Cluster, controller_api: KubeAPI, node: str
) -> None:
    uid = cluster.get(cluster.path("nodes", node))["metadata"]["uid"]
    writer = KubeWriter(controller_api, wall_clock=lambda: 1_800_000_000.0)
    key = f"plan-{node}/step-0"
    events = cluster.path("events", namespace="default")
    for k in (key, f"plan-{node}/step-1"):
        if isinstance(cluster, RealCluster):
            cluster.cleanup.delete_later(f"{events}/{event_name(node, k)}")

    async def record(key: str, message: str = "cordoned by rollback of alert abc") -> bool:
        result = await writer.events.record_event(
            kind="Node",
            namespace="",
            name=node,
            uid=uid,
            reason="NodesyncCordon",
            message=message,
            type="Warning",
            key=key,
        )
        return result.changed

    assert await record(key)
    assert not await record(key, "cordoned again")  # a retry, or a restarted controller
    assert await record(f"plan-{node}/step-1")
    first = cluster.get(f"{events}/{event_name(node, key)}")
    assert first["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}
    assert (first["reason"], first["type"], first["count"]) == ("NodesyncCordon", "Warning", 1)
    assert first["source"] == {"component": "nodesync-controller"}
    assert first["firstTimestamp"] == first["lastTimestamp"] == "2027-01-15T08:00:00Z"
    # Found by the uid, as describe looks for them; a Node's are in default.
    by_uid = cluster.get(f"{cluster.path('events')}?fieldSelector=involvedObject.uid={uid}")
    assert (
        sorted((e["metadata"]["namespace"], e["message"]) for e in by_uid["items"])
        == [("default", "cordoned by rollback of alert abc")] * 2
    )

    def creates() -> list[int]:
        names = (event_name(node, key), event_name(node, f"plan-{node}/step-1"))
        found = [r for n in names for r in cluster.requests(verb="create", name=n)]
        return sorted(r.code for r in found)

    await cluster.expect(creates, [201, 201, 409])


async def test_pod_events_go_to_the_pods_namespace(
    cluster: Cluster, controller_api: KubeAPI, node: str
) -> None:
    created = pod(cluster, "web", node)
    writer = KubeWriter(controller_api, component="nodesync-test")
    result = await writer.events.record_event(
        kind="Pod",
        namespace=cluster.namespace,
        name="web",
        uid=created["metadata"]["uid"],
        reason="NodesyncEvict",
        message="x" * 5000,
        key="k",
    )
    assert result.changed
    (event,) = cluster.get(cluster.path("events", namespace=cluster.namespace))["items"]
    assert event["involvedObject"]["namespace"] == cluster.namespace
    assert event["involvedObject"]["uid"] == created["metadata"]["uid"]
    assert event["source"] == {"component": "nodesync-test"}
    assert len(event["message"]) == 1024
    assert event["type"] == "Normal"


# kubectl against the test server is tests/sim's; here, against the real 1.20.
@pytest.mark.parametrize("cluster", [REAL], indirect=True)
async def test_events_show_in_kubectl_describe(
    cluster: Cluster, controller_api: KubeAPI, node: str
) -> None:
    assert isinstance(cluster, RealCluster)
    node_uid = cluster.get(cluster.path("nodes", node))["metadata"]["uid"]
    pod_uid = pod(cluster, "web", node)["metadata"]["uid"]
    writer = KubeWriter(controller_api)
    key = f"plan-{node}/cordon"
    cluster.cleanup.delete_later(f"{cluster.path('events', namespace='default')}/"
                                 f"{event_name(node, key)}")  # fmt: skip
    for kind, namespace, name, uid, reason, message, type_, k in (
        ("Node", "", node, node_uid, "NodesyncCordon", f"cordoned {node}", "Warning", key),
        ("Node", "", node, node_uid, "NodesyncCordon", "cordoned again", "Warning", key),
        ("Pod", cluster.namespace, "web", pod_uid, "NodesyncEvict", "evicted web", "Normal", "e"),
    ):
        await writer.events.record_event(
            kind=kind, namespace=namespace, name=name, uid=uid, reason=reason,
            message=message, type=type_, key=k,
        )  # fmt: skip
    server = cluster.server
    # kubectl here is newer than the server; its describe still works against 1.20.
    assert "Client Version: v1." in await asyncio.to_thread(_kubectl, server, "version", "--client")
    described = await asyncio.to_thread(_kubectl, server, "describe", "node", node)
    events = described.split("\nEvents:", 1)[1]
    assert "Warning  NodesyncCordon" in events, described
    assert f"cordoned {node}" in events
    assert "cordoned again" not in events
    described = await asyncio.to_thread(
        _kubectl, server, "describe", "pod", "web", "--namespace", cluster.namespace
    )
    assert "Normal  NodesyncEvict" in described.split("\nEvents:", 1)[1], described


def test_event_names_are_deterministic_and_valid() -> None:
    assert event_name("node-a", "k") == event_name("node-a", "k")
    assert event_name("node-a", "k") != event_name("node-a", "k2")
    long = event_name("n" * 300, "k")
    assert len(long) <= 253
    assert long.startswith("nnn")
    assert ".nodesync-" in long


async def test_event_type_must_be_normal_or_warning(controller_api: KubeAPI) -> None:
    with pytest.raises(ValueError, match="Normal or Warning"):
        await KubeWriter(controller_api).events.record_event(
            kind="Node",
            namespace="",
            name="node-a",
            uid="",
            reason="R",
            message="m",
            type="Bad",
            key="k",
        )
