"""The rollback executor against the test API server with the real client: each step once however
often an alert arrives, PDBs respected, guards refusing in the journal, Events and metrics, and
nothing written in a dry run. Writes and Events are counted by the server itself.

The node agents' side of the runtime cleanup is played by ``executor_harness.Agent``, which
answers each cleanup request through the API server's store (not as counted API writes)."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from exporter.controller.executor import Executor
from exporter.kube.writer import KubeWriter
from exporter.model.kube import Taint
from exporter.model.planner import plan_alert
from exporter.model.rollback import (
    CLEANUP_REQUEST_ANNOTATION,
    CLEANUP_STATUS_ANNOTATION,
    Plan,
    PlanState,
    StepState,
    cleanup_request_id,
)
from tests.controller.executor_harness import (
    Bench,
    alert,
    bench,
    names,
    nodes_patched,
    running,
    settings,
    step_states,
    until,
)

ROLLBACK_EVENTS = [
    "NodesyncCleanupRuntime",
    "NodesyncCordon",
    "NodesyncDrain",
    "NodesyncTaint",
    "NodesyncVerify",
]


@pytest.fixture
async def b(tmp_path: Path) -> AsyncIterator[Bench]:
    async with bench(tmp_path) as made:
        yield made


async def test_the_same_alert_three_times_runs_each_step_once(b: Bench) -> None:
    b.add_node("new-1")
    b.add_node("old-1", age=3 * 86_400, ready="True")
    app_uid = b.add_pod("app", "new-1")
    b.add_pod("logs", "new-1", owner="DaemonSet")
    b.add_pod("elsewhere", "old-1")
    await b.wait_cluster(2)
    executor = b.executor()
    for _ in range(3):
        await b.deliver(alert("new-1"))
        await b.settled(executor)

    [plan] = await b.plans()
    assert plan.state is PlanState.DONE
    assert step_states(plan) == [
        ("cordon", "done"),
        ("taint", "done"),
        ("drain", "done"),
        ("cleanup_runtime", "done"),
        ("verify", "done"),
    ]
    node = b.node("new-1")
    assert node["spec"]["unschedulable"] is True
    assert node["spec"]["taints"] == [{"key": "nodesync.io/rollback", "effect": "NoSchedule"}]
    annotations = node["metadata"]["annotations"]
    assert annotations[CLEANUP_REQUEST_ANNOTATION] == cleanup_request_id(plan.id)
    assert json.loads(annotations[CLEANUP_STATUS_ANNOTATION])["state"] == "done"
    # every write once: cordon, taint, cleanup request; one eviction; one Event per step
    assert nodes_patched(b.server) == 3
    assert b.server.counters.count("create", "pods/eviction") == 1
    assert b.server.counters.writes() == 3 + 1 + 5
    assert b.event_reasons("new-1") == ROLLBACK_EVENTS
    evicted = b.store.get("pods", "app", namespace="default")
    assert evicted["metadata"]["uid"] == app_uid
    assert evicted["metadata"].get("deletionTimestamp")  # graceful: Terminating
    assert (
        b.store.get("pods", "logs", namespace="default")["metadata"].get("deletionTimestamp")
        is None
    )  # DaemonSet pods stay
    assert b.agent.answered == [("new-1", cleanup_request_id(plan.id))]
    assert executor.metrics.actions("cordon", "done") == 1
    assert executor.metrics.actions("verify", "done") == 1
    assert sum(executor.metrics.refusals(r) for r in ("resolved", "in_progress")) == 0


async def test_delete_nodes_ends_with_the_node_deleted(b: Bench) -> None:
    b.add_node("new-1")
    await b.wait_cluster(1)
    executor = b.executor(settings(delete_nodes=True))
    await b.deliver(alert("new-1"))
    await b.settled(executor)
    [plan] = await b.plans()
    assert plan.state is PlanState.DONE
    assert step_states(plan)[-1] == ("delete_node", "done")
    assert b.store.try_get("nodes", "new-1") is None
    assert b.server.counters.count("delete", "nodes") == 1
    assert "NodesyncDeleteNode" in b.event_reasons("new-1")


async def test_a_pdb_that_blocks_eviction_fails_the_drain_and_forces_nothing(b: Bench) -> None:
    b.add_node("new-1")
    b.add_pod("db-0", "new-1", labels={"app": "db"})
    b.store.create(
        "poddisruptionbudgets",
        {
            "metadata": {"name": "db", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}},
        },
        namespace="default",
    )
    await b.wait_cluster(1)
    executor = b.executor(settings(eviction_timeout=0.5))
    await b.deliver(alert("new-1"))
    await b.settled(executor)

    [plan] = await b.plans()
    assert plan.state is PlanState.FAILED
    assert plan.reason == "pdb_blocked"
    assert step_states(plan) == [
        ("cordon", "done"),
        ("taint", "done"),
        ("drain", "failed"),
        ("cleanup_runtime", "skipped"),
        ("verify", "skipped"),
    ]
    assert "db-0" in plan.steps[2].detail
    assert "nothing was forced" in plan.steps[2].detail
    # retried, refused each time, never deleted
    assert b.server.counters.count("create", "pods/eviction", 429) >= 2
    assert b.server.counters.count("create", "pods/eviction", 201) == 0
    assert b.server.counters.count("delete", "pods") == 0
    assert (
        b.store.get("pods", "db-0", namespace="default")["metadata"].get("deletionTimestamp")
        is None
    )
    assert CLEANUP_REQUEST_ANNOTATION not in (b.node("new-1")["metadata"].get("annotations") or {})
    [failed] = b.events("NodesyncDrainFailed")
    assert failed["type"] == "Warning"
    assert "PodDisruptionBudget" in failed["message"]
    assert executor.metrics.actions("drain", "failed") == 1
    # delivered again: the failed plan is not run again for the same episode
    await b.deliver(alert("new-1"))
    await b.settled(executor)
    assert b.server.counters.count("create", "pods/eviction", 201) == 0
    assert len(await b.plans()) == 1


async def test_a_refused_eviction_is_not_retried_and_its_warning_names_the_node(
    b: Bench,
) -> None:
    """A 400 (the server will not take this request, e.g. an Eviction version it does not
    serve) fails the step at the first attempt; the Warning Event carries the Node's uid, so
    ``kubectl describe node`` shows it."""
    b.add_node("new-1")
    b.add_pod("web-0", "new-1")
    await b.wait_cluster(1)
    b.server.faults.fail_next(5, 400, path_prefix="/api/v1/namespaces/default/pods/web-0/eviction")
    executor = b.executor(settings())
    await b.deliver(alert("new-1"))
    await b.settled(executor)

    [plan] = await b.plans()
    assert plan.state is PlanState.FAILED
    assert plan.reason == "api_error"
    assert ("drain", "failed") in step_states(plan)
    assert plan.steps[2].attempts == 1
    assert b.server.counters.count("create", "pods/eviction", 400) == 1
    [failed] = b.events("NodesyncDrainFailed")
    assert failed["type"] == "Warning"
    assert failed["involvedObject"]["uid"] == b.node("new-1")["metadata"]["uid"]


async def test_thirty_alerts_for_thirty_of_a_hundred_new_nodes(b: Bench) -> None:
    for i in range(100):
        b.add_node(f"new-{i:03}", age=300 - i)
    await b.wait_cluster(100)
    executor = b.executor(settings(max_rollback_fraction=0.1, max_rollbacks=100))
    await b.deliver(*(alert(f"new-{i:03}") for i in range(30)))
    await b.settled(executor, within=40)

    done = await b.plans(PlanState.DONE)
    refused = await b.plans(PlanState.REFUSED)
    assert len(done) == 10
    assert len(refused) == 20
    assert {r.reason for r in refused} == {"blast_radius_fraction"}
    cordoned = [
        n["metadata"]["name"] for n in b.store.list("nodes") if n["spec"].get("unschedulable")
    ]
    assert sorted(cordoned) == names(done)
    assert executor.metrics.refusals("blast_radius_fraction") == 20
    assert executor.metrics.actions("cordon", "done") == 10
    refusal_events = b.events("NodesyncRefused")
    assert sorted(e["involvedObject"]["name"] for e in refusal_events) == names(refused)
    assert all("blast_radius_fraction" in e["message"] for e in refusal_events)
    assert all(e["type"] == "Warning" for e in refusal_events)
    status = executor.status()
    assert (status.budget_absolute, status.budget_wave_fraction) == (90, 0)


async def test_old_nodes_failing_together_pause_every_rollback(b: Bench) -> None:
    for i in range(10):
        b.add_node(f"old-{i}", age=3 * 86_400, ready="False" if i < 4 else "True", changed_ago=60)
    for i in range(5):
        b.add_node(f"new-{i}")
    await b.wait_cluster(15)
    executor = b.executor()
    await b.deliver(*(alert(f"new-{i}") for i in range(5)))
    for _ in range(3):
        await b.settled(executor)

    assert await b.plans() == []
    assert nodes_patched(b.server) == 0
    assert b.server.counters.count("create", "pods/eviction") == 0
    assert executor.metrics.refusals("correlated_failure") == 5
    assert executor.status().paused is True
    waiting = b.events("NodesyncWaiting")
    assert sorted(e["involvedObject"]["name"] for e in waiting) == [f"new-{i}" for i in range(5)]
    assert all("correlated_failure" in e["message"] for e in waiting)

    # the old nodes recover: the held alerts run
    for i in range(4):
        obj = b.node(f"old-{i}")
        obj["status"]["conditions"][0]["status"] = "True"
        b.store.replace("nodes", obj, subresource="status")

    async def resumed() -> bool:
        return executor.status().paused is False

    await until(resumed, "the pause to end")
    await b.settled(executor)
    assert len(await b.plans(PlanState.DONE)) == 1  # 10 % of a 5-node wave: one node
    assert Counter(r.reason for r in await b.plans(PlanState.REFUSED)) == {
        "blast_radius_fraction": 4
    }


async def test_dry_run_writes_nothing(b: Bench) -> None:
    b.add_node("cp-1", labels={"node-role.kubernetes.io/control-plane": ""})
    for i in range(20):
        b.add_node(f"new-{i:02}")
        b.add_pod(f"app-{i}", f"new-{i:02}")
    await b.wait_cluster(21)
    executor = b.executor(settings(dry_run=True, max_rollbacks=100))
    b.server.counters.reset()
    alerts = [alert(f"new-{i:02}") for i in range(5)]
    alerts += [alert("cp-1"), alert("new-00", "evict_pod", namespace="default", pod="app-0")]
    await b.deliver(*alerts)
    await b.settled(executor)
    await b.settled(executor)

    assert b.server.counters.writes() == 0
    assert b.events() == []
    dry = await b.plans(PlanState.DRY_RUN)
    refused = await b.plans(PlanState.REFUSED)
    assert len(dry) == 3  # two of a 20-node wave, and the eviction
    assert all(r.dry_run for r in dry + refused)
    assert Counter(r.reason for r in refused) == {"blast_radius_fraction": 3, "control_plane": 1}
    assert all(s.state.value == "pending" for r in dry for s in r.steps)
    assert executor.metrics.actions("cordon", "dry_run") == 2
    assert executor.metrics.actions("evict_pod", "dry_run") == 1
    assert executor.metrics.actions("cordon", "done") == 0
    assert executor.metrics.refusals("control_plane") == 1


async def test_nodes_never_touched(b: Bench) -> None:
    b.add_node("cp-1", labels={"node-role.kubernetes.io/control-plane": ""})
    b.add_node("prot-1", labels={"nodesync.io/protected": "true"})
    b.add_node("ca-1", taints=[{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}])
    b.add_node("old-1", age=3 * 86_400, ready="True", lease_age=600)
    for name in ("cp-1", "prot-1", "ca-1", "old-1"):
        b.add_pod(f"app-{name}", name)
    await b.wait_cluster(4)
    executor = b.executor()
    alerts = [alert(n) for n in ("cp-1", "prot-1", "ca-1", "old-1")]
    alerts += [alert(n, "evict_pod", namespace="default", pod=f"app-{n}") for n in ("cp-1", "ca-1")]
    alerts += [alert(n, "cleanup_orphans") for n in ("prot-1", "old-1")]
    await b.deliver(*alerts)
    await b.settled(executor)

    refused = await b.plans(PlanState.REFUSED)
    assert len(refused) == 8
    assert Counter((r.node, r.reason) for r in refused) == {
        ("cp-1", "control_plane"): 2,
        ("prot-1", "protected"): 2,
        ("ca-1", "other_remediator"): 2,
        ("old-1", "scale_out_window"): 2,
    }
    assert nodes_patched(b.server) == 0
    assert b.server.counters.count("create", "pods/eviction") == 0
    assert b.event_reasons() == ["NodesyncRefused"] * 8
    assert executor.metrics.refusals("control_plane") == 2
    assert executor.metrics.refusals("scale_out_window") == 2


async def test_planner_refusals(b: Bench) -> None:
    b.add_node("new-1")
    await b.wait_cluster(1)
    executor = b.executor()
    await b.deliver(
        alert("new-1", "none", fingerprint="a"),
        alert("new-1", "reboot", fingerprint="b"),
        alert("gone", fingerprint="c"),
        alert("new-1", "evict_pod", fingerprint="d"),
    )
    await b.settled(executor)
    assert Counter(r.reason for r in await b.plans(PlanState.REFUSED)) == {
        "no_action": 1,
        "unknown_action": 1,
        "unknown_node": 1,
        "missing_label": 1,
    }
    assert nodes_patched(b.server) == 0
    # Events only where a node exists to carry them
    assert b.event_reasons() == ["NodesyncRefused"] * 3


async def test_evict_pod_once_and_a_gone_pod_is_done(b: Bench) -> None:
    b.add_node("new-1")
    b.add_pod("stuck", "new-1")
    await b.wait_cluster(1)
    executor = b.executor()
    for _ in range(3):
        await b.deliver(
            alert("new-1", "evict_pod", fingerprint="a", namespace="default", pod="stuck")
        )
        await b.deliver(
            alert("new-1", "evict_pod", fingerprint="b", namespace="default", pod="never-was")
        )
        await b.settled(executor)
    plans = await b.plans(PlanState.DONE)
    assert len(plans) == 2
    details = sorted(p.steps[0].detail for p in plans)
    assert "no longer on node" in details[1]
    assert b.server.counters.count("create", "pods/eviction") == 1
    assert nodes_patched(b.server) == 0
    [event] = [e for e in b.events("NodesyncEvictPod") if e["involvedObject"]["kind"] == "Pod"
               and e["involvedObject"]["name"] == "stuck"]  # fmt: skip
    assert event["involvedObject"]["namespace"] == "default"


async def test_cleanup_orphans_asks_the_agent_and_verifies(b: Bench) -> None:
    b.add_node("new-1", ready="True")
    await b.wait_cluster(1)
    executor = b.executor()
    await b.deliver(alert("new-1", "cleanup_orphans", kind="orphan_sandbox"))
    await b.settled(executor)
    [plan] = await b.plans(PlanState.DONE)
    assert step_states(plan) == [("cleanup_runtime", "done"), ("verify", "done")]
    assert "removed 2 sandboxes and 3 containers" in plan.steps[0].detail
    assert not b.node("new-1")["spec"].get("unschedulable")
    assert nodes_patched(b.server) == 1


async def test_a_failed_or_missing_cleanup_fails_the_plan(b: Bench) -> None:
    b.add_node("new-1")
    b.add_node("new-2")
    await b.wait_cluster(2)
    b.agent.state = "failed"
    executor = b.executor(settings(max_rollback_fraction=1.0))
    await b.deliver(alert("new-1"))
    await b.settled(executor)
    [plan] = await b.plans()
    assert (plan.state, plan.reason) == (PlanState.FAILED, "cleanup_failed")
    assert "runtime unavailable" in plan.steps[3].detail

    b.agent.hold = True
    executor = b.executor(settings(max_rollback_fraction=1.0, cleanup_timeout=0.3))
    await b.deliver(alert("new-2"))
    await b.settled(executor)
    [_, second] = await b.plans()
    assert (second.state, second.reason) == (PlanState.FAILED, "cleanup_timeout")
    assert [e["type"] for e in b.events("NodesyncCleanupRuntimeFailed")] == ["Warning"] * 2


async def test_an_alert_resolved_before_its_plan_started_is_cancelled(b: Bench) -> None:
    b.add_node("new-1")
    await b.wait_cluster(1)
    firing = alert("new-1")
    await b.deliver(firing)
    executor = b.executor()
    # planned (e.g. by a controller that stopped before it started the plan) ...
    planned = plan_alert(firing, b.cluster.view(), delete_nodes=False)
    assert isinstance(planned, Plan)
    await b.journal.save_plan(firing.key, planned, dry_run=False, state=PlanState.PENDING)
    # ... and then the alert resolved
    resolved = alert("new-1", status="resolved", starts_at=firing.starts_at)
    await b.deliver(resolved)
    await b.settled(executor)
    [plan] = await b.plans()
    assert plan.state is PlanState.CANCELLED
    assert b.server.counters.writes() == 0


async def test_a_node_that_recovered_is_not_rolled_back(b: Bench) -> None:
    b.add_node("new-1", ready="True", lease_age=2)
    await b.wait_cluster(1)
    executor = b.executor()
    await b.deliver(alert("new-1"))
    await b.settled(executor)
    [plan] = await b.plans()
    assert (plan.state, plan.reason) == (PlanState.CANCELLED, "recovered")
    assert nodes_patched(b.server) == 0
    assert b.event_reasons() == ["NodesyncCordonSkipped"]
    # its budget is released: nothing was touched
    assert executor.status().budget_absolute == 10


class Toggle:
    """A leadership the test hands over and takes back."""

    def __init__(self) -> None:
        self.is_leader = False
        self._event = asyncio.Event()

    def lead(self, on: bool) -> None:
        self.is_leader = on
        if on:
            self._event.set()
        else:
            self._event.clear()

    async def wait_leader(self) -> None:
        await self._event.wait()


async def test_only_the_leader_executes(b: Bench) -> None:
    b.add_node("new-1")
    b.add_node("new-2")
    await b.wait_cluster(2)
    b.agent.hold = True
    one, two = Toggle(), Toggle()
    first = b.executor(settings(max_rollback_fraction=1.0), leadership=one)
    second = b.executor(settings(max_rollback_fraction=1.0), leadership=two)
    await b.deliver(alert("new-1"))
    async with running(first), running(second):
        await until(_passes(first, 0), "the executors to start")
        assert not first.status().leader
        assert not second.status().leader

        one.lead(True)

        async def cleaning() -> bool:
            plans = await b.plans()
            return bool(plans) and plans[0].steps[2].state.value == "done"

        await until(cleaning, "the leader to run the plan up to the cleanup")
        assert first.status().leader
        assert not second.status().leader
        one.lead(False)  # the lead moves to the other controller mid-plan
        first.wakeup.set()
        await until(_not_leading(first), "the first executor to stop")
        b.agent.hold = False
        two.lead(True)
        await until(_done(b, 1), "the new leader to finish the plan")
    assert [first.metrics.actions(k, "done") for k in ("cordon", "cleanup_runtime")] == [1, 0]
    assert [second.metrics.actions(k, "done") for k in ("cordon", "cleanup_runtime")] == [0, 1]
    assert nodes_patched(b.server) == 3
    assert Counter(e["reason"] for e in b.events()) == dict.fromkeys(ROLLBACK_EVENTS, 1)


def _passes(executor: Executor, at_least: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return executor.passes >= at_least

    return check


def _not_leading(executor: Executor) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return not executor.leading

    return check


def _done(b: Bench, n: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return len(await b.plans(PlanState.DONE)) == n

    return check


async def _saved_plan(b: Bench, node: str) -> int:
    firing = alert(node)
    await b.deliver(firing)
    planned = plan_alert(firing, b.cluster.view(), delete_nodes=False)
    assert isinstance(planned, Plan)
    return await b.journal.save_plan(firing.key, planned, dry_run=False, state=PlanState.RUNNING)


async def test_a_node_created_again_under_its_name_is_not_the_planned_node(b: Bench) -> None:
    b.add_node("new-1")
    await b.wait_cluster(1)
    await _saved_plan(b, "new-1")
    b.store.delete("nodes", "new-1")
    b.add_node("new-1", age=-2, lease_age=None)  # a new machine took the name after the plan
    await b.settled(b.executor())
    [plan] = await b.plans()
    assert (plan.state, plan.reason) == (PlanState.DONE, "node_gone")
    assert step_states(plan)[0] == ("cordon", "skipped")
    assert "created again" in plan.steps[0].detail
    assert nodes_patched(b.server) == 0
    assert not b.node("new-1")["spec"].get("unschedulable")


async def test_resumed_after_a_failed_step_the_plan_fails_without_acting(b: Bench) -> None:
    b.add_node("new-1")
    await b.wait_cluster(1)
    plan_id = await _saved_plan(b, "new-1")
    await b.journal.update_step(plan_id, 0, StepState.DONE, "cordoned the node", 1)
    await b.journal.update_step(plan_id, 1, StepState.FAILED, "API error", 5)
    await b.settled(b.executor())
    [plan] = await b.plans()
    assert (plan.state, plan.reason) == (PlanState.FAILED, "taint failed")
    assert [s for _, s in step_states(plan)] == ["done", "failed", "skipped", "skipped", "skipped"]
    assert b.server.counters.writes() == 0


async def test_a_recovered_node_is_given_back_when_the_plan_resumes(b: Bench) -> None:
    b.add_node("new-1")
    await b.wait_cluster(1)
    executor = b.executor()
    plan_id = await _saved_plan(b, "new-1")
    # cordoned and tainted by a controller that then stopped ...
    writer = KubeWriter(b.api)
    await writer.cordon("new-1")
    await writer.add_taint("new-1", Taint("nodesync.io/rollback", "NoSchedule"))
    await b.journal.update_step(plan_id, 0, StepState.DONE, "cordoned the node", 1)
    await b.journal.update_step(plan_id, 1, StepState.DONE, "tainted", 1)
    # ... and meanwhile the node recovered
    obj = b.node("new-1")
    obj["status"]["conditions"][0]["status"] = "True"
    b.store.replace("nodes", obj, subresource="status")

    async def ready_in_view() -> bool:
        seen = b.cluster.view().node("new-1")
        return seen is not None and seen.conditions[0].status == "True"

    await until(ready_in_view, "the view to see the node Ready")
    b.server.counters.reset()
    await b.settled(executor)
    [plan] = await b.plans()
    assert (plan.state, plan.reason) == (PlanState.CANCELLED, "recovered")
    node = b.node("new-1")
    assert not node["spec"].get("unschedulable")
    assert not node["spec"].get("taints")
    assert nodes_patched(b.server) == 2
    assert b.event_reasons("new-1") == ["NodesyncDrainSkipped", "NodesyncUndone"]
    assert executor.metrics.actions("undo", "done") == 1
