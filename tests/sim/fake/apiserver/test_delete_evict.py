"""Graceful pod deletion, finalizers, and the Eviction subresource with PodDisruptionBudgets."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException, NotFoundException

from nodesync_sim.fake.apiserver import Store, ThreadedAPIServer
from tests.sim.fake.apiserver.helpers import pod_body, running_ready_pod


def test_unscheduled_pod_is_deleted_at_once(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("p1"))
    answer = core.delete_namespaced_pod("p1", "default")
    assert answer.metadata.name == "p1"  # pods answer with the deleted object
    with pytest.raises(NotFoundException):
        core.read_namespaced_pod("p1", "default")


def test_graceful_delete_then_grace_zero(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("p1", "n1"))
    pending = core.delete_namespaced_pod("p1", "default", grace_period_seconds=300)
    assert pending.metadata.deletion_timestamp is not None
    assert pending.metadata.deletion_grace_period_seconds == 300
    still = core.read_namespaced_pod("p1", "default")
    assert still.metadata.deletion_timestamp is not None  # Terminating
    core.delete_namespaced_pod("p1", "default", grace_period_seconds=0)
    with pytest.raises(NotFoundException):
        core.read_namespaced_pod("p1", "default")


@dataclass
class ServerClock:
    """The test API server's clock (Unix seconds); the test moves it."""

    now: float = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def test_nothing_deletes_a_terminating_pod_by_itself() -> None:
    """Past its deletionTimestamp a pod is still Terminating: only a grace-0 delete (its
    kubelet's) removes it, as on a real server."""
    clock = ServerClock()
    with (
        ThreadedAPIServer(store=Store(clock=clock)) as srv,
        client.ApiClient(srv.configuration()) as api,
    ):
        core = client.CoreV1Api(api)
        core.create_namespaced_pod("default", pod_body("p1", "n1"))
        core.delete_namespaced_pod("p1", "default", grace_period_seconds=300)
        clock.now += 1000
        # Shortened to a deadline that passed long ago.
        shortened = core.delete_namespaced_pod("p1", "default", grace_period_seconds=1)
        assert shortened.metadata.deletion_grace_period_seconds == 1
        deadline = shortened.metadata.deletion_timestamp.timestamp()
        assert deadline < clock.now
        # Requests served after it (a timer due now would have run first) find it Terminating.
        for _ in range(3):
            still = core.read_namespaced_pod("p1", "default")
            assert still.metadata.deletion_timestamp is not None
        assert srv.store.get("pods", "p1", namespace="default")["metadata"]["uid"]


def test_a_grace_zero_delete_with_the_uid_confirms_a_terminating_pod(
    core: client.CoreV1Api, server: ThreadedAPIServer
) -> None:
    created = core.create_namespaced_pod("default", pod_body("p1", "n1"))
    core.delete_namespaced_pod("p1", "default")  # the pod's 30 s grace period
    other_uid = client.V1DeleteOptions(
        grace_period_seconds=0, preconditions=client.V1Preconditions(uid="not-this-pod")
    )
    with pytest.raises(ApiException) as info:
        core.delete_namespaced_pod("p1", "default", body=other_uid)
    assert info.value.status == 409
    assert server.store.try_get("pods", "p1", namespace="default") is not None
    again = core.delete_namespaced_pod("p1", "default")  # a plain delete does not end the wait
    assert again.metadata.deletion_timestamp is not None
    confirm = client.V1DeleteOptions(
        grace_period_seconds=0, preconditions=client.V1Preconditions(uid=created.metadata.uid)
    )
    core.delete_namespaced_pod("p1", "default", body=confirm)
    assert server.store.try_get("pods", "p1", namespace="default") is None


def test_finished_pods_are_deleted_at_once(
    core: client.CoreV1Api, server: ThreadedAPIServer
) -> None:
    for phase in ("Succeeded", "Failed"):
        name = phase.lower()
        server.store.create(
            "pods",
            {
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
                "status": {"phase": phase},
            },
        )
        core.delete_namespaced_pod(name, "default")
        assert server.store.try_get("pods", name, namespace="default") is None


def test_grace_can_shorten_but_not_extend(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("p1", "n1"))
    core.delete_namespaced_pod("p1", "default", grace_period_seconds=300)
    longer = core.delete_namespaced_pod("p1", "default", grace_period_seconds=600)
    assert longer.metadata.deletion_grace_period_seconds == 300
    shorter = core.delete_namespaced_pod("p1", "default", grace_period_seconds=100)
    assert shorter.metadata.deletion_grace_period_seconds == 100


def test_finalizers_hold_a_deleted_object(core: client.CoreV1Api) -> None:
    core.create_node(
        client.V1Node(metadata=client.V1ObjectMeta(name="n1", finalizers=["example.com/hold"]))
    )
    core.delete_node("n1")
    held = core.read_node("n1")
    assert held.metadata.deletion_timestamp is not None
    core.patch_node("n1", {"metadata": {"finalizers": None}})
    with pytest.raises(NotFoundException):
        core.read_node("n1")


def _eviction(name: str) -> client.V1Eviction:
    return client.V1Eviction(
        api_version="policy/v1",
        kind="Eviction",
        metadata=client.V1ObjectMeta(name=name, namespace="default"),
    )


def _pdb(policy: client.PolicyV1Api, **spec: object) -> None:
    policy.create_namespaced_pod_disruption_budget(
        "default",
        client.V1PodDisruptionBudget(
            metadata=client.V1ObjectMeta(name="web"),
            spec=client.V1PodDisruptionBudgetSpec(
                selector=client.V1LabelSelector(match_labels={"app": "web"}), **spec
            ),
        ),
    )


def _evict_raw(core: client.CoreV1Api, name: str) -> tuple[int, dict[str, object]]:
    try:
        _, code, _ = core.create_namespaced_pod_eviction_with_http_info(
            name, "default", _eviction(name)
        )
    except ApiException as exc:
        return exc.status, json.loads(exc.body)
    return code, {}


def test_eviction_without_pdb_deletes_gracefully(
    core: client.CoreV1Api, server: ThreadedAPIServer
) -> None:
    running_ready_pod(server, "p1", {"app": "web"})
    code, _ = _evict_raw(core, "p1")
    assert code == 201
    pod = server.store.get("pods", "p1", namespace="default")
    assert pod["metadata"]["deletionTimestamp"]
    assert server.counters.count(verb="create", resource="pods/eviction", code=201) == 1


def test_eviction_blocked_by_pdb_min_available(
    core: client.CoreV1Api, policy: client.PolicyV1Api, server: ThreadedAPIServer
) -> None:
    running_ready_pod(server, "web-1", {"app": "web"})
    running_ready_pod(server, "web-2", {"app": "web"})
    _pdb(policy, min_available=1)
    assert _evict_raw(core, "web-1")[0] == 201
    code, status = _evict_raw(core, "web-2")
    assert code == 429
    assert status["reason"] == "TooManyRequests"
    details = status["details"]
    assert isinstance(details, dict)
    assert details["causes"][0]["reason"] == "DisruptionBudget"
    assert "needs 1 healthy pods and has 1 currently" in details["causes"][0]["message"]
    assert (
        server.store.get("pods", "web-2", namespace="default")["metadata"].get("deletionTimestamp")
        is None
    )


def test_eviction_with_max_unavailable_percent(
    core: client.CoreV1Api, policy: client.PolicyV1Api, server: ThreadedAPIServer
) -> None:
    for i in range(4):
        running_ready_pod(server, f"web-{i}", {"app": "web"})
    _pdb(policy, max_unavailable="50%")
    assert [_evict_raw(core, f"web-{i}")[0] for i in range(4)] == [201, 201, 429, 429]


def test_unhealthy_pod_evicted_when_budget_is_healthy(
    core: client.CoreV1Api, policy: client.PolicyV1Api, server: ThreadedAPIServer
) -> None:
    running_ready_pod(server, "web-1", {"app": "web"})
    server.store.create(
        "pods",
        {
            "metadata": {"name": "web-2", "namespace": "default", "labels": {"app": "web"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]},
        },
    )
    _pdb(policy, min_available=1)
    assert _evict_raw(core, "web-2")[0] == 201  # not Ready: does not count against the budget
    assert _evict_raw(core, "web-1")[0] == 429


def test_eviction_of_missing_pod_is_not_found(core: client.CoreV1Api) -> None:
    assert _evict_raw(core, "ghost")[0] == 404


def test_eviction_name_mismatch_is_bad_request(
    core: client.CoreV1Api, server: ThreadedAPIServer
) -> None:
    running_ready_pod(server, "p1", {"app": "web"})
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod_eviction("p1", "default", _eviction("other"))
    assert info.value.status == 400
