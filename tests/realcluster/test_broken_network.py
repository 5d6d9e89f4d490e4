"""A new node whose network cannot give pods a sandbox: its CNI configuration has only the
``loopback`` plugin (that of a node sharing the machine's network: nodesync_sim.real.node), so
kubelet's ``RunPodSandbox`` fails ``FailedCreatePodSandBox`` for a pod on the pod network,
retried forever, and the pod stays Pending (ContainerCreating). A host-network pod beside it
runs. The agent reports the Pending pod once its grace period passed, the shipped Pending rule
fires and nodesync evicts that pod, once; the node stays in service.

Before that, the same pod is ``missing_sandbox`` drift (scheduled, no ready sandbox after the
agent's drift grace): the shipped drift rule fires first and nodesync asks the agent for a
cleanup, which finds nothing to remove in the runtime (a missing sandbox is nothing to clean)
and ends Succeeded without changing the node. The test asserts that too, as it happens."""

from __future__ import annotations

import time

import pytest

from exporter.model.rfc3339 import parse_time
from nodesync_sim.real.node import RealNode
from tests.realcluster.helpers import (
    CLEANED_UP,
    audit_mark,
    audited_effects,
    create_pod,
    events_about,
    eviction_events,
    follow_rollback,
    get_pod,
    in_service,
    namespace,
    nodesync_on_node,
    pod,
    rollbacks_of,
    steps,
    value,
    wait_firing,
    wait_phase,
)
from tests.support.realcluster import RealChain
from tests.support.wait import until

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(420)]

ALERT = "NodesyncNewNodePodPending"
SANDBOX_FAILED = "FailedCreatePodSandBox"


def test_a_pod_without_a_network_on_a_new_node_is_evicted_and_the_node_stays(
    realchain: RealChain,
) -> None:
    node = realchain.join()  # its own: the evicted pod's traces are not the next test's
    mark = audit_mark(realchain.api)
    try:
        _broken_network(realchain, node, mark)
    finally:
        realchain.leave(node)


def _broken_network(realchain: RealChain, node: RealNode, mark: int) -> None:
    api = realchain.api
    name = node.name
    with namespace(api) as ns:
        create_pod(api, ns, pod("host", node))
        wait_phase(api, ns, "host", "Running")
        created = time.time()
        stuck = create_pod(api, ns, pod("app", node, host_network=False))
        uid = stuck["metadata"]["uid"]

        def sandbox_failed() -> float | None:
            for event in events_about(realchain, "Pod", "app"):
                if event["involvedObject"].get("uid") == uid and event["reason"] == SANDBOX_FAILED:
                    return parse_time(event.get("firstTimestamp"))
            return None

        failed_at = until(sandbox_failed, timeout=60, what=f"kubelet's {SANDBOX_FAILED}")
        created_at = parse_time(stuck["metadata"]["creationTimestamp"]) or 0.0
        found = get_pod(api, ns, "app") or {}
        assert found["status"]["phase"] == "Pending", found["status"]
        [waiting] = [s["state"].get("waiting", {}) for s in found["status"]["containerStatuses"]]
        assert waiting.get("reason") == "ContainerCreating", found["status"]

        missing = f'nodesync_drift_pods{{node="{name}",kind="missing_sandbox"}}'
        until(lambda: value(realchain, missing) == 1, timeout=60, what="missing_sandbox drift")
        drift_at = time.time()
        sel = f'node="{name}",namespace="{ns}",pod="app"'
        until(
            lambda: value(realchain, f"nodesync_pod_pending_since_timestamp_seconds{{{sel}}}"),
            timeout=120,
            what="the agent to report the Pending pod",
        )
        reported_at = time.time()
        alert_at = wait_firing(realchain, ALERT, sel)
        rollback, _, done_at = follow_rollback(api, name, 120, action="evict_pod")
        status = rollback["status"]
        assert status["phase"] == "Succeeded", status
        assert rollback["spec"]["pod"]["name"] == "app", rollback["spec"]
        done = steps(rollback)
        assert {s: st["state"] for s, st in done.items()} == {"evict_pod": "done"}, status
        # kubelet (alive) confirms the deletion of the pod it never started.
        api.wait_gone(f"/api/v1/namespaces/{ns}/pods/app", timeout=60)
        gone_at = time.time()
        assert (get_pod(api, ns, "host") or {}).get("status", {}).get("phase") == "Running"

        # Before it, the drift rule's cleanup: nothing to remove, the node unchanged.
        by_action = {r["spec"]["action"]: r for r in rollbacks_of(api, name)}
        assert sorted(by_action) == ["cleanup_orphans", "evict_pod"], by_action
        cleanup = by_action["cleanup_orphans"]
        assert cleanup["spec"]["trigger"]["alertname"] == "NodesyncNewNodeDrift", cleanup["spec"]
        assert cleanup["status"]["phase"] == "Succeeded", cleanup["status"]
        cleaned = steps(cleanup)
        assert {s: st["state"] for s, st in cleaned.items()} == {
            "cleanup_runtime": "done",
            "verify": "done",
        }, cleanup["status"]
        assert "removed 0 sandboxes and 0 containers" in cleaned["cleanup_runtime"]["message"]

        # The timeline, from the pod's Events and the rollbacks' own records.
        def at(text: str) -> str:
            return f"+{(parse_time(text) or 0.0) - created:.1f} s"

        [trigger] = status["triggers"]
        print(
            f"broken network on {name}: {SANDBOX_FAILED} +{failed_at - created_at:.0f} s (1 s"
            f" resolution), missing_sandbox drift seen +{drift_at - created:.0f} s, drift"
            f" cleanup {at(cleanup['spec']['trigger']['startsAt'])} (rule firing),"
            f" {at(cleanup['status']['startedAt'])} (request) to"
            f" {at(cleanup['status']['finishedAt'])} (Succeeded, nothing removed); Pending"
            f" reported by the agent +{reported_at - created:.0f} s, {ALERT} firing"
            f" {at(trigger['startsAt'])} (seen +{alert_at - created:.1f} s), eviction"
            f" {at(done['evict_pod']['startedAt'])}, rollback Succeeded"
            f" {at(status['finishedAt'])} (seen +{done_at - created:.1f} s), pod gone"
            f" +{gone_at - created:.1f} s"
        )

        # One eviction, of that pod, and the cleanup request; nothing refused.
        events, effects = audited_effects(api, mark, name)
        assert effects == {("create", "pods", "eviction"): 1, ("patch", "nodes", None): 1}, effects
        evicted = [
            e["objectRef"]["name"]
            for e in events
            if e.get("objectRef", {}).get("subresource") == "eviction"
        ]
        assert evicted == ["app"], evicted
        # The node stays Ready and schedulable; it shows the cleanup's decision and steps, the
        # pod the eviction's decision and step.
        in_service(api, name)
        assert nodesync_on_node(realchain, name) == CLEANED_UP
        reasons = eviction_events(realchain, ns, "app", uid)
        assert SANDBOX_FAILED in reasons, reasons
