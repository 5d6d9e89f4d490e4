"""A PodDisruptionBudget on a node that fails: two pods of a ReplicaSet on a new node, a budget of
``minAvailable: 1`` whose status only the real disruption controller writes, and a second, healthy
node. The node's containerd freezes: kubelet keeps the node and its pods Ready (so the budget
counts them healthy), the agent sees the runtime down and nodesync drains the node. The first
eviction is allowed; the second is refused (429) until the ReplicaSet's replacement of the first
pod is Ready on the healthy node; then it is allowed and the drain finishes. Nothing is forced.

The fault is chosen for this: a node whose kubelet stops (SIGSTOP) has its pods marked not Ready
by the controller-manager, the budget then counts none healthy, refuses every eviction, and no
replacement is ever made (an eviction makes it)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from exporter.model.rfc3339 import parse_time
from nodesync_sim.real.containerd import IMAGE_REF
from nodesync_sim.real.kube_apiserver import CONTROLLER, LocalKubeAPIServer
from nodesync_sim.real.node import RealNode
from tests.realcluster.helpers import (
    DONE_WITHOUT_CLEANUP,
    SLEEP,
    audited_effects,
    broken_node,
    create_pod,
    done_steps,
    follow_rollback,
    get_pod,
    namespace,
    node_rollback_events,
    pod,
    steps,
    value,
    wait_firing,
    wait_phase,
)
from tests.support.realcluster import RealChain
from tests.support.wait import until

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(420)]

ALERT = "NodesyncNewNodeCRIDown"
APP = "web"
REPLICAS = 2
PDBS = "/apis/policy/v1beta1/namespaces/{ns}/poddisruptionbudgets"
REPLICASETS = "/apis/apps/v1/namespaces/{ns}/replicasets"
DISRUPTION_CONTROLLER = "system:serviceaccount:kube-system:disruption-controller"


def test_a_budget_holds_the_drain_until_the_replacement_is_ready_elsewhere(
    realchain: RealChain,
) -> None:
    with broken_node(realchain) as (node, mark):
        # The replacements run on the kept healthy node.
        _budgeted_drain(realchain, node, realchain.healthy_node().name, mark)


def _ready_since(found: dict[str, Any] | None) -> float | None:
    for item in (found or {}).get("status", {}).get("conditions") or ():
        if item.get("type") == "Ready" and item.get("status") == "True":
            return parse_time(item.get("lastTransitionTime"))
    return None


def _replica_set(api: LocalKubeAPIServer, ns: str) -> dict[str, Any]:
    """A ReplicaSet that adopts the two pods already running on the failing node (so they are
    there), and whose replacements the scheduler may place on any node."""
    template = {
        "metadata": {"labels": {"app": APP}},
        "spec": {
            "hostNetwork": True,
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {"name": "main", "image": IMAGE_REF, "imagePullPolicy": "Never", "command": SLEEP}
            ],
        },
    }
    body = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": APP},
        "spec": {
            "replicas": REPLICAS,
            "selector": {"matchLabels": {"app": APP}},
            "template": template,
        },
    }
    created: dict[str, Any] = api.ok("POST", REPLICASETS.format(ns=ns), body)
    return created


Eviction = tuple[str, int, float]


def _evictions(api: LocalKubeAPIServer, events: list[dict[str, Any]]) -> list[Eviction]:
    """The controller's eviction requests: (pod, response code, when answered), in order."""
    controller = api.identities[CONTROLLER].user
    found = [
        (
            e.get("objectRef", {})["name"],
            int(e["responseStatus"]["code"]),
            parse_time(e["stageTimestamp"]) or 0.0,
        )
        for e in events
        if e["user"]["username"] == controller
        and e.get("objectRef", {}).get("resource") == "pods"
        and e.get("objectRef", {}).get("subresource") == "eviction"
    ]
    return sorted(found, key=lambda f: f[2])


def _budgeted_drain(realchain: RealChain, node: RealNode, healthy: str, mark: int) -> None:
    api = realchain.api
    with namespace(api) as ns:
        for i in range(REPLICAS):
            body = pod(f"{APP}-{i}", node)
            body["metadata"]["labels"] = {"app": APP}
            create_pod(api, ns, body)
        originals = {
            p["metadata"]["name"]: p["metadata"]["uid"]
            for p in (wait_phase(api, ns, f"{APP}-{i}", "Running") for i in range(REPLICAS))
        }
        replica_set = _replica_set(api, ns)
        try:
            _with_budget(realchain, node, healthy, ns, originals, replica_set, mark)
        finally:
            # The ReplicaSet goes first, or it would make pods again while the namespace empties.
            api.request(
                "DELETE",
                f"{REPLICASETS.format(ns=ns)}/{APP}",
                {"propagationPolicy": "Background"},
            )
            api.wait_gone(f"{REPLICASETS.format(ns=ns)}/{APP}", timeout=30)


def _with_budget(
    realchain: RealChain,
    node: RealNode,
    healthy: str,
    ns: str,
    originals: dict[str, str],
    replica_set: dict[str, Any],
    mark: int,
) -> None:
    api = realchain.api
    name = node.name
    rs_uid = replica_set["metadata"]["uid"]

    def adopted() -> bool:
        owners = [
            [o.get("uid") for o in (get_pod(api, ns, p) or {}).get("metadata", {}).get(
                "ownerReferences", ())]
            for p in originals
        ]  # fmt: skip
        return all(o == [rs_uid] for o in owners)

    until(adopted, timeout=30, what="the ReplicaSet to adopt the pods")
    api.ok(
        "POST",
        PDBS.format(ns=ns),
        {
            "apiVersion": "policy/v1beta1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": APP},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": APP}}},
        },
    )
    budget_path = f"{PDBS.format(ns=ns)}/{APP}"

    def budget() -> dict[str, Any]:
        status: dict[str, Any] = api.ok("GET", budget_path).get("status", {})
        return status

    until(
        lambda: (
            budget().get("currentHealthy") == REPLICAS and budget().get("disruptionsAllowed") == 1
        ),
        timeout=30,
        what="the disruption controller to compute the budget",
        detail=lambda: str(budget()),
    )
    pods_now = api.ok("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
    assert sorted(p["metadata"]["name"] for p in pods_now) == sorted(originals), "no extra pod"

    fault = time.time()
    node.containerd.freeze()
    until(
        lambda: value(realchain, f'nodesync_cri_up{{node="{name}"}}') == 0,
        timeout=60,
        what="cri_up 0",
    )
    alert_at = wait_firing(realchain, ALERT, f'node="{name}"')
    rollback, _, done_at = follow_rollback(api, name, 180)
    status = rollback["status"]
    assert status["phase"] == "Succeeded", status
    done = steps(rollback)
    assert done_steps(rollback) == DONE_WITHOUT_CLEANUP, done
    assert done["cleanup_runtime"]["reason"] == "runtime_unavailable", done
    api.wait_gone(f"/api/v1/nodes/{name}", timeout=60)

    # The replacements run on the healthy node, made by the ReplicaSet.
    def replacements() -> list[dict[str, Any]] | None:
        items = api.ok("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
        found = [
            p
            for p in items
            if p["metadata"]["uid"] not in originals.values() and _ready_since(p) is not None
        ]
        return found if len(found) == REPLICAS else None

    made = until(replacements, timeout=60, what="two replacements Ready")
    assert {p["spec"]["nodeName"] for p in made} == {healthy}, made
    first_ready = min(_ready_since(p) or 0.0 for p in made)

    # The audit log: evictions 201, 429 (the budget), 201 once the replacement was Ready.
    events, effects = audited_effects(api, mark, name)
    evictions = _evictions(api, events)
    allowed = [(p, at) for p, code, at in evictions if 200 <= code < 300]
    refusals = [(p, at) for p, code, at in evictions if code == 429]
    assert sorted(p for p, _ in allowed) == sorted(originals), evictions
    assert all(code in (201, 429) for _, code, _ in evictions), evictions
    (first, first_at), (second, second_at) = allowed
    assert refusals, f"no eviction was refused: {evictions}"
    assert {p for p, _ in refusals} == {second}, evictions
    assert all(first_at < at < second_at for _, at in refusals), evictions
    assert first_ready <= second_at, (first_ready, second_at)
    assert effects[("create", "pods", "eviction")] == REPLICAS, effects
    assert effects[("delete", "nodes", None)] == 1, effects
    assert effects[("delete", "pods", None)] == 0, effects  # nothing forced
    # The rollback waited on the budget (its status said so). The budget's status was written
    # by the disruption controller and by the Eviction API (which takes each allowed disruption
    # from it, as the API server's loopback user), by no one else.
    waits = [
        e
        for e in events
        if e.get("objectRef", {}).get("resource") == "noderollbacks"
        and "pdb_blocked" in str(e.get("requestObject"))
    ]
    assert waits, "the rollback never recorded the budget's refusal"
    status_writers = {
        e["user"]["username"]
        for e in api.audit_events()
        if e.get("stage") == "ResponseComplete"
        and e.get("objectRef", {}).get("resource") == "poddisruptionbudgets"
        and e.get("objectRef", {}).get("subresource") == "status"
        and e["verb"] in ("update", "patch")
    }
    assert status_writers == {DISRUPTION_CONTROLLER, "system:apiserver"}, status_writers
    reasons = [e["reason"] for e in node_rollback_events(realchain, name)]
    assert "NodesyncActionRequired" not in reasons, reasons
    # The timeline, from the rollback's own record and the audit log.
    triggers = ", ".join(
        f"{t['alertname']} firing +{(parse_time(t['startsAt']) or 0.0) - fault:.1f} s"
        for t in status["triggers"]
    )
    cordon_at = parse_time(done["cordon"]["startedAt"]) or 0.0
    finished_at = parse_time(status["finishedAt"]) or 0.0
    print(
        f"budgeted drain {name}: {triggers}; {ALERT} seen firing +{alert_at - fault:.1f} s;"
        f" cordon +{cordon_at - fault:.1f} s; eviction"
        f" of {first} allowed +{first_at - fault:.1f} s; {len(refusals)} refusals (429) of"
        f" {second} from +{refusals[0][1] - fault:.1f} s; replacement Ready on {healthy}"
        f" +{first_ready - fault:.0f} s (1 s resolution); eviction of {second} allowed"
        f" +{second_at - fault:.1f} s; rollback Succeeded +{finished_at - fault:.1f} s"
        f" (seen +{done_at - fault:.1f} s)"
    )

    # containerd resumed: the kubelet stops the evicted pods and confirms their deletion.
    node.containerd.thaw()
    for original in originals:
        api.wait_gone(f"/api/v1/namespaces/{ns}/pods/{original}", timeout=90)
