"""Pods that fail on a new real node: a container that crash-loops and containers that are
OOM-killed (the whole container, exit code 137, and a child of it while the container exits 0).
kubelet restarts them with its back-off; the agent counts the exits and OOM kills from the
runtime and the API server; the shipped rules fire and nodesync evicts each pod, once, and leaves
the node in service."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.realcluster.helpers import (
    audit_mark,
    audited_effects,
    create_pod,
    eviction_events,
    get_pod,
    in_service,
    namespace,
    nodesync_on_node,
    pod,
    rollbacks_of,
    steps,
)
from tests.support.realcluster import SHIPPED_DRIFT_GRACE, RealChain
from tests.support.wait import until

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(420)]

CRASH_LOOPING = "NodesyncNewNodePodCrashLooping"
OOM_LOOPING = "NodesyncNewNodeContainerOOMLooping"
#: One process that asks for 200 MB under a 32 MiB limit: dd's buffer, filled from /dev/zero. It
#: is the only process of the container that allocates, so every OOM of the cgroup is its own and
#: it holds nearly all the memory: the OOM killer takes it and no other. (With `head | tail`,
#: head's next pipe buffer could find the cgroup still full while the killed tail was freeing
#: its pages, and that second OOM kill took the shell, the bigger of the two left: 18 runs in 300
#: in a bare 32 MiB memory cgroup ended 137 instead of 0; with dd, 0 in 500.) The pause before it
#: lets containerd's shim watch the cgroup for OOM kills first (runtime_pods.mixed_pod_specs says
#: why).
HOG = "dd if=/dev/zero of=/dev/null bs=200M"
LIMITS = {"limits": {"memory": "32Mi"}}


class Case:
    def __init__(self, name: str, script: str, alert: str, exit_code: int, reason: str) -> None:
        self.name = name
        self.script = script
        self.alert = alert
        self.exit_code = exit_code
        self.reason = reason
        self.last_state_at = 0.0
        self.alert_at = 0.0
        self.evicted_at = 0.0


CASES = (
    Case("crash", "exit 3", CRASH_LOOPING, 3, "Error"),
    # The shell becomes dd: the container's one process is killed.
    Case("oom", f"sleep 0.5; exec {HOG}", OOM_LOOPING, 137, "OOMKilled"),
    # The shell waits for dd and allocates nothing meanwhile: dd is killed, the shell exits 0.
    Case("oom-child", f"sleep 0.5; {HOG}; exit 0", OOM_LOOPING, 0, "OOMKilled"),
)


def _last_terminated(found: dict[str, Any] | None) -> dict[str, Any]:
    statuses = (found or {}).get("status", {}).get("containerStatuses") or [{}]
    terminated: dict[str, Any] = statuses[0].get("lastState", {}).get("terminated") or {}
    return terminated


def test_crash_looping_and_oom_killed_pods_are_evicted_and_the_node_stays(
    realchain: RealChain,
) -> None:
    api = realchain.api
    # The shipped drift grace: each evicted pod leaves a stopped sandbox until kubelet's garbage
    # collection, which with the chain's 10 s nodesync would clean up beside the evictions.
    node = realchain.join(agent_args=[SHIPPED_DRIFT_GRACE])
    name = node.name
    mark = audit_mark(api)
    try:
        with namespace(api) as ns:
            start = time.time()
            for case in CASES:
                body = pod(case.name, node, ["/bin/sh", "-c", case.script])
                body["spec"]["containers"][0]["resources"] = LIMITS
                create_pod(api, ns, body)

            # kubelet's view: each container terminated as expected and restarted with back-off.
            def kubelet_saw() -> bool:
                for case in CASES:
                    if case.last_state_at:
                        continue
                    last = _last_terminated(get_pod(api, ns, case.name))
                    if last.get("reason") == case.reason:
                        assert last.get("exitCode") == case.exit_code, (case.name, last)
                        case.last_state_at = time.time()
                return all(c.last_state_at for c in CASES)

            until(kubelet_saw, timeout=90, what="kubelet to report each termination")

            # The shipped rules fire, one per pod; nodesync evicts each pod.
            def alerts_and_evictions() -> bool:
                for case in CASES:
                    selector = f'alertname="{case.alert}",namespace="{ns}",pod="{case.name}"'
                    if not case.alert_at and realchain.prom.query(
                        f'ALERTS{{{selector},alertstate="firing"}}'
                    ):
                        case.alert_at = time.time()
                    if not case.evicted_at and get_pod(api, ns, case.name) is None:
                        case.evicted_at = time.time()
                return all(c.evicted_at for c in CASES)

            until(alerts_and_evictions, timeout=240, what="the alerts to fire and the pods evicted")
            for case in CASES:
                print(
                    f"{case.name} on {name}: lastState {case.reason} exit {case.exit_code} "
                    f"+{case.last_state_at - start:.0f} s, {case.alert} "
                    f"+{case.alert_at - start:.0f} s, pod gone +{case.evicted_at - start:.0f} s"
                )
            assert all(c.alert_at for c in CASES), [(c.name, c.alert_at) for c in CASES]

            # Each pod's NodeRollback: a Succeeded evict_pod; no other rollback of the node.
            def summary() -> list[tuple[str, str, str, str, str]]:
                return sorted(
                    (
                        r["spec"]["action"],
                        r["spec"].get("pod", {}).get("name", ""),
                        r["spec"]["trigger"]["alertname"],
                        r.get("status", {}).get("phase", ""),
                        r.get("status", {}).get("message", ""),
                    )
                    for r in rollbacks_of(api, name)
                )

            def all_succeeded() -> list[dict[str, Any]] | None:
                found = rollbacks_of(api, name)
                others = [r["spec"] for r in found if r["spec"]["action"] != "evict_pod"]
                assert others == [], others
                pods = {r["spec"]["pod"]["name"] for r in found}
                ended = all(r.get("status", {}).get("phase") == "Succeeded" for r in found)
                return found if ended and pods == {c.name for c in CASES} else None

            rollbacks = until(
                all_succeeded,
                timeout=60,
                what="the evictions' NodeRollbacks to succeed",
                detail=lambda: str(summary()),
            )
            print(f"NodeRollbacks: {summary()}")
            for rollback in rollbacks:
                assert rollback["spec"]["action"] == "evict_pod", rollback["spec"]
                assert {s: st["state"] for s, st in steps(rollback).items()} == {
                    "evict_pod": "done"
                }, rollback["status"]

            # Every effect exactly once, nothing refused, the node left alone.
            _, effects = audited_effects(api, mark, name)
            assert effects == {("create", "pods", "eviction"): len(CASES)}, effects
            in_service(api, name)
            # No Event of nodesync on the Node: each decision (NodesyncRollback) and eviction
            # (NodesyncEvictPod) is on its Pod, once, beside kubelet's BackOff.
            assert nodesync_on_node(realchain, name) == {}
            for case in CASES:
                reasons = eviction_events(realchain, ns, case.name)
                assert "BackOff" in reasons, (case.name, reasons)
    finally:
        # Not kept for the next test: the evicted pods' stopped sandboxes are drift the agent
        # reports, and nodesync cleans them up a little later.
        realchain.leave(node)
