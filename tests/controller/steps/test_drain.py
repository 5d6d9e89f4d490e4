"""Drain and the eviction of one pod (exporter.controller.steps.drain): what the drain policy
evicts, and a PodDisruptionBudget's refusal that waits, then fails without forcing.

The NodeRollbacks here are built in memory (tests.controller.steps.stage).
"""

from __future__ import annotations

from exporter.controller.steps import (
    PDB_BLOCKED,
    StepRunner,
    Wait,
)
from exporter.kube.api import KubeAPI
from exporter.kube.writer import KubeWriter
from exporter.model.rollback import (
    Action,
    Phase,
    PodTarget,
    StepKind,
    StepState,
)
from exporter.settings.declare import changed
from tests.controller.executor_harness import pod_object
from tests.controller.steps.stage import NODE, SETTINGS, Env, at, rollback, started


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
