"""The rollback executor against the test API server with the real client: one NodeRollback per
decision and per node, each step once however often an alert arrives, the status the record,
PDBs respected, waits that hold no slot, guards refusing in the journal, Events and metrics, and
nothing written in a dry run. Writes and Events are counted by the server itself.

The node agents' side of the runtime cleanup is played by ``executor_harness.Agent``, which
answers each cleanup request through the API server's store (not as counted API writes)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from exporter.controller.executor import Executor
from exporter.kube.noderollbacks import RollbackWrites
from exporter.kube.writer import KubeWriter
from exporter.model.alerts import Alert
from exporter.model.guards import GuardState
from exporter.model.kube import Taint
from exporter.model.rollback import (
    CLEANUP_REQUEST_ANNOTATION,
    CLEANUP_STATUS_ANNOTATION,
    Action,
    NodeRollback,
    Phase,
    RollbackStatus,
    StepKind,
    StepState,
)
from exporter.model.rollback_state import (
    BEFORE_ABSENT,
    OBSERVED_BEFORE,
    StepResult,
    finish_step,
    start_step,
)
from tests.controller.executor_harness import (
    Bench,
    alert,
    bench,
    names,
    noderollback_writes,
    nodes_patched,
    running,
    settings,
    step_states,
)
from tests.support.wait import until_async

ROLLBACK_EVENTS = [
    "NodesyncCleanupRuntime",
    "NodesyncCordon",
    "NodesyncDrain",
    "NodesyncRollback",
    "NodesyncTaint",
    "NodesyncVerify",
]
ALL_DONE = [
    ("cordon", "done"),
    ("taint", "done"),
    ("drain", "done"),
    ("cleanup_runtime", "done"),
    ("verify", "done"),
]


@pytest.fixture
async def b(tmp_path: Path) -> AsyncIterator[Bench]:
    async with bench(tmp_path) as made:
        yield made


async def decided(b: Bench, executor: Executor, *alerts: Alert) -> list[NodeRollback]:
    """Deliver the alerts and let only the intake decide (no step runs)."""
    await b.deliver(*alerts)
    await executor.intake.run_once()
    return b.rollbacks()


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

    [rollback] = b.rollbacks()
    assert rollback.status.phase is Phase.SUCCEEDED
    assert step_states(rollback) == ALL_DONE
    assert rollback.spec.node_uid == b.node("new-1")["metadata"]["uid"]
    assert rollback.spec.decision.decided_by == "test-controller"
    assert rollback.status.steps[0].made_change
    node = b.node("new-1")
    assert node["spec"]["unschedulable"] is True
    assert node["spec"]["taints"] == [{"key": "nodesync.io/rollback", "effect": "NoSchedule"}]
    annotations = node["metadata"]["annotations"]
    # The request id is the NodeRollback's uid: no earlier rollback's answer can match it.
    assert annotations[CLEANUP_REQUEST_ANNOTATION] == rollback.uid
    assert rollback.status.steps[3].request == rollback.uid  # and the status records it
    assert json.loads(annotations[CLEANUP_STATUS_ANNOTATION])["state"] == "done"
    # every effect once: cordon, taint, cleanup request; one eviction; one Event per step and
    # one for the decision; one NodeRollback
    assert nodes_patched(b.server) == 3
    assert b.server.counters.count("create", "pods/eviction") == 1
    assert b.event_reasons("new-1") == ROLLBACK_EVENTS
    assert noderollback_writes(b.server)["create"] == 1
    evicted = b.store.get("pods", "app", namespace="default")
    assert evicted["metadata"]["uid"] == app_uid
    assert evicted["metadata"].get("deletionTimestamp")  # graceful: Terminating
    assert (
        b.store.get("pods", "logs", namespace="default")["metadata"].get("deletionTimestamp")
        is None
    )  # DaemonSet pods stay
    assert b.agent.answered == [("new-1", rollback.uid)]
    assert executor.metrics.actions("cordon", "done") == 1
    assert executor.metrics.actions("verify", "done") == 1
    assert [d.verdict for d in await b.decisions()] == ["plan"]


async def test_alerts_about_one_node_feed_one_rollback(b: Bench) -> None:
    """NotReady, CRI timeouts and a dead runtime for one node: one rollback, whichever alert
    came first, the others recorded as its triggers."""
    b.add_node("new-1")
    b.add_pod("web", "new-1")
    await b.wait_cluster(1)
    executor = b.executor()
    await b.deliver(alert("new-1", fingerprint="a1"))
    await executor.intake.run_once()
    await b.deliver(
        alert("new-1", fingerprint="a2", alertname="NodesyncNewNodeCRITimeouts"),
        alert("new-1", fingerprint="a3", alertname="NodesyncNewNodeRuntimeDown"),
        alert("new-1", "evict_pod", fingerprint="a4", namespace="default", pod="web"),
    )
    await b.settled(executor)
    [rollback] = b.rollbacks()
    assert rollback.status.phase is Phase.SUCCEEDED
    assert [t.fingerprint for t in rollback.status.triggers] == ["a1", "a2", "a3", "a4"]
    verdicts = Counter(d.verdict for d in await b.decisions())
    assert verdicts == {"plan": 1, "join": 3}
    assert {d.rollback for d in await b.decisions()} == {rollback.name}
    assert b.server.counters.count("create", "pods/eviction") == 1


async def _cleanup_waiting_for_its_agent(b: Bench, executor: Executor) -> NodeRollback:
    """A cleanup of new-1's orphans, its cleanup step running, the agent not answering yet."""
    b.agent.hold = True
    await b.deliver(alert("new-1", "cleanup_orphans", fingerprint="c1"))
    await until_async(
        lambda: _step_is(b, "cleanup_runtime", StepState.RUNNING, executor),
        timeout=15.0,
        what="cleanup",
    )
    [first] = b.rollbacks()
    return first


def _escalated_to_the_end(b: Bench, rollback: NodeRollback, first: NodeRollback) -> None:
    """``first`` escalated into a node rollback that ran every step, cleaning up again after
    the drain with a request of its own."""
    assert rollback.name == first.name
    assert rollback.spec.action is Action.ROLLBACK_NODE
    assert rollback.generation == 2
    assert rollback.status.phase is Phase.SUCCEEDED
    assert step_states(rollback) == ALL_DONE
    request = b.node("new-1")["metadata"]["annotations"][CLEANUP_REQUEST_ANNOTATION]
    assert request == f"{rollback.uid}-2"
    [cleanup] = [s for s in rollback.status.steps if s.kind is StepKind.CLEANUP_RUNTIME]
    assert cleanup.request == request


async def test_a_stronger_alert_escalates_the_nodes_rollback(b: Bench) -> None:
    b.add_node("new-1")
    await b.wait_cluster(1)
    executor = b.executor()
    first = await _cleanup_waiting_for_its_agent(b, executor)
    await b.deliver(alert("new-1", fingerprint="r1"))
    await executor.intake.run_once()  # decided while the cleanup waits for its agent
    b.agent.hold = False
    await b.settled(executor)
    [rollback] = b.rollbacks()
    _escalated_to_the_end(b, rollback, first)
    assert [d.verdict for d in await b.decisions()] == ["plan", "escalate"]


class _EscalationLandsFirst(RollbackWrites):
    """Runs ``land`` once, right before the write that would end a rollback Succeeded: an
    escalation that reaches the API server while the last step of the weaker plan runs."""

    land: Callable[[], Awaitable[None]] | None = None

    async def update_status(self, current: NodeRollback, status: RollbackStatus) -> NodeRollback:
        if self.land is not None and status.phase is Phase.SUCCEEDED:
            land, self.land = self.land, None
            await land()
        return await super().update_status(current, status)


async def test_an_escalation_that_lands_as_the_last_step_ends_is_carried_out(b: Bench) -> None:
    """The verify of the cleanup writes its outcome from the object it read; the escalation
    changed the object since (409): the outcome read again is the escalated rollback's, which
    goes on to the node rollback's steps rather than ending Succeeded on the cleanup's."""
    b.add_node("new-1")
    await b.wait_cluster(1)
    writes = _EscalationLandsFirst(b.api)
    executor = b.executor(writes=writes)

    async def escalate() -> None:
        await b.deliver(alert("new-1", fingerprint="r1"))
        await executor.intake.run_once()
        assert b.rollbacks()[0].generation == 2

    writes.land = escalate
    await b.deliver(alert("new-1", "cleanup_orphans", fingerprint="c1"))
    await b.settled(executor)
    assert writes.land is None  # it landed
    [rollback] = b.rollbacks()
    assert [r for _, r in b.agent.answered] == [rollback.uid, f"{rollback.uid}-2"]
    _escalated_to_the_end(b, rollback, rollback)
    assert [d.verdict for d in await b.decisions()] == ["plan", "escalate"]


async def test_an_alert_for_a_rollback_that_just_ended_is_a_rollback_of_its_own(
    b: Bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cleanup ended; the watch has not shown it yet (it still shows the cleanup waiting)
    when the stronger alert is decided. A rollback that ended takes no more alerts: the
    escalation is not written to it; the alert becomes a node rollback of its own."""
    b.add_node("new-1")
    await b.wait_cluster(1)
    executor = b.executor()
    first = await _cleanup_waiting_for_its_agent(b, executor)
    stale = list(b.watch.all())
    b.agent.hold = False
    await until_async(
        lambda: _phase_is(b, first.name, Phase.SUCCEEDED, executor),
        timeout=15.0,
        what="the cleanup to succeed",
    )
    monkeypatch.setattr(b.watch, "guard_state", lambda: GuardState.of(stale))
    await b.deliver(alert("new-1", fingerprint="r1"))
    await b.settled(executor)
    [ended] = [r for r in b.rollbacks() if r.name == first.name]
    [rollback] = [r for r in b.rollbacks() if r.name != first.name]
    assert (ended.spec.action, ended.generation) == (Action.CLEANUP_ORPHANS, 1)
    assert [t.fingerprint for t in ended.status.triggers] == ["c1"]
    assert step_states(ended) == [("cleanup_runtime", "done"), ("verify", "done")]
    assert rollback.spec.action is Action.ROLLBACK_NODE
    assert rollback.status.phase is Phase.SUCCEEDED
    assert step_states(rollback) == ALL_DONE
    assert b.agent.answered == [("new-1", ended.uid), ("new-1", rollback.uid)]
    assert [(d.verdict, d.rollback) for d in await b.decisions()] == [
        ("plan", ended.name),
        ("plan", rollback.name),
    ]


async def test_an_alert_joining_a_rollback_that_just_deleted_the_node_is_refused(
    b: Bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node rollback deleted the node; neither watch has shown that yet (the rollback
    still running, the node still there) when another alert about the node is decided. The
    join finds the rollback ended; the alert, judged again, is about a node that exists no
    more: refused, not a second rollback of the deleted node."""
    b.add_node("new-1")
    await b.wait_cluster(1)
    executor = b.executor(settings(delete_nodes=True))
    b.agent.hold = True
    await b.deliver(alert("new-1", fingerprint="r1"))
    await until_async(
        lambda: _step_is(b, "cleanup_runtime", StepState.RUNNING, executor),
        timeout=15.0,
        what="the rollback's cleanup",
    )
    [first] = b.rollbacks()
    stale, stale_view = list(b.watch.all()), b.cluster.view()
    assert [r.active for r in stale] == [True]
    assert stale_view.node("new-1") is not None
    b.agent.hold = False
    await until_async(
        lambda: _phase_is(b, first.name, Phase.SUCCEEDED, executor),
        timeout=15.0,
        what="the rollback to delete the node",
    )
    assert b.store.try_get("nodes", "new-1") is None
    monkeypatch.setattr(b.watch, "guard_state", lambda: GuardState.of(stale))
    monkeypatch.setattr(b.cluster, "view", lambda: stale_view)
    await b.deliver(alert("new-1", fingerprint="r2"))
    await b.settled(executor)
    [ended] = b.rollbacks()
    assert ended.name == first.name
    assert [t.fingerprint for t in ended.status.triggers] == ["r1"]
    assert step_states(ended)[-1] == ("delete_node", "done")
    assert [(d.verdict, d.reason, d.rollback) for d in await b.decisions()] == [
        ("plan", "", first.name),
        ("refused", "unknown_node", ""),
    ]
    [refused] = await b.decisions("refused")
    assert first.name in refused.detail


async def _phase_is(b: Bench, name: str, phase: Phase, executor: Executor) -> bool:
    await executor.run_once()
    return any(r.name == name and r.status.phase is phase for r in b.rollbacks())


async def test_an_escalation_in_the_same_delivery_is_decided_before_the_rollback_is_driven(
    b: Bench,
) -> None:
    b.add_node("new-1")
    await b.wait_cluster(1)
    executor = b.executor()
    await b.deliver(
        alert("new-1", "cleanup_orphans", fingerprint="c1"), alert("new-1", fingerprint="r1")
    )
    await b.settled(executor)
    [rollback] = b.rollbacks()
    assert (rollback.spec.action, rollback.generation) == (Action.ROLLBACK_NODE, 2)
    assert rollback.status.phase is Phase.SUCCEEDED
    assert step_states(rollback) == ALL_DONE
    # the node's agent was asked once, by the node rollback, not first by the weaker action
    assert [request for _, request in b.agent.answered] == [f"{rollback.uid}-2"]
    assert [d.verdict for d in await b.decisions()] == ["plan", "escalate"]


async def _step_is(b: Bench, kind: str, state: StepState, executor: Executor) -> bool:
    await executor.run_once()
    return any(
        s.kind.value == kind and s.state is state for r in b.rollbacks() for s in r.status.steps
    )


async def test_delete_nodes_ends_with_the_node_deleted(b: Bench) -> None:
    b.add_node("new-1")
    await b.wait_cluster(1)
    executor = b.executor(settings(delete_nodes=True))
    await b.deliver(alert("new-1"))
    await b.settled(executor)
    [rollback] = b.rollbacks()
    assert rollback.status.phase is Phase.SUCCEEDED
    assert step_states(rollback)[-1] == ("delete_node", "done")
    assert b.store.try_get("nodes", "new-1") is None
    assert b.server.counters.count("delete", "nodes") == 1
    assert "NodesyncDeleteNode" in b.event_reasons("new-1")


def _pdb(b: Bench) -> None:
    b.store.create(
        "poddisruptionbudgets",
        {
            "metadata": {"name": "db", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}},
        },
        namespace="default",
    )


async def test_a_pdb_that_keeps_refusing_fails_the_drain_and_forces_nothing(b: Bench) -> None:
    b.add_node("new-1")
    b.add_pod("db-0", "new-1", labels={"app": "db"})
    _pdb(b)
    await b.wait_cluster(1)
    executor = b.executor(settings(eviction_timeout=0.5))
    await b.deliver(alert("new-1"))
    await b.settled(executor)

    [rollback] = b.rollbacks()
    assert rollback.status.phase is Phase.FAILED
    assert rollback.status.reason == "pdb_blocked"
    assert "review the PodDisruptionBudgets" in rollback.status.action_required
    assert step_states(rollback) == [
        ("cordon", "done"),
        ("taint", "done"),
        ("drain", "failed"),
        ("cleanup_runtime", "skipped"),
        ("verify", "skipped"),
    ]
    assert "db-0" in rollback.status.steps[2].message
    assert "nothing was forced" in rollback.status.steps[2].message
    # retried, refused each time, never deleted
    assert b.server.counters.count("create", "pods/eviction", 429) >= 2
    assert b.server.counters.count("create", "pods/eviction", 201) == 0
    assert b.server.counters.count("delete", "pods") == 0
    assert CLEANUP_REQUEST_ANNOTATION not in (b.node("new-1")["metadata"].get("annotations") or {})
    [failed] = b.events("NodesyncDrainFailed")
    assert failed["type"] == "Warning"
    assert failed["involvedObject"]["uid"] == rollback.spec.node_uid
    assert b.events("NodesyncActionRequired")
    assert executor.metrics.actions("drain", "failed") == 1
    assert executor.status().reasons == {("Failed", "pdb_blocked"): 1}
    # delivered again: the failed rollback is not run again for the same episode
    await b.deliver(alert("new-1"))
    await b.settled(executor)
    assert b.server.counters.count("create", "pods/eviction", 201) == 0
    assert len(b.rollbacks()) == 1


async def test_a_pdb_that_blocks_then_allows_is_retried_and_the_rollback_finishes(
    b: Bench,
) -> None:
    b.add_node("new-1")
    b.add_pod("db-0", "new-1", labels={"app": "db"})
    _pdb(b)
    await b.wait_cluster(1)
    executor = b.executor(settings(eviction_timeout=60.0))
    await b.deliver(alert("new-1"))

    async def blocked() -> bool:
        await executor.run_once()
        # executor.status() reads the NodeRollback watch, which gets the Waiting status only
        # after the server stored it: wait until it holds what the server holds
        return any(r.status.reason == "pdb_blocked" for r in b.rollbacks()) and b.watch_current()

    await until_async(
        blocked,
        timeout=15.0,
        what="the drain to wait on the PodDisruptionBudget, as the watch sees it",
    )
    [waiting] = b.rollbacks()
    assert waiting.status.phase is Phase.WAITING
    assert executor.status().reasons == {("Waiting", "pdb_blocked"): 1}
    b.store.delete("poddisruptionbudgets", "db", namespace="default")  # the budget allows now
    await b.settled(executor)
    [rollback] = b.rollbacks()
    assert rollback.status.phase is Phase.SUCCEEDED
    assert b.server.counters.count("create", "pods/eviction", 429) >= 1
    assert b.server.counters.count("create", "pods/eviction", 201) == 1


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

    [rollback] = b.rollbacks()
    assert rollback.status.phase is Phase.FAILED
    assert rollback.status.reason == "api_error"
    assert ("drain", "failed") in step_states(rollback)
    assert rollback.status.steps[2].attempts == 1
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

    done = b.rollbacks(Phase.SUCCEEDED)
    refused = await b.decisions("refused")
    assert len(done) == 10
    assert len(b.rollbacks()) == 10
    assert len(refused) == 20
    assert {r.reason for r in refused} == {"blast_radius_fraction"}
    cordoned = [
        n["metadata"]["name"] for n in b.store.list("nodes") if n["spec"].get("unschedulable")
    ]
    assert sorted(cordoned) == names(done)
    assert executor.metrics.refusals("blast_radius_fraction") == 20
    assert executor.metrics.actions("cordon", "done") == 10
    refusal_events = b.events("NodesyncRefused")
    assert sorted(e["involvedObject"]["name"] for e in refusal_events) == sorted(
        r.node for r in refused
    )
    assert all("blast_radius_fraction" in e["message"] for e in refusal_events)
    assert all(e["type"] == "Warning" for e in refusal_events)
    status = executor.status()
    assert (status.budget_absolute, status.budget_wave_fraction) == (90, 0)
    assert status.phases is not None
    assert status.phases["Succeeded"] == 10


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

    assert b.rollbacks() == []
    assert nodes_patched(b.server) == 0
    assert b.server.counters.count("create", "pods/eviction") == 0
    assert executor.metrics.refusals("correlated_failure") == 5
    assert executor.status().paused is True
    waiting = b.events("NodesyncWaiting")
    assert sorted(e["involvedObject"]["name"] for e in waiting) == [f"new-{i}" for i in range(5)]
    assert all("correlated_failure" in e["message"] for e in waiting)

    # the old nodes recover: the held alerts are decided
    for i in range(4):
        obj = b.node(f"old-{i}")
        obj["status"]["conditions"][0]["status"] = "True"
        b.store.replace("nodes", obj, subresource="status")

    async def resumed() -> bool:
        return executor.status().paused is False

    await until_async(resumed, timeout=15.0, what="the pause to end")
    await b.settled(executor)
    assert len(b.rollbacks(Phase.SUCCEEDED)) == 1  # 10 % of a 5-node wave: one node
    assert Counter(r.reason for r in await b.decisions("refused")) == {"blast_radius_fraction": 4}


async def test_dry_run_writes_nothing(b: Bench) -> None:
    b.add_node("cp-1", labels={"node-role.kubernetes.io/control-plane": ""})
    for i in range(20):
        b.add_node(f"new-{i:02}")
        b.add_pod(f"app-{i}", f"new-{i:02}")
    await b.wait_cluster(21)
    executor = b.executor(settings(dry_run=True, max_rollbacks=100))
    b.server.counters.reset()
    alerts = [alert(f"new-{i:02}") for i in range(5)]
    alerts += [alert("cp-1"), alert("new-09", "evict_pod", namespace="default", pod="app-9")]
    await b.deliver(*alerts)
    await b.settled(executor)
    await b.settled(executor)

    assert b.server.counters.writes() == 0
    assert b.events() == []
    assert b.rollbacks() == []
    dry = await b.decisions("dry_run")
    refused = await b.decisions("refused")
    assert len(dry) == 3  # two of a 20-node wave, and the eviction
    assert Counter(d.reason for d in dry) == {"plan": 3}
    assert all(d.rollback for d in dry)
    assert Counter(r.reason for r in refused) == {"blast_radius_fraction": 3, "control_plane": 1}
    assert executor.metrics.actions("cordon", "dry_run") == 2
    assert executor.metrics.actions("evict_pod", "dry_run") == 1
    assert executor.metrics.actions("cordon", "done") == 0
    assert executor.metrics.refusals("control_plane") == 1
    # a fresh executor on the same journal keeps the dry run's budget
    again = b.executor(settings(dry_run=True, max_rollbacks=100))
    await b.deliver(alert("new-19", fingerprint="late"))
    await b.settled(again)
    [late] = [d for d in await b.decisions() if d.alert_key[0] == "late"]
    assert (late.verdict, late.reason) == ("refused", "blast_radius_fraction")


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

    refused = await b.decisions("refused")
    assert len(refused) == 8
    assert Counter((r.node, r.reason) for r in refused) == {
        ("cp-1", "control_plane"): 2,
        ("prot-1", "protected"): 2,
        ("ca-1", "other_remediator"): 2,
        ("old-1", "scale_out_window"): 2,
    }
    assert b.rollbacks() == []
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
    assert Counter(r.reason for r in await b.decisions("refused")) == {
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
    rollbacks = b.rollbacks(Phase.SUCCEEDED)
    assert len(rollbacks) == 2
    details = sorted(r.status.steps[0].message for r in rollbacks)
    assert "no longer on node" in details[1]
    assert b.server.counters.count("create", "pods/eviction") == 1
    assert nodes_patched(b.server) == 0
    # The Events about the eviction, its decision and its step, are on the pod, with its uid
    # (kubectl describe pod shows them); those of the pod that was never there on the node.
    stuck_uid = b.store.get("pods", "stuck", namespace="default")["metadata"]["uid"]
    node_uid = b.node("new-1")["metadata"]["uid"]
    about = sorted(
        (e["involvedObject"]["kind"], e["involvedObject"]["name"], e["involvedObject"]["uid"],
         e["reason"])
        for e in b.events()
    )  # fmt: skip
    assert about == [
        ("Node", "new-1", node_uid, "NodesyncEvictPod"),
        ("Node", "new-1", node_uid, "NodesyncRollback"),
        ("Pod", "stuck", stuck_uid, "NodesyncEvictPod"),
        ("Pod", "stuck", stuck_uid, "NodesyncRollback"),
    ]


async def test_cleanup_orphans_asks_the_agent_and_verifies(b: Bench) -> None:
    b.add_node("new-1", ready="True")
    await b.wait_cluster(1)
    executor = b.executor()
    await b.deliver(alert("new-1", "cleanup_orphans", kind="orphan_sandbox"))
    await b.settled(executor)
    [rollback] = b.rollbacks(Phase.SUCCEEDED)
    assert step_states(rollback) == [("cleanup_runtime", "done"), ("verify", "done")]
    assert "removed 2 sandboxes and 3 containers" in rollback.status.steps[0].message
    assert not b.node("new-1")["spec"].get("unschedulable")
    assert nodes_patched(b.server) == 1


async def test_a_dead_runtime_skips_the_cleanup_and_the_node_is_deleted(b: Bench) -> None:
    """The agent answers that the runtime cannot be read: the node is going away, its runtime
    state with it; the rollback goes on to the deletion and says why it did not clean."""
    b.add_node("new-1")
    await b.wait_cluster(1)
    b.agent.state = "unavailable"
    executor = b.executor(settings(delete_nodes=True))
    await b.deliver(alert("new-1"))
    await b.settled(executor)
    [rollback] = b.rollbacks()
    assert rollback.status.phase is Phase.SUCCEEDED
    cleanup = rollback.status.steps[3]
    assert (cleanup.state, cleanup.reason) == (StepState.SKIPPED, "runtime_unavailable")
    assert step_states(rollback)[-1] == ("delete_node", "done")
    assert b.store.try_get("nodes", "new-1") is None
    assert b.events("NodesyncCleanupRuntimeSkipped")


async def test_without_delete_nodes_a_skipped_cleanup_asks_for_a_person(b: Bench) -> None:
    b.add_node("new-1")
    await b.wait_cluster(1)
    b.agent.state = "failed"
    executor = b.executor()
    await b.deliver(alert("new-1"))
    await b.settled(executor)
    [rollback] = b.rollbacks()
    assert rollback.status.phase is Phase.SUCCEEDED
    assert rollback.status.steps[3].reason == "cleanup_failed"
    assert "runtime unavailable" in rollback.status.steps[3].message
    assert "delete the Node" in rollback.status.action_required
    [event] = b.events("NodesyncActionRequired")
    assert event["type"] == "Warning"
    assert b.store.try_get("nodes", "new-1") is not None


async def test_an_unreachable_nodes_silent_agent_does_not_hold_the_rollback(b: Bench) -> None:
    b.add_node("new-1", lease_age=None)  # never renewed a Lease: the node is dark
    await b.wait_cluster(1)
    b.agent.hold = True
    executor = b.executor(settings(delete_nodes=True, cleanup_ack_timeout=0.3))
    await b.deliver(alert("new-1"))
    await b.settled(executor)
    [rollback] = b.rollbacks()
    assert rollback.status.phase is Phase.SUCCEEDED
    assert rollback.status.steps[3].reason == "agent_unreachable"
    assert b.store.try_get("nodes", "new-1") is None


async def test_a_stale_cleanup_answer_of_an_earlier_rollback_is_never_taken(b: Bench) -> None:
    """An earlier rollback left its request and the agent's answer on the node. With no agent
    answering now, the new rollback's cleanup times out: the node is not deleted."""
    b.add_node("new-1", ready="True", lease_age=1)
    obj = b.node("new-1")
    obj["metadata"]["annotations"] = {
        CLEANUP_REQUEST_ANNOTATION: "nodesync-plan-1",
        CLEANUP_STATUS_ANNOTATION: json.dumps({"id": "nodesync-plan-1", "state": "done"}),
    }
    b.store.replace("nodes", obj)
    conditions = b.node("new-1")
    conditions["status"]["conditions"][0]["status"] = "False"
    b.store.replace("nodes", conditions, subresource="status")
    await b.wait_cluster(1)
    b.agent.hold = True

    async def renew() -> None:
        while True:  # the kubelet renews its Lease: the node is reachable, its agent silent
            b.renew_lease("new-1")
            await asyncio.sleep(0.1)

    renewing = asyncio.create_task(renew())
    try:
        executor = b.executor(settings(delete_nodes=True, cleanup_timeout=0.5))
        await b.deliver(alert("new-1"))
        await b.settled(executor)
    finally:
        renewing.cancel()
    [rollback] = b.rollbacks()
    assert (rollback.status.phase, rollback.status.reason) == (Phase.FAILED, "cleanup_timeout")
    assert step_states(rollback)[-1] == ("delete_node", "skipped")
    assert b.store.try_get("nodes", "new-1") is not None
    assert b.server.counters.count("delete", "nodes") == 0
    assert b.node("new-1")["metadata"]["annotations"][CLEANUP_REQUEST_ANNOTATION] == rollback.uid


async def test_waiting_for_an_agent_holds_no_slot(b: Bench) -> None:
    """With one slot, a rollback that waits for its node's agent lets the next one run."""
    b.add_node("new-1")
    b.add_node("new-2")
    await b.wait_cluster(2)
    b.agent.hold = True
    executor = b.executor(settings(max_concurrent_rollbacks=1, max_rollback_fraction=1.0))
    await b.deliver(alert("new-1"))
    await until_async(
        lambda: _step_is(b, "cleanup_runtime", StepState.RUNNING, executor),
        timeout=15.0,
        what="waiting",
    )
    await b.deliver(alert("new-2"))

    async def second_waits_too() -> bool:
        await executor.run_once()
        return (
            all(r.status.phase is Phase.WAITING for r in b.rollbacks()) and len(b.rollbacks()) == 2
        )

    await until_async(
        second_waits_too, timeout=15.0, what="the second rollback to reach its cleanup"
    )
    b.agent.hold = False
    await b.settled(executor)
    assert [r.status.phase for r in b.rollbacks()] == [Phase.SUCCEEDED] * 2


async def test_queued_rollbacks_are_cordoned_and_tainted_at_once(b: Bench) -> None:
    """With one slot held by a drain in progress, the rollbacks queued behind it fence their
    nodes (cordon, taint) without a slot; their drains wait for it."""
    for i in (1, 2, 3):
        b.add_node(f"new-{i}")
        b.add_pod(f"app-{i}", f"new-{i}")
    await b.wait_cluster(3)
    eviction = "/api/v1/namespaces/default/pods/app-1/eviction"
    b.server.faults.add_latency(8.0, path_prefix=eviction, verb="create")
    executor = b.executor(settings(max_concurrent_rollbacks=1, max_rollback_fraction=1.0))
    await b.deliver(alert("new-1"))
    await until_async(
        lambda: _step_is(b, "drain", StepState.RUNNING, executor),
        timeout=15.0,
        what="new-1's drain",
    )
    await b.deliver(alert("new-2"), alert("new-3"))

    async def queued_ones_fenced() -> bool:
        await executor.run_once()
        states = {r.spec.node: dict(step_states(r)) for r in b.rollbacks()}
        return all(
            states.get(n, {}).get("taint") == "done" and states[n]["drain"] == "pending"
            for n in ("new-2", "new-3")
        )

    await until_async(queued_ones_fenced, timeout=6.0, what="new-2 and new-3 cordoned and tainted")
    by_node = {r.spec.node: r for r in b.rollbacks()}
    assert dict(step_states(by_node["new-1"]))["drain"] == "running"  # the slot is still held
    assert (by_node["new-1"].status.phase, by_node["new-1"].status.reason) == (Phase.RUNNING, "")
    for n in ("new-2", "new-3"):  # queued: said by the status that recorded the taint
        assert (by_node[n].status.phase, by_node[n].status.reason) == (Phase.WAITING, "queued")
    for n in ("new-2", "new-3"):
        node = b.node(n)
        assert node["spec"]["unschedulable"] is True
        assert [t["key"] for t in node["spec"]["taints"]] == ["nodesync.io/rollback"]
    versions = {n: by_node[n].resource_version for n in ("new-2", "new-3")}
    for _ in range(3):  # while queued, passes write nothing
        await executor.run_once()
    assert {r.spec.node: r.resource_version for r in b.rollbacks() if r.spec.node in versions} == (
        versions
    )
    b.server.faults.clear()
    await b.settled(executor)
    assert [r.status.phase for r in b.rollbacks()] == [Phase.SUCCEEDED] * 3


async def test_an_alert_resolved_before_its_rollback_started_cancels_it(b: Bench) -> None:
    b.add_node("new-1")
    await b.wait_cluster(1)
    executor = b.executor()
    firing = alert("new-1")
    [pending] = await decided(b, executor, firing)  # decided; no step has started
    assert pending.status.phase is Phase.PENDING
    b.server.counters.reset()
    await b.deliver(alert("new-1", status="resolved", starts_at=firing.starts_at))
    await b.settled(executor)
    [rollback] = b.rollbacks()
    assert (rollback.status.phase, rollback.status.reason) == (Phase.CANCELLED, "alert_resolved")
    assert nodes_patched(b.server) == 0


async def test_a_node_that_recovered_is_not_rolled_back(b: Bench) -> None:
    # NotReady when its alert started, Ready again (and its Lease fresh) when it is decided
    b.add_node("new-1", ready="True", lease_age=2, changed_ago=1)
    await b.wait_cluster(1)
    executor = b.executor()
    await b.deliver(alert("new-1"))
    await b.settled(executor)
    [rollback] = b.rollbacks()
    assert (rollback.status.phase, rollback.status.reason) == (Phase.CANCELLED, "recovered")
    assert nodes_patched(b.server) == 0
    assert b.event_reasons() == ["NodesyncCordonSkipped", "NodesyncRollback"]
    # its budget is released: nothing was touched
    assert executor.status().budget_absolute == 10


async def test_a_node_ready_all_along_is_rolled_back_on_its_runtime_alert(b: Bench) -> None:
    """A frozen runtime: kubelet keeps the node Ready and its Lease fresh for minutes while
    the agent's alert asks for the rollback. That is no recovery: the rollback goes on."""
    b.add_node("new-1", age=600, ready="True", lease_age=2, changed_ago=500)
    await b.wait_cluster(1)
    executor = b.executor()
    # The alert started after Ready last changed, whenever the test runs (the harness's
    # default start is fixed when the module is imported, which a long run leaves behind).
    await b.deliver(alert("new-1", alertname="NodesyncNewNodeCRIDown", starts_at=time.time() - 60))
    await b.settled(executor)
    [rollback] = b.rollbacks()
    assert rollback.status.phase is Phase.SUCCEEDED, rollback.status
    assert b.node("new-1")["spec"].get("unschedulable") is True


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
        await until_async(_passes(first, 0), timeout=15.0, what="the executors to start")
        assert not first.status().leader
        assert not second.status().leader

        one.lead(True)

        async def cleaning() -> bool:
            rollbacks = b.rollbacks()
            return bool(rollbacks) and rollbacks[0].status.steps[2].state is StepState.DONE

        await until_async(
            cleaning, timeout=15.0, what="the leader to run the rollback up to the cleanup"
        )
        assert first.status().leader
        assert not second.status().leader
        one.lead(False)  # the lead moves to the other controller mid-rollback
        first.schedule.trip()
        await until_async(_not_leading(first), timeout=15.0, what="the first executor to stop")
        b.agent.hold = False
        two.lead(True)
        await until_async(
            _succeeded(b, 1), timeout=15.0, what="the new leader to finish the rollback"
        )
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


def _succeeded(b: Bench, n: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return len(b.rollbacks(Phase.SUCCEEDED)) == n

    return check


async def test_a_node_created_again_under_its_name_is_not_the_decided_node(b: Bench) -> None:
    b.add_node("new-1")
    await b.wait_cluster(1)
    executor = b.executor()
    await decided(b, executor, alert("new-1"))
    b.store.delete("nodes", "new-1")
    b.add_node("new-1", age=-2, lease_age=None)  # a new machine took the name after the decision
    await b.settled(executor)
    [rollback] = b.rollbacks()
    assert (rollback.status.phase, rollback.status.reason) == (Phase.SUCCEEDED, "node_gone")
    assert step_states(rollback)[0] == ("cordon", "skipped")
    assert "another object now" in rollback.status.steps[0].message
    assert nodes_patched(b.server) == 0
    assert not b.node("new-1")["spec"].get("unschedulable")


async def test_a_finished_rollback_is_not_driven_again(b: Bench) -> None:
    b.add_node("new-1")
    await b.wait_cluster(1)
    executor = b.executor()
    [rollback] = await decided(b, executor, alert("new-1"))
    failed = StepResult(StepState.FAILED, "API error", reason="api_error", stop=Phase.FAILED)
    writes = RollbackWrites(b.api)
    now = time.time()  # finished just now: well within the retention
    await writes.change_status(
        rollback.name, lambda r: finish_step(start_step(r.status, 0, now), 0, failed, now)
    )
    b.server.counters.reset()
    await b.settled(executor)
    [after] = b.rollbacks()
    assert (after.status.phase, after.status.reason) == (Phase.FAILED, "api_error")
    assert b.server.counters.writes() == 0


async def test_a_recovered_node_is_given_back_what_the_record_says_it_made(b: Bench) -> None:
    b.add_node("new-1")
    await b.wait_cluster(1)
    executor = b.executor()
    [rollback] = await decided(b, executor, alert("new-1"))
    # a controller cordoned and tainted the node, recorded the cordon, and stopped right after
    # the taint's effect, before recording it (the intent says the taint was absent before)
    writer = KubeWriter(b.api)
    await writer.cordon("new-1")
    await writer.add_taint("new-1", Taint("nodesync.io/rollback", "NoSchedule"))
    absent = {OBSERVED_BEFORE: BEFORE_ABSENT}
    cordoned = StepResult(StepState.DONE, "cordoned the node", made_change=True)
    await RollbackWrites(b.api).change_status(
        rollback.name,
        lambda r: start_step(
            finish_step(start_step(r.status, 0, 1.0, absent), 0, cordoned, 2.0), 1, 3.0, absent
        ),
    )
    # ... and meanwhile the node recovered
    obj = b.node("new-1")
    obj["status"]["conditions"][0]["status"] = "True"
    b.store.replace("nodes", obj, subresource="status")
    b.renew_lease("new-1")

    async def ready_in_view() -> bool:
        seen = b.cluster.view().node("new-1")
        return seen is not None and seen.conditions[0].status == "True"

    await until_async(ready_in_view, timeout=15.0, what="the view to see the node Ready")
    await b.settled(executor)
    [after] = b.rollbacks()
    assert (after.status.phase, after.status.reason) == (Phase.CANCELLED, "recovered")
    node = b.node("new-1")
    assert not node["spec"].get("unschedulable")
    assert not node["spec"].get("taints")
    assert b.events("NodesyncUndone")
    assert executor.metrics.actions("undo", "done") == 1


async def test_a_give_back_cut_short_before_its_record_is_recorded_after_a_restart(
    b: Bench,
) -> None:
    """A controller gave a recovered node back (removed its taint, uncordoned it) and died
    before recording it: the next one records the rollback given back, with its Event."""
    b.add_node("new-1")
    await b.wait_cluster(1)
    executor = b.executor()
    [rollback] = await decided(b, executor, alert("new-1"))
    absent = {OBSERVED_BEFORE: BEFORE_ABSENT}
    cordoned = StepResult(StepState.DONE, "cordoned the node", made_change=True)
    await RollbackWrites(b.api).change_status(
        rollback.name,
        lambda r: start_step(
            finish_step(start_step(r.status, 0, 1.0, absent), 0, cordoned, 2.0), 1, 3.0, absent
        ),
    )  # the node is neither cordoned nor tainted any more: given back, not recorded
    obj = b.node("new-1")
    obj["status"]["conditions"][0]["status"] = "True"
    b.store.replace("nodes", obj, subresource="status")
    b.renew_lease("new-1")

    async def ready_in_view() -> bool:
        seen = b.cluster.view().node("new-1")
        return seen is not None and seen.conditions[0].status == "True"

    await until_async(ready_in_view, timeout=15.0, what="the view to see the node Ready")
    await b.settled(executor)
    [after] = b.rollbacks()
    assert (after.status.phase, after.status.reason) == (Phase.CANCELLED, "recovered")
    [undone] = b.events("NodesyncUndone")
    assert "no taint nodesync.io/rollback, not cordoned" in undone["message"]
    assert nodes_patched(b.server) == 0


async def test_a_paused_rollback_waits_before_its_next_step(b: Bench) -> None:
    b.add_node("new-1")
    await b.wait_cluster(1)
    executor = b.executor()
    [rollback] = await decided(b, executor, alert("new-1"))
    writes = RollbackWrites(b.api)
    await writes.change_spec(rollback.name, lambda r: dataclasses.replace(r.spec, paused=True))

    async def held() -> bool:
        await executor.run_once()
        return b.rollbacks()[0].status.reason == "paused"

    await until_async(held, timeout=15.0, what="the rollback to wait on its pause")
    assert nodes_patched(b.server) == 0
    await writes.change_spec(rollback.name, lambda r: dataclasses.replace(r.spec, paused=False))
    await b.settled(executor)
    assert b.rollbacks()[0].status.phase is Phase.SUCCEEDED


async def test_finished_rollbacks_are_deleted_after_the_retention(b: Bench) -> None:
    b.add_node("new-1")
    await b.wait_cluster(1)
    executor = b.executor(settings(rollback_retention=0.2, max_rollbacks_window=0.2))
    await b.deliver(alert("new-1"))
    await b.settled(executor)
    assert len(b.rollbacks()) == 1

    async def gone() -> bool:
        executor._retired_at = 0.0  # look again at every pass
        await executor.run_once()
        return b.rollbacks() == []

    await until_async(gone, timeout=15.0, what="the finished rollback to be deleted")
    assert noderollback_writes(b.server)["delete"] == 1
