"""End to end on the whole local chain: simulated nodes and one real node (a real containerd and
the real agent) join the test API server; the real controller (webhook and executor) acts on what
a real Prometheus, loaded with the shipped rules, fires through a real Alertmanager with the
shipped route. Only timers are shortened (scenarios/e2e-*.json); see docs/e2e.md.
"""

from __future__ import annotations

import pytest

from exporter.model.cleanup import CleanupStatus, Remaining
from exporter.model.rollback import CLEANUP_STATUS_ANNOTATION
from nodesync_sim.demo.chain import AGENT_USER, SIM_USER, Chain
from nodesync_sim.fake.scaleout import timeline
from tests.e2e.chainrun import (
    POLL,
    acceptance_budget,
    alert_for,
    controller_value,
    controller_writes,
    events,
    pause_budget,
    pause_start,
    reaction,
    rule_expr,
    running,
    sandbox_ids,
    scenario,
    without_pause,
)
from tests.support.wait import until_async

pytestmark = [pytest.mark.containerd, pytest.mark.prometheus]

REAL = "real-1"
CRASHING_NODE = "wave-1-002"
CRASHING_POD = "app-wave-1-002-0"
REAL_APP_POD = "app-real-1-0"
NOT_READY = "NodesyncNewNodeNotReady"
CRASH_LOOPING = "NodesyncNewNodePodCrashLooping"
ROLLBACK_EVENTS = {
    "NodesyncCordon",
    "NodesyncTaint",
    "NodesyncDrain",
    "NodesyncCleanupRuntime",
    "NodesyncVerify",
    "NodesyncDeleteNode",
}


def _firing(alert: str, **labels: str) -> str:
    matchers = ",".join(f'{k}="{v}"' for k, v in {"alertname": alert, **labels}.items())
    return f'ALERTS{{{matchers},alertstate="firing"}}'


def _event_reasons(chain: Chain, name: str) -> set[str]:
    return {e["reason"] for e in events(chain) if e["involvedObject"]["name"] == name}


@pytest.mark.timeout(150)
async def test_a_failed_real_node_and_a_crash_loop_are_rolled_back_and_nothing_else(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with running(scenario("e2e-rollback.json")) as chain:
        store = chain.api.store
        sandboxes_before = await sandbox_ids(chain)
        assert chain.real_pods is not None
        orphans = set(chain.orphan_sandboxes)
        assert orphans, "the scenario leaves an orphan sandbox in the real containerd"
        assert orphans <= sandboxes_before
        chain.start_waves()
        prom = chain.prom

        # The alerts fire in Prometheus, from the shipped rules.
        await prom.wait_for_async(_firing(CRASH_LOOPING, pod=CRASHING_POD), within=60)
        await prom.wait_for_async(_firing(NOT_READY, node=REAL), within=60)

        # They reach the hook, which rolls the real node back to the end
        # (--rollback.delete-nodes) ...
        await until_async(
            lambda: "NodesyncDeleteNode" in _event_reasons(chain, REAL),
            timeout=60,
            what="the node deleted",
            interval=POLL,
        )

        # Both NodeRollbacks record the end: the node rollback and the eviction succeeded.
        def phases() -> dict[str, str]:
            return {
                o["spec"]["nodeName"]: (o.get("status") or {}).get("phase", "")
                for o in store.list("noderollbacks")
            }

        await until_async(
            lambda: phases() == {REAL: "Succeeded", CRASHING_NODE: "Succeeded"},
            timeout=30,
            what="both NodeRollbacks to succeed",
            interval=POLL,
        )
        # ... and evicts the crash-looping pod, whose kubelet confirms it gone.
        await until_async(
            lambda: store.try_get("pods", CRASHING_POD, namespace="default") is None,
            timeout=30,
            what="the crash-looping pod gone",
            interval=POLL,
        )
        real_pod = store.get("pods", REAL_APP_POD, namespace="default")
        evicted = chain.real_pods.sandboxes[real_pod["metadata"]["uid"]]
        daemon = set(chain.real_pods.sandboxes.values()) - {evicted}

        # The real node: cordoned and tainted before it was deleted; its agent cleaned up.
        last = chain.node_history.last_before_deletion(REAL)
        assert last is not None, "the real node was not deleted"
        assert last["spec"].get("unschedulable") is True
        taints = {(t["key"], t["effect"]) for t in last["spec"].get("taints", [])}
        assert ("nodesync.io/rollback", "NoSchedule") in taints
        status = CleanupStatus.from_json(last["metadata"]["annotations"][CLEANUP_STATUS_ANNOTATION])
        assert status is not None
        # The orphan, and the evicted pod's sandbox once its deletion was due: its kubelet is
        # gone (healthz fails, Ready Unknown), nobody else would stop it.
        assert (status.state.value, status.removed_sandboxes) == ("done", len(orphans) + 1)
        assert status.remaining == Remaining()
        assert _event_reasons(chain, REAL) >= ROLLBACK_EVENTS
        # Through the CRI: the orphan and the evicted pod's sandbox are gone from the real
        # containerd; the DaemonSet pod's, which nobody deleted, stays.
        after = await sandbox_ids(chain)
        assert not orphans & after
        assert evicted not in after
        assert len(daemon) == 1
        assert daemon <= after
        # Its evictable pod was evicted (the DaemonSet pod left alone), with the Eviction API,
        # and stays Terminating: no kubelet confirms its deletion.
        real_pod = store.get("pods", REAL_APP_POD, namespace="default")
        assert real_pod["metadata"].get("deletionTimestamp")
        assert "NodesyncEvictPod" in _event_reasons(chain, CRASHING_POD)

        # Exactly those: every controller write is about the real node or the two pods.
        writes = controller_writes(chain)
        evictions = sorted(w for w in writes if w.endswith("/eviction"))
        assert evictions == [
            f"create pods/{REAL_APP_POD}/eviction",
            f"create pods/{CRASHING_POD}/eviction",
        ]
        assert chain.api.counters.count(verb="create", resource="pods/eviction") == 2
        node_writes = {w for w in writes if w.split()[1].startswith("nodes")}
        assert node_writes == {f"patch nodes/{REAL}", f"delete nodes/{REAL}"}
        # ... and their two NodeRollbacks: created, then advanced through their status.
        rollbacks = {
            o["spec"]["nodeName"]: o["metadata"]["name"] for o in store.list("noderollbacks")
        }
        assert set(rollbacks) == {REAL, CRASHING_NODE}
        assert {w for w in writes if w not in node_writes and w not in evictions} == {
            "create events",
            "create noderollbacks",
            *(f"update noderollbacks/{name}/status" for name in rollbacks.values()),
        }
        involved = {(e["involvedObject"]["name"], e["reason"]) for e in events(chain)}
        named = {name for name, _ in involved}
        assert {REAL, CRASHING_POD} <= named <= {REAL, CRASHING_POD, CRASHING_NODE}, named
        # The eviction's decision and its step are on the crash-looping pod, with its uid.
        on_pod = {r for name, r in involved if name == CRASHING_POD}
        assert {"NodesyncRollback", "NodesyncEvictPod"} <= on_pod, on_pod
        # Its node gets nothing, unless the alert waited: on a starved machine the simulated old
        # nodes' Leases can look stale for a moment, the correlated-failure guard then holds the
        # alert back and says so on the node, before it plans.
        on_node = {r for name, r in involved if name == CRASHING_NODE}
        assert on_node <= {"NodesyncWaiting"}, on_node

        # Every healthy node untouched: no cordon, taint, nodesync annotation, eviction.
        for plan in chain.sim.layout.nodes:
            if plan.name == REAL:
                continue
            node = store.get("nodes", plan.name)
            assert not node["spec"].get("unschedulable"), plan.name
            assert not node["spec"].get("taints"), plan.name
            annotations = node["metadata"].get("annotations", {})
            assert not [a for a in annotations if a.startswith("nodesync.io/")], plan.name
            for pod in plan.pods:
                if pod.name == CRASHING_POD:
                    continue
                live = store.get("pods", pod.name, namespace=pod.namespace)
                assert not live["metadata"].get("deletionTimestamp"), pod.name
        # Nobody else wrote what only the hook may write.
        for user in (SIM_USER, AGENT_USER):
            theirs = chain.audit.by(user)
            assert not [
                e
                for e in theirs
                if e.subresource == "eviction" or (e.verb == "delete" and e.resource == "nodes")
            ], user

        # Time from the failure to the rollback starting, less the rule's for:.
        measured = reaction(chain, REAL, NOT_READY)
        budget = acceptance_budget(chain)
        start = chain.sim.clock.at(0)
        assert measured.stopped_at is not None
        with capsys.disabled():
            print(
                f"\n[e2e] {REAL}: Lease stopped at +{measured.stopped_at - start:.2f} s, "
                f"Ready no longer True at +{measured.failed_at - start:.2f} s, "
                f"alert condition true at +{measured.condition_at - start:.2f} s, "
                f"cordoned at +{measured.acted_at - start:.2f} s; time to rollback less for: "
                f"({measured.rule_for:g} s) = {measured.seconds:.2f} s (budget {budget:g} s)"
            )
        assert 0 < measured.seconds <= budget

        # The rollback alert resolves once the deleted node's series end (keep_firing_for),
        # and Alertmanager tells the hook.
        await prom.wait_for_async(
            f'ALERTS{{alertname="{NOT_READY}",node="{REAL}"}}', lambda r: not r, within=30
        )
        await until_async(
            lambda: _resolved(chain),
            timeout=30,
            what="the hook to receive the resolved rollback alert",
            interval=POLL,
        )
        # The crash-loop alert resolves too: the pod is gone, and so are its series (the API
        # view's and the agent's loop series end with the pod); no write since the rollback.
        await prom.wait_for_async(
            _firing(CRASH_LOOPING, pod=CRASHING_POD), lambda r: not r, within=30
        )
        assert controller_writes(chain) == writes
        assert not chain.sim.timeline.of(REAL, timeline.NODE_GONE)  # its kubelet was silent


async def _resolved(chain: Chain) -> bool:
    return await controller_value(chain, "nodesync_alerts_received_total", status="resolved") >= 1


@pytest.mark.timeout(150)
async def test_a_control_plane_blip_rolls_nothing_back(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with running(scenario("e2e-blip.json")) as chain:
        chain.start_waves()
        prom = chain.prom
        new_nodes = [p.name for p in chain.sim.layout.nodes if p.role != "old"]
        # What the rollback alert would fire on without the pause: every new node, for longer
        # than its for: and two more evaluations.
        raw = f"count({without_pause(rule_expr(chain, NOT_READY))})"
        hold = (
            alert_for(chain.scenario, NOT_READY) + 2 * chain.scenario.prometheus.evaluation_interval
        )
        since: list[float] = []

        async def held() -> bool:
            result = await prom.query_async(raw)
            full = bool(result) and int(float(result[0]["value"][1])) == len(new_nodes)
            if not full:
                since.clear()
                return False
            if not since:
                since.append(chain.sim.clock.now())
            return chain.sim.clock.now() - since[0] >= hold

        await until_async(
            held,
            timeout=60,
            what="every new node to look failed long enough to fire",
            interval=POLL,
        )
        await prom.wait_for_async(
            """ALERTS{alertname="NodesyncControlPlaneSuspected",alertstate="firing",
                      reason="old_nodes_failing"}""",
            within=30,
        )
        # Nothing fired that asks for an action, the hook heard nothing, its own guard pauses,
        # and the controller wrote nothing at all.
        fired = await prom.query_async(
            'max_over_time(ALERTS{alertstate="firing",nodesync_action!="none"}[5m])'
        )
        assert not fired, fired
        # The rules paused within their budget of the old nodes failing, the pause's for:
        # included.
        start = await pause_start(chain)
        budget = pause_budget(chain)
        with capsys.disabled():
            print(
                f"\n[e2e] old nodes failing at +{start.failed_at - chain.sim.clock.at(0):.2f} s, "
                f"rules paused at +{start.paused_at - chain.sim.clock.at(0):.2f} s: "
                f"{start.seconds:.2f} s (budget {budget:g} s)"
            )
        assert 0 < start.seconds <= budget
        assert await controller_value(chain, "nodesync_rollbacks_paused") == 1
        assert await controller_value(chain, "nodesync_webhook_requests_total") == 0
        assert controller_writes(chain) == []
        assert chain.api.counters.count(resource="pods/eviction") == 0
        assert events(chain) == []
        for name in new_nodes + [p.name for p in chain.sim.layout.of_role("old")]:
            assert chain.sim.timeline.first(name, timeline.READY_UNKNOWN) is not None, name
