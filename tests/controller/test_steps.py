"""One rollback step against the test API server: the re-check before it, what it does, what it
reports, and how a node is given back (exporter.controller.steps).

The NodeRollbacks here are built in memory: the steps read and write Nodes, Pods and
Evictions, never the NodeRollback itself (the executor records their outcomes).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from exporter.controller.coordination import Pause
from exporter.controller.settings import ExecutorSettings
from exporter.controller.steps import (
    AGENT_UNREACHABLE,
    CLEANUP_FAILED,
    CLEANUP_TIMEOUT,
    CORRELATED_FAILURE,
    NODE_GONE,
    NOT_VERIFIED,
    PAUSED,
    PDB_BLOCKED,
    RECOVERED,
    RUNTIME_NOT_CLEAN,
    RUNTIME_UNAVAILABLE,
    WAITING_FOR_AGENT,
    Go,
    StepRunner,
    Wait,
    request_id,
)
from exporter.kube.api import KubeAPI
from exporter.kube.writer import KubeWriter
from exporter.model.kube import TAINT_NODESYNC
from exporter.model.rfc3339 import format_time
from exporter.model.rollback import (
    CLEANUP_REQUEST_ANNOTATION,
    CLEANUP_STATUS_ANNOTATION,
    Action,
    NodeRollback,
    Phase,
    PodTarget,
    RollbackSpec,
    StepKind,
    StepState,
    Trigger,
    Verdicts,
)
from exporter.model.rollback_state import (
    BEFORE_ABSENT,
    BEFORE_PRESENT,
    OBSERVED_BEFORE,
    initial_status,
    start_step,
)
from exporter.settings.declare import changed
from nodesync_sim.fake.apiserver import APIServer
from nodesync_sim.fake.apiserver.store import Store
from tests.controller.executor_harness import node_object, pod_object

NODE = "worker-1"
SETTINGS = changed(
    ExecutorSettings(), eviction_timeout=60.0, cleanup_ack_timeout=30.0, cleanup_timeout=300.0
)


@dataclasses.dataclass
class Env:
    server: APIServer
    runner: StepRunner
    leases: dict[str, float]
    paused: Pause

    @property
    def store(self) -> Store:
        return self.server.store

    def node(self) -> dict[str, Any] | None:
        return self.store.try_get("nodes", NODE)

    def uid(self) -> str:
        return str(self.store.get("nodes", NODE)["metadata"]["uid"])

    def annotations(self) -> dict[str, str]:
        return dict((self.node() or {}).get("metadata", {}).get("annotations") or {})

    def answer(
        self, request: str, state: str, error: str = "", remaining: dict[str, Any] | None = None
    ) -> None:
        """The node's agent writes its cleanup status (``remaining`` only when given: an agent
        that does not report it leaves the key out)."""
        status: dict[str, Any] = {
            "id": request,
            "state": state,
            "removedSandboxes": 1,
            "removedContainers": 2,
            "skipped": 0,
            "finishedAt": format_time(time.time()),
            "error": error,
        }
        if remaining is not None:
            status["remaining"] = remaining
        patch = {"metadata": {"annotations": {CLEANUP_STATUS_ANNOTATION: json.dumps(status)}}}
        self.store.patch("nodes", NODE, patch)


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    async with APIServer() as server:
        api = KubeAPI(server.aio_configuration())
        leases: dict[str, float] = {}
        paused = Pause()
        runner = StepRunner(
            KubeWriter(api),
            SETTINGS,
            lease_renew_time=leases.get,
            correlated_failure=paused,
            poll_interval=0.5,
        )
        server.store.create("nodes", node_object(NODE))
        try:
            yield Env(server, runner, leases, paused)
        finally:
            await api.close()


def rollback(
    env: Env,
    action: Action = Action.ROLLBACK_NODE,
    *,
    delete_node: bool = False,
    paused: bool = False,
    pod: PodTarget | None = None,
) -> NodeRollback:
    spec = RollbackSpec(
        node=NODE,
        node_uid=env.uid(),
        action=action,
        trigger=Trigger("NodesyncNewNodeNotReady", "fp", 1000.0),
        decision=Verdicts(decided_at=time.time()),
        delete_node=delete_node,
        pod=pod,
        paused=paused,
    )
    return NodeRollback("nr-1", spec, initial_status(spec), uid="3b1c9a4e-uid")


def at(r: NodeRollback, kind: StepKind) -> int:
    return next(i for i, s in enumerate(r.status.steps) if s.kind is kind)


def started(
    r: NodeRollback,
    kind: StepKind,
    observed: dict[str, str] | None = None,
    *,
    ago: float = 0.0,
    done_before: StepState = StepState.DONE,
    reason: str = "",
) -> NodeRollback:
    """``r`` with the steps before ``kind`` finished and ``kind`` running since ``ago`` s."""
    index = at(r, kind)
    steps = tuple(
        dataclasses.replace(s, state=done_before, reason=reason) if i < index else s
        for i, s in enumerate(r.status.steps)
    )
    status = dataclasses.replace(r.status, steps=steps)
    status = start_step(status, index, time.time() - ago, observed)
    return dataclasses.replace(r, status=status)


# ---------------------------------------------------------------- the re-check


async def test_a_node_that_is_gone_or_another_object_ends_the_rollback(env: Env) -> None:
    r = rollback(env)
    env.store.delete("nodes", NODE)
    result = await env.runner.precheck(r, 0)
    assert not isinstance(result, (Go, Wait))
    assert (result.state, result.reason, result.stop) == (
        StepState.SKIPPED,
        NODE_GONE,
        Phase.SUCCEEDED,
    )
    env.store.create("nodes", node_object(NODE))  # the same name, another uid
    result = await env.runner.precheck(r, 0)
    assert not isinstance(result, (Go, Wait))
    assert result.reason == NODE_GONE
    assert "another object" in result.message


async def test_a_deletion_found_running_and_a_node_gone_is_done_not_node_gone(env: Env) -> None:
    """The deletion was sent before a crash: it is this rollback's, and recorded as done."""
    r = started(rollback(env, delete_node=True), StepKind.DELETE_NODE)
    env.store.delete("nodes", NODE)
    result = await env.runner.precheck(r, at(r, StepKind.DELETE_NODE))
    assert not isinstance(result, (Go, Wait))
    assert (result.state, result.reason, result.stop) == (StepState.DONE, "", None)


@pytest.mark.parametrize(
    ("labels", "taints", "reason"),
    [
        ({"node-role.kubernetes.io/control-plane": ""}, [], "control_plane"),
        ({"nodesync.io/protected": "true"}, [], "protected"),
        ({}, [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}], "other"),
    ],
)
async def test_a_node_that_became_untouchable_stops_the_rollback(
    env: Env, labels: dict[str, str], taints: list[dict[str, str]], reason: str
) -> None:
    r = rollback(env)
    node = env.store.get("nodes", NODE)
    node["metadata"]["labels"] = labels
    node["spec"]["taints"] = taints
    env.store.replace("nodes", node)
    result = await env.runner.precheck(r, 0)
    assert not isinstance(result, (Go, Wait))
    assert (result.state, result.stop) == (StepState.SKIPPED, Phase.CANCELLED)
    assert reason in result.reason


async def test_a_paused_rollback_waits(env: Env) -> None:
    result = await env.runner.precheck(rollback(env, paused=True), 0)
    assert isinstance(result, Wait)
    assert result.reason == PAUSED


async def test_a_recovered_node_stops_a_node_rollback_only(env: Env) -> None:
    node = env.store.get("nodes", NODE)
    node["status"]["conditions"][0].update(status="True", reason="KubeletReady")
    env.store.replace("nodes", node, subresource="status")
    env.leases[NODE] = time.time()
    result = await env.runner.precheck(rollback(env), 0)
    assert not isinstance(result, (Go, Wait))
    assert (result.reason, result.stop) == (RECOVERED, Phase.CANCELLED)
    # Recovery is not a reason to stop a cleanup of orphans, nor a deletion under way.
    assert isinstance(await env.runner.precheck(rollback(env, Action.CLEANUP_ORPHANS), 0), Go)
    deleting = started(rollback(env, delete_node=True), StepKind.DELETE_NODE)
    assert isinstance(await env.runner.precheck(deleting, at(deleting, StepKind.DELETE_NODE)), Go)
    # A stale Lease is not recovered, whatever the condition says.
    env.leases[NODE] = time.time() - 3600
    assert isinstance(await env.runner.precheck(rollback(env), 0), Go)


async def test_the_correlated_failure_guard_holds_steps_not_yet_started(env: Env) -> None:
    env.paused.paused = True
    result = await env.runner.precheck(rollback(env), 0)
    assert isinstance(result, Wait)
    assert result.reason == CORRELATED_FAILURE
    # A step already running goes on (its effect may have happened), as does a cleanup.
    running = started(rollback(env), StepKind.CORDON, {OBSERVED_BEFORE: BEFORE_ABSENT})
    assert isinstance(await env.runner.precheck(running, 0), Go)
    assert isinstance(await env.runner.precheck(rollback(env, Action.CLEANUP_ORPHANS), 0), Go)


async def test_the_intent_records_what_the_node_was_before_the_step(env: Env) -> None:
    r = rollback(env)
    assert await env.runner.precheck(r, at(r, StepKind.CORDON)) == Go(
        {OBSERVED_BEFORE: BEFORE_ABSENT}
    )
    env.store.patch("nodes", NODE, {"spec": {"unschedulable": True}})
    assert await env.runner.precheck(r, at(r, StepKind.CORDON)) == Go(
        {OBSERVED_BEFORE: BEFORE_PRESENT}
    )
    # Resumed after a restart: what the first attempt saw is kept.
    resumed = started(r, StepKind.CORDON, {OBSERVED_BEFORE: BEFORE_ABSENT})
    assert await env.runner.precheck(resumed, 0) == Go(None)


# ---------------------------------------------------------------- cordon and taint


async def test_cordon_and_taint_change_the_node_once(env: Env) -> None:
    r = started(rollback(env), StepKind.CORDON, {OBSERVED_BEFORE: BEFORE_ABSENT})
    result = await env.runner.execute(r, 0)
    assert not isinstance(result, Wait)
    assert (result.state, result.made_change) == (StepState.DONE, True)
    assert env.store.get("nodes", NODE)["spec"]["unschedulable"] is True
    r = started(r, StepKind.TAINT, {OBSERVED_BEFORE: BEFORE_ABSENT})
    result = await env.runner.execute(r, at(r, StepKind.TAINT))
    assert not isinstance(result, Wait)
    assert (result.state, result.made_change) == (StepState.DONE, True)
    taints = env.store.get("nodes", NODE)["spec"]["taints"]
    assert [t["key"] for t in taints] == [TAINT_NODESYNC]
    patches = env.server.counters.count("patch", "nodes")
    # Run again (a restart after the effect, before its record): no write, and it was ours.
    again = await env.runner.execute(r, at(r, StepKind.TAINT))
    assert not isinstance(again, Wait)
    assert (again.state, again.made_change) == (StepState.DONE, True)
    assert "before a restart" in again.message
    assert env.server.counters.count("patch", "nodes") == patches


async def test_a_cordon_someone_else_made_is_not_claimed(env: Env) -> None:
    env.store.patch("nodes", NODE, {"spec": {"unschedulable": True}})
    r = started(rollback(env), StepKind.CORDON, {OBSERVED_BEFORE: BEFORE_PRESENT})
    result = await env.runner.execute(r, 0)
    assert not isinstance(result, Wait)
    assert (result.state, result.made_change) == (StepState.DONE, False)
    assert "already cordoned" in result.message


# ---------------------------------------------------------------- drain


def bare_and_emptydir_pods(env: Env) -> None:
    """On the node: a ReplicaSet's pod, a bare pod, a ReplicaSet's pod with an emptyDir."""
    env.store.create("pods", pod_object("web", NODE), namespace="default")
    bare = pod_object("bare", NODE)
    bare["metadata"]["ownerReferences"] = []
    env.store.create("pods", bare, namespace="default")
    scratch = pod_object("scratch", NODE)
    scratch["spec"]["volumes"] = [{"name": "tmp", "emptyDir": {}}]
    env.store.create("pods", scratch, namespace="default")


def evicted(env: Env, name: str) -> bool:
    pod = env.store.try_get("pods", name, namespace="default")
    return pod is None or bool(pod["metadata"].get("deletionTimestamp"))


async def test_by_default_a_drain_evicts_bare_and_emptydir_pods(env: Env) -> None:
    bare_and_emptydir_pods(env)
    r = started(rollback(env), StepKind.DRAIN)
    result = await env.runner.execute(r, at(r, StepKind.DRAIN))
    assert not isinstance(result, Wait)
    assert result.message == "evicted 3 pods; 0 left alone; 0 already gone"
    assert [evicted(env, n) for n in ("web", "bare", "scratch")] == [True, True, True]


async def test_the_drain_policy_flags_leave_bare_and_emptydir_pods(env: Env) -> None:
    bare_and_emptydir_pods(env)
    settings = changed(SETTINGS, drain_force=False, drain_delete_emptydir_data=False)
    api = KubeAPI(env.server.aio_configuration())
    try:
        runner = StepRunner(
            KubeWriter(api),
            settings,
            lease_renew_time=env.leases.get,
        )
        r = started(rollback(env), StepKind.DRAIN)
        result = await runner.execute(r, at(r, StepKind.DRAIN))
    finally:
        await api.close()
    assert not isinstance(result, Wait)
    assert result.state is StepState.DONE
    assert result.message == (
        "evicted 1 pods; 2 left alone (1 not managed by a controller (--drain.force), "
        "1 uses emptyDir (--drain.delete-emptydir-data)); 0 already gone"
    )
    assert [evicted(env, n) for n in ("web", "bare", "scratch")] == [True, False, False]


async def test_drain_evicts_what_kubectl_drain_would_and_leaves_daemonsets(env: Env) -> None:
    env.store.create("pods", pod_object("web", NODE), namespace="default")
    env.store.create("pods", pod_object("agent", NODE, owner="DaemonSet"), namespace="default")
    env.store.create("pods", pod_object("elsewhere", "worker-2"), namespace="default")
    r = started(rollback(env), StepKind.DRAIN)
    result = await env.runner.execute(r, at(r, StepKind.DRAIN))
    assert not isinstance(result, Wait)
    assert result.state is StepState.DONE
    assert "evicted 1 pods; 1 left alone" in result.message
    web = env.store.try_get("pods", "web", namespace="default")
    assert web is None or web["metadata"].get("deletionTimestamp")
    agent = env.store.get("pods", "agent", namespace="default")
    assert not agent["metadata"].get("deletionTimestamp")
    assert env.store.get("pods", "elsewhere", namespace="default")


def _budget(env: Env) -> None:
    env.store.create("pods", pod_object("db", NODE, labels={"app": "db"}), namespace="default")
    env.store.create(
        "poddisruptionbudgets",
        {
            "metadata": {"name": "db"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}},
        },
        namespace="default",
    )


async def test_a_pdb_makes_the_drain_wait_then_fail_without_forcing(env: Env) -> None:
    _budget(env)
    r = started(rollback(env), StepKind.DRAIN)
    index = at(r, StepKind.DRAIN)
    result = await env.runner.execute(r, index)
    assert isinstance(result, Wait)
    assert result.reason == PDB_BLOCKED
    assert "default/db" in result.message
    # Past --drain.eviction-timeout from the first attempt: the step fails and asks for a person.
    late = started(rollback(env), StepKind.DRAIN, ago=SETTINGS.eviction_timeout + 1)
    result = await env.runner.execute(late, index)
    assert not isinstance(result, Wait)
    assert (result.state, result.reason, result.stop) == (
        StepState.FAILED,
        PDB_BLOCKED,
        Phase.FAILED,
    )
    assert "review the PodDisruptionBudgets" in result.action_required
    db = env.store.get("pods", "db", namespace="default")
    assert not db["metadata"].get("deletionTimestamp"), "nothing is forced"


async def test_evicting_one_pod_targets_that_pod_only(env: Env) -> None:
    uid = env.store.create("pods", pod_object("crashy", NODE), namespace="default")["metadata"][
        "uid"
    ]
    env.store.create("pods", pod_object("other", NODE), namespace="default")
    target = PodTarget("default", "crashy", uid)
    r = started(rollback(env, Action.EVICT_POD, pod=target), StepKind.EVICT_POD)
    result = await env.runner.execute(r, at(r, StepKind.EVICT_POD))
    assert not isinstance(result, Wait)
    assert result.state is StepState.DONE
    crashy = env.store.try_get("pods", "crashy", namespace="default")
    assert crashy is None or crashy["metadata"].get("deletionTimestamp")
    assert not env.store.get("pods", "other", namespace="default")["metadata"].get(
        "deletionTimestamp"
    )
    # Gone by now (or recreated elsewhere): done, nothing evicted.
    env.store.delete("pods", "crashy", namespace="default", grace_period_seconds=0)
    result = await env.runner.execute(r, at(r, StepKind.EVICT_POD))
    assert not isinstance(result, Wait)
    assert result.state is StepState.DONE
    assert "no longer on node" in result.message


# ---------------------------------------------------------------- cleanup


async def _cleanup(env: Env, r: NodeRollback) -> Wait | Any:
    return await env.runner.execute(r, at(r, StepKind.CLEANUP_RUNTIME))


async def test_cleanup_asks_with_the_rollbacks_uid_and_takes_only_its_answer(env: Env) -> None:
    r = started(rollback(env), StepKind.CLEANUP_RUNTIME)
    request = request_id(r)
    assert request == r.uid
    # An answer an earlier rollback left on the node is not this one's.
    env.answer("nodesync-plan-1", "done")
    result = await _cleanup(env, r)
    assert isinstance(result, Wait)
    assert result.reason == WAITING_FOR_AGENT
    assert env.annotations()[CLEANUP_REQUEST_ANNOTATION] == request
    env.answer(request, "running")  # taken up: still waiting
    result = await _cleanup(env, r)
    assert isinstance(result, Wait)
    assert "is cleaning up" in result.message
    env.answer(request, "done")
    result = await _cleanup(env, r)
    assert not isinstance(result, Wait)
    assert result.state is StepState.DONE
    assert "removed 1 sandboxes and 2 containers" in result.message


@pytest.mark.parametrize(
    ("state", "reason"), [("unavailable", RUNTIME_UNAVAILABLE), ("failed", CLEANUP_FAILED)]
)
async def test_a_cleanup_that_cannot_run_is_skipped_by_a_node_rollback_and_fails_orphans(
    env: Env, state: str, reason: str
) -> None:
    for action, expected, stop in (
        (Action.ROLLBACK_NODE, StepState.SKIPPED, None),
        (Action.CLEANUP_ORPHANS, StepState.FAILED, Phase.FAILED),
    ):
        r = started(rollback(env, action), StepKind.CLEANUP_RUNTIME)
        env.answer(request_id(r), state, error="runtime: deadline exceeded")
        result = await _cleanup(env, r)
        assert not isinstance(result, Wait)
        assert (result.state, result.reason, result.stop) == (expected, reason, stop)
        assert "deadline exceeded" in result.message


async def test_an_unreachable_node_whose_agent_never_answers_is_skipped_after_the_ack_timeout(
    env: Env,
) -> None:
    r = started(rollback(env), StepKind.CLEANUP_RUNTIME, ago=SETTINGS.cleanup_ack_timeout - 5)
    assert isinstance(await _cleanup(env, r), Wait)  # not yet
    r = started(rollback(env), StepKind.CLEANUP_RUNTIME, ago=SETTINGS.cleanup_ack_timeout + 1)
    result = await _cleanup(env, r)  # no Lease at all: the node is dark
    assert not isinstance(result, Wait)
    assert (result.state, result.reason) == (StepState.SKIPPED, AGENT_UNREACHABLE)
    # With a fresh Lease the node is there: its agent should answer, so the step waits on.
    env.leases[NODE] = time.time()
    assert isinstance(await _cleanup(env, r), Wait)


async def test_a_reachable_node_whose_agent_does_not_finish_fails_and_nothing_is_deleted(
    env: Env,
) -> None:
    env.leases[NODE] = time.time()
    r = started(
        rollback(env, delete_node=True),
        StepKind.CLEANUP_RUNTIME,
        ago=SETTINGS.cleanup_timeout + 1,
    )
    env.answer("an-earlier-rollback", "done")
    result = await _cleanup(env, r)
    assert not isinstance(result, Wait)
    assert (result.state, result.reason, result.stop) == (
        StepState.FAILED,
        CLEANUP_TIMEOUT,
        Phase.FAILED,
    )
    assert "check its nodesync agent" in result.action_required
    assert env.node() is not None


# ---------------------------------------------------------------- verify, delete


NOTHING_LEFT = {"sandboxes": 0, "containers": 0, "pods": []}


async def test_verify_needs_the_cordon_and_a_finished_cleanup(env: Env) -> None:
    r = started(rollback(env), StepKind.VERIFY)
    env.answer(request_id(r), "done", remaining=NOTHING_LEFT)
    result = await env.runner.execute(r, at(r, StepKind.VERIFY))
    assert not isinstance(result, Wait)
    assert (result.state, result.reason) == (StepState.FAILED, NOT_VERIFIED)
    assert "not cordoned" in result.message
    env.store.patch("nodes", NODE, {"spec": {"unschedulable": True}})
    result = await env.runner.execute(r, at(r, StepKind.VERIFY))
    assert not isinstance(result, Wait)
    assert (result.state, result.action_required) == (StepState.DONE, "")
    assert "holds nothing unwanted" in result.message


async def test_verify_fails_while_the_runtime_still_holds_what_nobody_wants(env: Env) -> None:
    env.store.patch("nodes", NODE, {"spec": {"unschedulable": True}})
    for action in (Action.ROLLBACK_NODE, Action.CLEANUP_ORPHANS):
        r = started(rollback(env, action, delete_node=True), StepKind.VERIFY)
        left = {"sandboxes": 2, "containers": 1, "pods": ["apps/web-0", "apps/web-1"]}
        env.answer(request_id(r), "done", remaining=left)
        result = await env.runner.execute(r, at(r, StepKind.VERIFY))
        assert not isinstance(result, Wait)
        assert (result.state, result.reason, result.stop) == (
            StepState.FAILED,
            RUNTIME_NOT_CLEAN,
            Phase.FAILED,
        )
        assert "still holds 2 sandboxes and 1 containers" in result.message
        assert "apps/web-0, apps/web-1" in result.message
        assert NODE in result.action_required
        # The same rollback once the agent reports the runtime clean: verified.
        env.answer(request_id(r), "done", remaining=NOTHING_LEFT)
        result = await env.runner.execute(r, at(r, StepKind.VERIFY))
        assert not isinstance(result, Wait)
        assert result.state is StepState.DONE


async def test_verify_without_the_agents_answer_on_the_node_is_not_verified(env: Env) -> None:
    env.store.patch("nodes", NODE, {"spec": {"unschedulable": True}})
    r = started(rollback(env, delete_node=True), StepKind.VERIFY)
    for answer in (None, ("someone-else", "done"), (request_id(r), "running")):
        if answer is not None:
            env.answer(*answer, remaining=NOTHING_LEFT)
        result = await env.runner.execute(r, at(r, StepKind.VERIFY))
        assert not isinstance(result, Wait)
        assert (result.state, result.reason) == (StepState.FAILED, RUNTIME_NOT_CLEAN), answer
        assert "no longer on the node" in result.message


async def test_verify_takes_an_answer_without_remaining_as_before_and_says_so(env: Env) -> None:
    # An agent older than the report (a rolling upgrade): its answer has no "remaining".
    env.store.patch("nodes", NODE, {"spec": {"unschedulable": True}})
    r = started(rollback(env), StepKind.VERIFY)
    env.answer(request_id(r), "done")
    result = await env.runner.execute(r, at(r, StepKind.VERIFY))
    assert not isinstance(result, Wait)
    assert (result.state, result.action_required) == (StepState.DONE, "")
    assert "does not report what the runtime still holds" in result.message


async def test_the_cleanup_step_says_what_the_runtime_still_holds(env: Env) -> None:
    r = started(rollback(env), StepKind.CLEANUP_RUNTIME)
    env.answer(request_id(r), "done", remaining={"sandboxes": 1, "containers": 0, "pods": ["a/b"]})
    result = await _cleanup(env, r)
    assert not isinstance(result, Wait)
    assert result.state is StepState.DONE  # verify judges it
    assert "the runtime still holds 1 sandboxes and 0 containers nobody wants (a/b)" in (
        result.message
    )


async def test_verify_asks_for_a_person_when_a_skipped_cleanup_leaves_the_node(env: Env) -> None:
    env.store.patch("nodes", NODE, {"spec": {"unschedulable": True}})
    r = started(rollback(env), StepKind.VERIFY)
    cleanup = at(r, StepKind.CLEANUP_RUNTIME)
    steps = list(r.status.steps)
    steps[cleanup] = dataclasses.replace(
        steps[cleanup], state=StepState.SKIPPED, reason=RUNTIME_UNAVAILABLE
    )
    r = dataclasses.replace(r, status=dataclasses.replace(r.status, steps=tuple(steps)))
    result = await env.runner.execute(r, at(r, StepKind.VERIFY))
    assert not isinstance(result, Wait)
    assert result.state is StepState.DONE
    assert "delete the Node" in result.action_required
    # With --rollback.delete-nodes the deletion follows: nobody needs to act.
    deleting = dataclasses.replace(r, spec=dataclasses.replace(r.spec, delete_node=True))
    result = await env.runner.execute(deleting, at(r, StepKind.VERIFY))
    assert not isinstance(result, Wait)
    assert result.action_required == ""


async def test_delete_removes_the_node_it_was_decided_for(env: Env) -> None:
    r = started(rollback(env, delete_node=True), StepKind.DELETE_NODE)
    result = await env.runner.execute(r, at(r, StepKind.DELETE_NODE))
    assert not isinstance(result, Wait)
    assert result.state is StepState.DONE
    assert env.node() is None
    # Run again after a restart: nothing to delete, still done.
    result = await env.runner.execute(r, at(r, StepKind.DELETE_NODE))
    assert not isinstance(result, Wait)
    assert result.state is StepState.DONE


# ---------------------------------------------------------------- giving back


async def test_undo_removes_exactly_what_the_record_says_the_rollback_made(env: Env) -> None:
    r = started(rollback(env), StepKind.CORDON, {OBSERVED_BEFORE: BEFORE_ABSENT})
    await env.runner.execute(r, 0)
    r = started(r, StepKind.TAINT, {OBSERVED_BEFORE: BEFORE_ABSENT})
    # Crashed after the taint, before its record: the record says the taint may have been made.
    await env.runner.execute(r, at(r, StepKind.TAINT))
    cordon = dataclasses.replace(r.status.steps[0], made_change=True)
    r = dataclasses.replace(
        r, status=dataclasses.replace(r.status, steps=(cordon, *r.status.steps[1:]))
    )
    assert sorted(await env.runner.undo(r)) == ["removed taint nodesync.io/rollback", "uncordoned"]
    node = env.store.get("nodes", NODE)
    assert not node["spec"].get("unschedulable")
    assert not node["spec"].get("taints")
    # Run again (a restart before the give-back was recorded): nothing is written, and what
    # was found already given back is said.
    patches = env.server.counters.count("patch", "nodes")
    assert sorted(await env.runner.undo(r)) == ["no taint nodesync.io/rollback", "not cordoned"]
    assert env.server.counters.count("patch", "nodes") == patches


async def test_undo_leaves_a_cordon_someone_else_made(env: Env) -> None:
    env.store.patch("nodes", NODE, {"spec": {"unschedulable": True}})
    r = started(rollback(env), StepKind.CORDON, {OBSERVED_BEFORE: BEFORE_PRESENT})
    result = await env.runner.execute(r, 0)
    assert not isinstance(result, Wait)
    done = dataclasses.replace(
        r.status.steps[0], state=StepState.DONE, made_change=result.made_change
    )
    r = dataclasses.replace(
        r, status=dataclasses.replace(r.status, steps=(done, *r.status.steps[1:]))
    )
    assert await env.runner.undo(r) == []
    assert env.store.get("nodes", NODE)["spec"]["unschedulable"] is True
