"""A simulated node's life as the API server sees it: registration, Lease renewals, conditions,
pods, faults, evictions; against the in-process test API server over the real client."""

from __future__ import annotations

import itertools
import time
from datetime import datetime
from typing import Any

import pytest

from exporter.kube.api import KubeAPI
from exporter.kube.writer import KubeWriter
from exporter.model.kube import LEASE_NAMESPACE
from nodesync_sim.fake.apiserver import APIServer
from nodesync_sim.fake.apiserver.objects import Change
from nodesync_sim.fake.scaleout import timeline
from nodesync_sim.fake.scaleout.audit import WriteAudit
from nodesync_sim.fake.scaleout.scenario_file import parse
from nodesync_sim.fake.scaleout.simulator import Simulator, SimulatorError
from tests.sim.fake.scaleout.support import FAST, Env, doc, simulating
from tests.support.wait import until_async


def _wave(count: int = 1, **more: object) -> dict[str, object]:
    return {"name": "w", "count": count, "pods_per_node": 1, "daemonset_pods_per_node": 1, **more}


def _seconds(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def _status(env: Env, pod: str) -> dict[str, object]:
    found = env.pod(pod)
    assert found is not None, pod
    status = found["status"]
    assert isinstance(status, dict)
    return status


def _running(env: Env, pod: str) -> bool:
    found = env.pod(pod)
    return found is not None and found["status"].get("phase") == "Running"


def _container(env: Env, pod: str) -> dict[str, Any]:
    """The pod's first container status ({} before the kubelet reported one)."""
    statuses = _status(env, pod).get("containerStatuses")
    if not isinstance(statuses, list) or not statuses:
        return {}
    first = statuses[0]
    assert isinstance(first, dict)
    return first


async def test_a_node_registers_renews_its_lease_and_runs_its_pods() -> None:
    async with simulating(doc(waves=[_wave()])) as env:
        await until_async(
            lambda: env.server.store.try_get("nodes", "w-000"), timeout=10.0, what="registration"
        )
        node = env.node("w-000")
        assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "w-000"
        assert {c["type"] for c in node["status"]["conditions"]} == {
            "Ready",
            "MemoryPressure",
            "DiskPressure",
            "PIDPressure",
        }
        lease = await until_async(
            lambda: env.server.store.try_get("leases", "w-000", namespace=LEASE_NAMESPACE),
            timeout=10.0,
            what="the Lease",
        )
        assert lease["spec"]["holderIdentity"] == "w-000"
        assert lease["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
        first_renewal = lease["spec"]["renewTime"]
        await until_async(
            lambda: env.ready("w-000")["status"] == "True", timeout=10.0, what="Ready"
        )
        assert env.ready("w-000")["reason"] == "KubeletReady"
        await until_async(
            lambda: (
                env.server.store.get("leases", "w-000", namespace=LEASE_NAMESPACE)["spec"][
                    "renewTime"
                ]
                > first_renewal
            ),
            timeout=10.0,
            what="a renewal",
        )
        for pod in ("daemon-0-w-000", "app-w-000-0"):
            await until_async(lambda p=pod: env.pod(p), timeout=10.0, what=f"{pod} bound")  # type: ignore[misc]
            await until_async(
                lambda p=pod: _status(env, p).get("phase") == "Running",
                timeout=10.0,
                what=f"{pod} running",
            )
            container = _container(env, pod)
            assert "running" in container["state"]
            assert container["ready"] is True
        assert env.sim.runtimes["w-000"].has(env.pod("app-w-000-0")["metadata"]["uid"])  # type: ignore[index]
        heartbeat = env.ready("w-000")["lastHeartbeatTime"]
        await until_async(
            lambda: env.ready("w-000")["lastHeartbeatTime"] > heartbeat,
            timeout=10.0,
            what="a status heartbeat",
        )
        whats = [e.what for e in env.sim.timeline.of("w-000")]
        assert whats[:2] == [timeline.REGISTERED, timeline.NOT_READY]
        assert timeline.READY in whats


def _age(obj: dict[str, Any] | None) -> float:
    assert obj is not None
    return time.time() - _seconds(obj["metadata"]["creationTimestamp"])


async def test_old_nodes_were_created_long_ago_and_are_ready() -> None:
    old = {"count": 2, "age_seconds": 3600, "pods_per_node": 1, "daemonset_pods_per_node": 1}
    async with simulating(doc(old_nodes=old), waves=False) as env:
        for name in ("old-000", "old-001"):
            assert abs(_age(env.node(name)) - 3600) < 5
            ready = env.ready(name)
            assert ready["status"] == "True"
            assert time.time() - _seconds(ready["lastTransitionTime"]) > 3590
            # The node's own objects, created when it registered, are as old as the node.
            lease = env.server.store.get("leases", name, namespace=LEASE_NAMESPACE)
            assert abs(_age(lease) - 3600) < 5
            assert abs(_age(env.pod(f"daemon-0-{name}")) - 3600) < 5
            # What the node got later (the ReplicaSet pod, once it reported Ready) is new.
            app = await until_async(
                lambda n=name: env.pod(f"app-{n}-0"),  # type: ignore[misc]
                timeout=10.0,
                what="the app pod",
            )
            assert _age(app) < 60


async def test_what_others_create_while_an_old_node_registers_is_created_now() -> None:
    added: list[tuple[str, str]] = []
    node_creates = 0

    def prepare(server: APIServer, audit: WriteAudit) -> None:
        def hold_the_second_node(
            user: str, verb: str, resource: str, subresource: str, namespace: str, name: str
        ) -> bool:
            nonlocal node_creates
            if (verb, resource) == ("create", "nodes"):
                node_creates += 1
                if node_creates == 2:  # old-001's Node is slow: old-000 goes on meanwhile
                    server.faults.add_latency(3.0, path_prefix="/api/v1/nodes", verb="create")
            return audit(user, verb, resource, subresource, namespace, name)

        def record(change: Change) -> None:
            if change.type == "ADDED":
                added.append((change.rt.plural, change.obj.name))

        server.settings.authorizer = hold_the_second_node
        server.store.add_listener(record)

    old = {"count": 2, "age_seconds": 3600, "pods_per_node": 1}
    async with simulating(doc(old_nodes=old), waves=False, prepare=prepare) as env:
        # old-000, Ready, got its app pod bound while old-001 was registering.
        assert added.index(("pods", "app-old-000-0")) < added.index(("nodes", "old-001"))
        assert _age(env.pod("app-old-000-0")) < 60
        assert abs(_age(env.node("old-001")) - 3600) < 5


async def test_old_nodes_need_a_server_that_can_give_them_their_creation_times() -> None:
    async with APIServer() as server:
        api = KubeAPI(server.aio_configuration())
        try:
            sim = Simulator(parse(doc(old_nodes={"count": 1, "age_seconds": 60})), api)
            with pytest.raises(SimulatorError, match="created 60 s ago"):
                await sim.start()
            await sim.stop()
        finally:
            await api.close()


async def test_never_ready_and_cri_timeouts_keep_ready_false_with_their_reasons() -> None:
    wave = _wave(
        2,
        faults=[
            {"kind": "never_ready", "nodes": ["w-000"]},
            {"kind": "cri_timeouts", "nodes": ["w-001"], "at_seconds": 0, "for_seconds": 2},
        ],
    )
    async with simulating(doc(waves=[wave])) as env:
        # The Node itself: the kubelet knows it registers before the Node exists.
        await until_async(
            lambda: env.server.store.try_get("nodes", "w-001"), timeout=10.0, what="registration"
        )
        # As kubelet 1.20 says it (tests/realcluster/test_frozen_runtime.py reads its log).
        await until_async(
            lambda: env.ready("w-001")["message"] == "container runtime is down",
            timeout=10.0,
            what="runtime down",
        )
        assert (env.ready("w-001")["status"], env.ready("w-001")["reason"]) == (
            "False",
            "KubeletNotReady",
        )
        await until_async(
            lambda: env.ready("w-001")["status"] == "True", timeout=10, what="the runtime back"
        )
        ready = env.ready("w-000")
        assert (ready["status"], ready["reason"]) == ("False", "KubeletNotReady")
        assert "cni plugin not initialized" in ready["message"]
        # A node never Ready gets no ReplicaSet pods (the scheduler would not bind them).
        assert env.pod("app-w-000-0") is None
        assert env.pod("daemon-0-w-000") is not None


def _taints(env: Env, name: str) -> list[str]:
    return [t["key"] for t in env.node(name).get("spec", {}).get("taints") or []]


async def test_a_readiness_taint_holds_the_node_not_ready_until_it_is_removed() -> None:
    wave = _wave(
        3,
        faults=[
            {"kind": "readiness_taint", "nodes": ["w-000"], "for_seconds": 1.5},
            {"kind": "readiness_taint", "nodes": ["w-001"], "taint": "readiness.k8s.io/Net"},
            {"kind": "readiness_taint", "nodes": ["w-002"], "at_seconds": 1, "for_seconds": 3},
        ],
    )
    async with simulating(doc(waves=[wave])) as env:
        await until_async(
            lambda: env.server.store.try_get("nodes", "w-002"), timeout=10.0, what="registration"
        )
        # Registered with the taint, NotReady behind it as a CNI that is not up yet.
        assert _taints(env, "w-001") == ["readiness.k8s.io/Net"]
        await until_async(lambda: not _taints(env, "w-000"), timeout=10.0, what="taint removed")
        # The kubelet records Ready once its status post returned (the store has it first).
        ready_at = await until_async(
            lambda: env.sim.timeline.first("w-000", timeline.READY),
            timeout=10.0,
            what="Ready after it",
        )
        assert env.ready("w-000")["status"] == "True"
        removed = next(
            e.at
            for e in env.audit.entries
            if e.resource == "nodes"
            and e.name == "w-000"
            and e.verb == "patch"
            and e.subresource == ""
        )
        assert ready_at.at >= removed  # Ready once the taint is gone
        # A fault that starts after the registration taints the node then, and clears.
        await until_async(
            lambda: _taints(env, "w-002") == ["node.cilium.io/agent-not-ready"],
            timeout=10.0,
            what="a later taint",
        )
        await until_async(
            lambda: env.ready("w-002")["status"] == "False", timeout=10.0, what="NotReady then"
        )
        await until_async(lambda: not _taints(env, "w-002"), timeout=10.0, what="cleared")
        await until_async(
            lambda: env.ready("w-002")["status"] == "True", timeout=10.0, what="Ready again"
        )
        # The taint that never clears: the node stays NotReady, its app pods never bound.
        ready = env.ready("w-001")
        assert (ready["status"], ready["reason"]) == ("False", "KubeletNotReady")
        assert "cni plugin not initialized" in ready["message"]
        assert _taints(env, "w-001") == ["readiness.k8s.io/Net"]
        assert env.pod("app-w-001-0") is None


async def test_a_silent_kubelet_stops_its_lease_and_turns_unknown_then_comes_back() -> None:
    wave = _wave(faults=[{"kind": "lease_stops", "share": 1, "at_seconds": 1, "for_seconds": 3}])
    async with simulating(doc(waves=[wave])) as env:
        stopped = await until_async(
            lambda: env.sim.timeline.first("w-000", timeline.LEASE_STOPPED),
            timeout=10.0,
            what="the lease to stop",
        )
        lease = env.server.store.get("leases", "w-000", namespace=LEASE_NAMESPACE)
        last = _seconds(lease["spec"]["renewTime"])
        assert abs(last - float(stopped.detail)) < 0.01
        unknown = await until_async(
            lambda: env.sim.timeline.first("w-000", timeline.READY_UNKNOWN),
            timeout=10.0,
            what="Ready Unknown",
        )
        assert unknown.at - last >= FAST["node_monitor_grace_seconds"]
        ready = env.ready("w-000")
        assert (ready["status"], ready["reason"]) == ("Unknown", "NodeStatusUnknown")
        lease = env.server.store.get("leases", "w-000", namespace=LEASE_NAMESPACE)
        assert _seconds(lease["spec"]["renewTime"]) == last  # nothing renewed while silent
        await until_async(
            lambda: env.sim.timeline.first("w-000", timeline.LEASE_RESUMED),
            timeout=10.0,
            what="the lease back",
        )
        await until_async(
            lambda: env.ready("w-000")["status"] == "True", timeout=10.0, what="Ready again"
        )
        assert _seconds(env.ready("w-000")["lastTransitionTime"]) >= int(unknown.at)


async def test_pods_pending_stay_container_creating() -> None:
    wave = _wave(faults=[{"kind": "pods_pending", "share": 1}])
    async with simulating(doc(waves=[wave])) as env:
        await until_async(lambda: env.pod("app-w-000-0"), timeout=10.0, what="the pod bound")
        await until_async(
            lambda: any(
                e.detail == "default/app-w-000-0"
                for e in env.sim.timeline.of("w-000", timeline.POD_PENDING)
            ),
            timeout=10.0,
            what="the pod reported Pending",
        )
        status = _status(env, "app-w-000-0")
        assert status["phase"] == "Pending"
        assert _container(env, "app-w-000-0")["state"] == {
            "waiting": {"reason": "ContainerCreating"}
        }
        assert not env.sim.runtimes["w-000"].pod_uids()


@pytest.mark.parametrize(
    ("kind", "reason", "exit_code"), [("crash_loop", "Error", 1), ("oom_loop", "OOMKilled", 137)]
)
async def test_a_looping_container_restarts_with_back_off(
    kind: str, reason: str, exit_code: int
) -> None:
    wave = _wave(faults=[{"kind": kind, "share": 1}])
    async with simulating(doc(waves=[wave])) as env:
        await until_async(lambda: env.pod("app-w-000-0"), timeout=10.0, what="the pod bound")
        await until_async(
            lambda: _container(env, "app-w-000-0").get("restartCount", 0) >= 3,
            timeout=10.0,
            what="three restarts",
        )
        container = _container(env, "app-w-000-0")
        assert container["state"]["waiting"]["reason"] == "CrashLoopBackOff"
        terminated = container["lastState"]["terminated"]
        assert (terminated["reason"], terminated["exitCode"]) == (reason, exit_code)
        assert container["ready"] is False
        assert _status(env, "app-w-000-0")["phase"] == "Running"
        failures = [e.at for e in env.sim.timeline.of("w-000", timeline.POD_FAILED)]
        gaps = [b - a for a, b in itertools.pairwise(failures)]
        assert gaps[0] >= FAST["crash_backoff_seconds"] - 0.05
        assert max(gaps) < FAST["crash_backoff_max_seconds"] + 0.5
        assert _container(env, "daemon-0-w-000")["ready"] is True  # the other pod is fine


async def test_an_eviction_is_confirmed_by_the_kubelet_and_a_cordon_changes_nothing() -> None:
    async with simulating(doc(waves=[_wave(2)])) as env:
        for pod in ("app-w-000-0", "app-w-001-0"):
            await until_async(lambda p=pod: env.pod(p), timeout=10.0, what="bound")  # type: ignore[misc]
            await until_async(
                lambda p=pod: _status(env, p).get("phase") == "Running",
                timeout=10.0,
                what="running",
            )
        # A cordoned, tainted node keeps running its pods.
        env.server.store.patch(
            "nodes",
            "w-001",
            {
                "spec": {
                    "unschedulable": True,
                    "taints": [{"key": "nodesync.io/rollback", "effect": "NoSchedule"}],
                }
            },
        )
        pod = env.pod("app-w-000-0")
        assert pod is not None
        uid = pod["metadata"]["uid"]
        api = KubeAPI(env.server.aio_configuration())
        try:
            result = await KubeWriter(api).evictions.evict("default", "app-w-000-0", uid, timeout=5)
        finally:
            await api.close()
        assert result.outcome == "evicted"
        evicted_at = time.monotonic()
        await until_async(
            lambda: env.pod("app-w-000-0") is None, timeout=5, what="the kubelet to confirm"
        )
        # Confirmed well within its 30 s grace period, with a grace-0 delete of that uid.
        assert time.monotonic() - evicted_at < 5
        # The kubelet records the confirmation and removes what is left of the pod once the
        # server's answer reached it, which may be just after the pod left the store.
        await until_async(
            lambda: bool(env.sim.timeline.of("w-000", timeline.POD_DELETED)),
            timeout=10.0,
            what="the confirmation recorded",
        )
        assert not env.sim.runtimes["w-000"].has(uid)
        deletes = [e for e in env.audit.entries if e.verb == "delete" and e.resource == "pods"]
        # Only that pod (a delete whose answer came late on a busy machine is retried, and the
        # retry finds the pod gone: attempts are what the audit records).
        assert {e.name for e in deletes} == {"app-w-000-0"}
        posts = len(env.sim.timeline.of("w-001"))
        heartbeat = env.ready("w-001")["lastHeartbeatTime"]
        await until_async(
            lambda: env.ready("w-001")["lastHeartbeatTime"] > heartbeat,
            timeout=10.0,
            what="another status post",
        )
        assert _status(env, "app-w-001-0")["phase"] == "Running"
        assert len(env.sim.runtimes["w-001"].pod_uids()) == 2
        assert len(env.sim.timeline.of("w-001")) == posts


async def test_a_deleted_pod_is_stopped_in_the_runtime_before_the_kubelet_confirms() -> None:
    async with simulating(doc(waves=[_wave()])) as env:
        await until_async(lambda: _running(env, "app-w-000-0"), timeout=10.0, what="running")
        pod = env.pod("app-w-000-0")
        assert pod is not None
        uid = pod["metadata"]["uid"]
        runtime = env.sim.runtimes["w-000"]
        seen: list[tuple[str, list[str]]] = []  # (sandbox state, container states) at the DELETE

        def probe(
            user: str, verb: str, resource: str, subresource: str, namespace: str, name: str
        ) -> bool:
            if (verb, resource, name) == ("delete", "pods", "app-w-000-0"):
                snap = runtime.snapshot(time.time())
                sandboxes = [s.state.value for s in snap.sandboxes if s.uid == uid]
                containers = [c.state.value for c in snap.containers if c.pod_uid == uid]
                seen.append((",".join(sandboxes), containers))
            return env.audit(user, verb, resource, subresource, namespace, name)

        env.server.settings.authorizer = probe
        env.server.store.delete("pods", "app-w-000-0", namespace="default")
        assert env.pod("app-w-000-0") is not None  # Terminating until the kubelet confirms
        await until_async(
            lambda: env.pod("app-w-000-0") is None, timeout=10.0, what="the kubelet to confirm"
        )
        # Its first confirmation came once it was stopped; a repeat (its watch of pods had not
        # delivered the deletion yet) only finds it gone.
        assert seen[0] == ("notready", ["exited"])
        assert all("running" not in containers for _, containers in seen)
        # What was left of it goes once the confirmation's answer reached the kubelet, which
        # may be just after the pod left the store.
        await until_async(
            lambda: not runtime.has(uid), timeout=10.0, what="what was left of the pod removed"
        )


async def test_a_kubelet_whose_node_is_gone_still_confirms_deletions_and_stays_gone() -> None:
    async with simulating(doc(waves=[_wave(2)])) as env:
        await until_async(lambda: _running(env, "app-w-000-0"), timeout=10.0, what="running")
        env.server.store.delete("nodes", "w-000")
        gone = await until_async(
            lambda: env.sim.timeline.first("w-000", timeline.NODE_GONE),
            timeout=10.0,
            what="the kubelet to find its Node gone",
        )
        # As a real kubelet that runs on after its Node was deleted (the frozen-containerd run
        # of tests/realcluster/), it still stops a deleted pod and confirms the deletion.
        env.server.store.delete("pods", "app-w-000-0", namespace="default")
        await until_async(
            lambda: env.pod("app-w-000-0") is None, timeout=10.0, what="the kubelet to confirm"
        )

        def renewed_since(node: str, since: float) -> bool:
            lease = env.server.store.get("leases", node, namespace=LEASE_NAMESPACE)
            return _seconds(lease["spec"]["renewTime"]) > since

        # Five of its renewal periods later (the other node renews on): no renewal started
        # after it found the Node gone, and no Node registered again (it is never restarted).
        await until_async(
            lambda: renewed_since("w-001", gone.at + 1.0), timeout=10.0, what="w-001 renewing"
        )
        assert not renewed_since("w-000", gone.at + 0.5)
        assert env.server.store.try_get("nodes", "w-000") is None


async def test_the_pods_of_a_silent_node_stay_terminating_until_it_comes_back() -> None:
    silent = {"kind": "lease_stops", "nodes": ["w-000"], "at_seconds": 2, "for_seconds": 6}
    async with simulating(doc(waves=[_wave(2, faults=[silent])])) as env:
        for pod in ("app-w-000-0", "app-w-001-0"):
            await until_async(lambda p=pod: _running(env, p), timeout=10.0, what="running")  # type: ignore[misc]
        await until_async(
            lambda: env.sim.timeline.first("w-000", timeline.LEASE_STOPPED),
            timeout=10.0,
            what="the silence",
        )
        uid = env.server.store.get("pods", "app-w-000-0", namespace="default")["metadata"]["uid"]
        pending = env.server.store.delete(
            "pods", "app-w-000-0", namespace="default", grace_period_seconds=1
        )
        deadline = _seconds(pending["metadata"]["deletionTimestamp"])
        env.server.store.delete("pods", "app-w-001-0", namespace="default", grace_period_seconds=1)
        await until_async(
            lambda: env.pod("app-w-001-0") is None, timeout=10.0, what="the live kubelet to confirm"
        )

        def renewed_after_deadline() -> bool:
            lease = env.server.store.get("leases", "w-001", namespace=LEASE_NAMESPACE)
            return _seconds(lease["spec"]["renewTime"]) > deadline

        # The live node's Lease is renewed after the deadline: the server served that request
        # after any timer due at the deadline would have run.
        await until_async(renewed_after_deadline, timeout=10.0, what="a renewal after the deadline")
        assert env.sim.timeline.first("w-000", timeline.LEASE_RESUMED) is None, "too slow"
        terminating = env.pod("app-w-000-0")
        assert terminating is not None
        assert (
            terminating["metadata"]["deletionTimestamp"] == pending["metadata"]["deletionTimestamp"]
        )
        assert env.sim.runtimes["w-000"].has(uid)  # nobody stopped it
        await until_async(
            lambda: env.pod("app-w-000-0") is None, timeout=15, what="the confirmation once back"
        )
        assert env.sim.timeline.first("w-000", timeline.LEASE_RESUMED) is not None
        # Removed from the runtime once the confirmation's answer reached the kubelet (just
        # after the pod left the store).
        await until_async(
            lambda: not env.sim.runtimes["w-000"].has(uid), timeout=10.0, what="the pod removed"
        )
