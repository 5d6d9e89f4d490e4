"""KubeWriter against a real kube-apiserver 1.20, as the controller's service account with the
shipped RBAC (deploy/base/controller-rbac.yaml and deploy/components/delete-nodes): every write
and its idempotency, the real server's 409 on a stale resourceVersion, eviction through
policy/v1beta1 (what 1.20 serves) with and without a PodDisruptionBudget, deletion with a uid
precondition, and Events that ``kubectl describe`` shows. Which writes happened is read from the
server's audit log."""

from __future__ import annotations

import asyncio
import secrets
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from exporter.kube.api import JSONObject, KubeAPI
from exporter.kube.config import kubeconfig_configuration
from exporter.kube.resources import Resource
from exporter.kube.writer import KubeWriter, event_name
from exporter.model.kube import TAINT_NODESYNC, Taint
from nodesync_sim.real.kube_apiserver import ADMIN, CONTROLLER, LocalKubeAPIServer
from tests.support.kubeapi import KubeCleanup
from tests.support.realkube import (
    CONTROLLER_RBAC,
    DELETE_NODES_RBAC,
    MERGE_PATCH,
    code,
    connect,
    rbac_applied,
    requests,
    user_of,
)

pytestmark = [pytest.mark.kubeapi, pytest.mark.timeout(90)]

ROLLBACK = Taint(TAINT_NODESYNC, "NoSchedule")
#: The taint a real server puts on every Node it registers (no node controller removes it here).
NOT_READY = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
PDBS = "/apis/policy/v1beta1/namespaces/{ns}/poddisruptionbudgets"


@pytest.fixture
def controller_rbac(kubeapi: LocalKubeAPIServer) -> Iterator[None]:
    """The controller's shipped RBAC, with the delete-nodes component, for the test."""
    with rbac_applied(kubeapi, CONTROLLER, [CONTROLLER_RBAC, DELETE_NODES_RBAC], ["/api/v1/nodes"]):
        yield


@pytest.fixture
async def api(kubeapi: LocalKubeAPIServer, controller_rbac: None) -> AsyncIterator[KubeAPI]:
    async with await connect(kubeapi, CONTROLLER) as client:
        yield client


@pytest.fixture
def node(kubeapi_cleanup: KubeCleanup) -> str:
    """A fresh Node of the test's own."""
    name = f"node-{secrets.token_hex(4)}"
    kubeapi_cleanup.create("/api/v1/nodes", {"metadata": {"name": name}})
    return name


class AfterRead(KubeAPI):
    """The real client, plus a hook that runs right after each GET returned: lets a test change
    the object between the writer's read and its write, deterministically."""

    def __init__(self, configuration: Any, hook: Callable[[int], None]) -> None:
        super().__init__(configuration)
        self._hook = hook
        self.reads = 0

    async def get(
        self, resource: Resource, name: str, namespace: str | None = None, **kw: Any
    ) -> JSONObject:
        obj = await super().get(resource, name, namespace, **kw)
        self.reads += 1
        self._hook(self.reads)
        return obj


class Recording(KubeAPI):
    """The real client, keeping the body of every request it sends."""

    def __init__(self, configuration: Any) -> None:
        super().__init__(configuration)
        self.sent: list[tuple[str, str, Any]] = []

    async def request(
        self, method: str, resource: Resource, verb: str, path: str, **kw: Any
    ) -> Any:
        self.sent.append((method, path, kw.get("body")))
        return await super().request(method, resource, verb, path, **kw)


async def _after_read(server: LocalKubeAPIServer, hook: Callable[[int], None]) -> AfterRead:
    return AfterRead(await kubeconfig_configuration(str(server.kubeconfig(CONTROLLER))), hook)


def _writes(server: LocalKubeAPIServer, resource: str, name: str) -> list[tuple[str, int]]:
    """The controller's writes to one object, as the audit log has them: (verb, status)."""
    found = requests(server, user=user_of(server, CONTROLLER), resource=resource, name=name)
    return [(e["verb"], code(e)) for e in found if e["verb"] not in ("get", "list", "watch")]


def _reads(server: LocalKubeAPIServer, resource: str, name: str) -> int:
    found = requests(server, user=user_of(server, CONTROLLER), resource=resource, name=name)
    return sum(1 for e in found if e["verb"] == "get")


def _spec(server: LocalKubeAPIServer, node: str) -> dict[str, Any]:
    spec: dict[str, Any] = server.ok("GET", f"/api/v1/nodes/{node}")["spec"]
    return spec


# ---------------------------------------------------------------- node spec


async def test_cordon_and_uncordon_write_once_and_then_change_nothing(
    kubeapi: LocalKubeAPIServer, api: KubeAPI, node: str
) -> None:
    writer = KubeWriter(api)
    assert (await writer.cordon(node)).changed
    assert _spec(kubeapi, node)["unschedulable"] is True
    again = await writer.cordon(node)
    assert (again.changed, "already" in again.detail) == (False, True)
    assert (await writer.uncordon(node)).changed
    assert "unschedulable" not in _spec(kubeapi, node)
    assert not (await writer.uncordon(node)).changed

    # Four calls, four reads, and only the two that changed something wrote.
    kubeapi.wait_for(lambda: _reads(kubeapi, "nodes", node) == 4, "the four reads in the audit")
    assert _writes(kubeapi, "nodes", node) == [("patch", 200), ("patch", 200)]


async def test_taint_writes_that_lose_a_race_get_409_read_again_and_keep_the_other_change(
    kubeapi: LocalKubeAPIServer, node: str, controller_rbac: None
) -> None:
    other = {"key": "example.com/maintenance", "effect": "NoExecute"}

    def someone_else_taints(reads: int) -> None:
        if reads == 1:  # between the writer's first read and its write
            taints = [*_spec(kubeapi, node)["taints"], other]
            patch = {"spec": {"taints": taints}}
            kubeapi.ok("PATCH", f"/api/v1/nodes/{node}", patch, content_type=MERGE_PATCH)

    async with await _after_read(kubeapi, someone_else_taints) as racing:
        result = await KubeWriter(racing).add_taint(node, ROLLBACK)
        assert not (await KubeWriter(racing).add_taint(node, ROLLBACK)).changed
    assert result.changed, result
    assert _spec(kubeapi, node)["taints"] == [
        NOT_READY,
        other,
        {"key": TAINT_NODESYNC, "effect": "NoSchedule"},
    ]
    assert _writes(kubeapi, "nodes", node) == [("patch", 409), ("patch", 200)]

    def someone_else_labels(reads: int) -> None:
        if reads == 1:
            patch = {"metadata": {"labels": {"example.com/touched": "yes"}}}
            kubeapi.ok("PATCH", f"/api/v1/nodes/{node}", patch, content_type=MERGE_PATCH)

    async with await _after_read(kubeapi, someone_else_labels) as racing:
        result = await KubeWriter(racing).remove_taint(node, TAINT_NODESYNC)
        assert result.changed, result
        assert not (await KubeWriter(racing).remove_taint(node, TAINT_NODESYNC)).changed
    live = kubeapi.ok("GET", f"/api/v1/nodes/{node}")
    assert live["spec"]["taints"] == [NOT_READY, other]
    assert live["metadata"]["labels"]["example.com/touched"] == "yes"
    assert _writes(kubeapi, "nodes", node) == [("patch", 409), ("patch", 200)] * 2


# ---------------------------------------------------------------- eviction


def _running_pod(server: LocalKubeAPIServer, namespace: str, name: str, node: str) -> str:
    """A pod bound to ``node``, Running and Ready (written to /status: no kubelet runs); its uid."""
    body = {
        "metadata": {"name": name, "labels": {"app": "db"}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
    }
    pod = server.ok("POST", f"/api/v1/namespaces/{namespace}/pods", body)
    status = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    server.ok(
        "PATCH",
        f"/api/v1/namespaces/{namespace}/pods/{name}/status",
        status,
        content_type=MERGE_PATCH,
    )
    return str(pod["metadata"]["uid"])


def _evictions(server: LocalKubeAPIServer, namespace: str, name: str) -> list[dict[str, Any]]:
    return requests(
        server,
        user=user_of(server, CONTROLLER),
        verb="create",
        resource="pods",
        subresource="eviction",
        namespace=namespace,
        name=name,
    )


def _terminating(server: LocalKubeAPIServer, namespace: str, name: str) -> bool:
    pod = server.ok("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    return bool(pod["metadata"].get("deletionTimestamp"))


async def test_eviction_uses_policy_v1beta1_from_discovery_and_is_idempotent(
    kubeapi: LocalKubeAPIServer, controller_rbac: None, kubeapi_namespace: str, node: str
) -> None:
    namespace = kubeapi_namespace
    uid = _running_pod(kubeapi, namespace, "web", node)
    path = f"/api/v1/namespaces/{namespace}/pods/web/eviction"
    # What the writer must not send to 1.20: a policy/v1 Eviction is refused.
    v1 = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web"}}
    refused = kubeapi.request("POST", path, v1)
    assert (refused.status, refused.body["reason"]) == (400, "BadRequest")

    configuration = await kubeconfig_configuration(str(kubeapi.kubeconfig(CONTROLLER)))
    async with Recording(configuration) as api:
        writer = KubeWriter(api)
        result = await writer.evict(namespace, "web", uid)
        assert (result.outcome, result.attempts) == ("evicted", 1), result
        # No kubelet confirms the deletion: the pod stays Terminating, which counts as evicted.
        assert _terminating(kubeapi, namespace, "web")
        again = await writer.evict(namespace, "web", uid)
        assert (again.outcome, again.attempts) == ("evicted", 0), again
        assert await writer.eviction_api_version() == "policy/v1beta1"

    # The version came from the core group's discovery, read once; the body carried it and the
    # pod's uid. (1.20's audit log leaves an eviction's request body out: it is taken here, at
    # the client, and the server's 201 shows it accepted it.)
    pod = f"/api/v1/namespaces/{namespace}/pods/web"
    assert [(m, p) for m, p, _ in api.sent] == [
        ("GET", pod),
        ("GET", "/api/v1"),
        ("POST", path),
        ("GET", pod),  # the second eviction: already terminating, nothing sent
    ]
    body = api.sent[2][2]
    assert (body["apiVersion"], body["kind"]) == ("policy/v1beta1", "Eviction")
    assert body["deleteOptions"]["preconditions"] == {"uid": uid}
    (eviction,) = _evictions(kubeapi, namespace, "web")
    assert code(eviction) == 201
    controller = requests(kubeapi, user=user_of(kubeapi, CONTROLLER), product=True)
    assert any(e["requestURI"] == "/api/v1" and code(e) == 200 for e in controller)


async def test_eviction_blocked_by_a_budget_until_the_budget_allows_one(
    kubeapi: LocalKubeAPIServer, api: KubeAPI, kubeapi_namespace: str, node: str
) -> None:
    namespace = kubeapi_namespace
    uid = _running_pod(kubeapi, namespace, "db-0", node)
    pdbs = PDBS.format(ns=namespace)
    spec = {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}
    pdb = kubeapi.ok("POST", pdbs, {"metadata": {"name": "db"}, "spec": spec})

    def budget(allowed: int) -> None:
        # What the disruption controller would write (none runs here).
        status = {
            "status": {
                "observedGeneration": pdb["metadata"]["generation"],
                "disruptionsAllowed": allowed,
                "currentHealthy": 1 + allowed,
                "desiredHealthy": 1,
                "expectedPods": 1 + allowed,
            }
        }
        kubeapi.ok("PATCH", f"{pdbs}/db/status", status, content_type=MERGE_PATCH)

    budget(0)
    writer = KubeWriter(api, eviction_backoff_initial=0.2, eviction_backoff_max=0.5)
    blocked = await writer.evict(namespace, "db-0", uid, timeout=2.0)
    assert blocked.outcome == "blocked", blocked
    assert "PodDisruptionBudget" in blocked.detail
    assert blocked.attempts >= 3
    refused = _evictions(kubeapi, namespace, "db-0")
    assert [code(e) for e in refused] == [429] * blocked.attempts
    assert not _terminating(kubeapi, namespace, "db-0")

    budget(1)
    evicted = await writer.evict(namespace, "db-0", uid, timeout=2.0)
    assert (evicted.outcome, evicted.attempts) == ("evicted", 1), evicted
    assert _terminating(kubeapi, namespace, "db-0")
    assert [code(e) for e in _evictions(kubeapi, namespace, "db-0")][-1] == 201
    # The server took the disruption from the budget itself.
    status = kubeapi.ok("GET", f"{pdbs}/db")["status"]
    assert status["disruptionsAllowed"] == 0
    assert list(status["disruptedPods"]) == ["db-0"]


# ---------------------------------------------------------------- deletion


async def test_delete_node_only_with_its_uid(
    kubeapi: LocalKubeAPIServer, api: KubeAPI, kubeapi_cleanup: KubeCleanup, node: str
) -> None:
    path = f"/api/v1/nodes/{node}"
    uid = kubeapi.ok("GET", path)["metadata"]["uid"]
    writer = KubeWriter(api)

    wrong = await writer.delete_node(node, uid="not-" + uid)
    assert (wrong.changed, "another object" in wrong.detail) == (False, True), wrong
    assert _writes(kubeapi, "nodes", node) == []

    # Replaced between the writer's read and its delete: the real server's precondition
    # refuses it (409), and the new Node stays.
    replaced: list[str] = []

    def joins_again(reads: int) -> None:
        if reads == 1:
            kubeapi.ok("DELETE", path)
            created = kubeapi.ok("POST", "/api/v1/nodes", {"metadata": {"name": node}})
            replaced.append(created["metadata"]["uid"])

    async with await _after_read(kubeapi, joins_again) as racing:
        raced = await KubeWriter(racing).delete_node(node, uid=uid)
    assert (raced.changed, "replaced" in raced.detail) == (False, True), raced
    assert kubeapi.ok("GET", path)["metadata"]["uid"] == replaced[0]
    assert _writes(kubeapi, "nodes", node) == [("delete", 409)]
    (refused,) = [e for e in requests(kubeapi, verb="delete", name=node) if code(e) == 409]
    assert refused["requestObject"]["preconditions"] == {"uid": uid}

    done = await writer.delete_node(node, uid=replaced[0])
    assert done.changed, done
    assert kubeapi.request("GET", path).status == 404
    assert not (await writer.delete_node(node, uid=replaced[0])).changed
    assert _writes(kubeapi, "nodes", node) == [("delete", 409), ("delete", 200)]


# ---------------------------------------------------------------- events


def _kubectl(server: LocalKubeAPIServer, *args: str) -> str:
    result = subprocess.run(
        ["kubectl", "--kubeconfig", str(server.kubeconfig(ADMIN)), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


async def test_events_with_the_uid_show_in_kubectl_describe_and_are_recorded_once(
    kubeapi: LocalKubeAPIServer,
    api: KubeAPI,
    kubeapi_cleanup: KubeCleanup,
    kubeapi_namespace: str,
    node: str,
) -> None:
    namespace = kubeapi_namespace
    node_uid = kubeapi.ok("GET", f"/api/v1/nodes/{node}")["metadata"]["uid"]
    pod_uid = _running_pod(kubeapi, namespace, "web", node)
    writer = KubeWriter(api)
    key = f"plan-{node}/cordon"
    kubeapi_cleanup.delete_later(f"/api/v1/namespaces/default/events/{event_name(node, key)}")

    on_node = await writer.record_event(
        kind="Node",
        namespace="",
        name=node,
        uid=node_uid,
        reason="NodesyncCordon",
        message=f"cordoned node {node} (rollback test)",
        type="Warning",
        key=key,
    )
    assert on_node.changed, on_node
    on_pod = await writer.record_event(
        kind="Pod",
        namespace=namespace,
        name="web",
        uid=pod_uid,
        reason="NodesyncEvict",
        message="evicted pod web (rollback test)",
        key=f"plan-{node}/evict/web",
    )
    assert on_pod.changed, on_pod
    repeated = await writer.record_event(
        kind="Node",
        namespace="",
        name=node,
        uid=node_uid,
        reason="NodesyncCordon",
        message="cordoned again",
        type="Warning",
        key=key,
    )
    assert (repeated.changed, "already recorded" in repeated.detail) == (False, True)

    # Found by the uid, as describe looks for them; the Node's in default, the Pod's in its own.
    by_uid = kubeapi.ok("GET", f"/api/v1/events?fieldSelector=involvedObject.uid={node_uid}")
    assert [(e["metadata"]["namespace"], e["reason"], e["message"]) for e in by_uid["items"]] == [
        ("default", "NodesyncCordon", f"cordoned node {node} (rollback test)")
    ]
    by_uid = kubeapi.ok("GET", f"/api/v1/events?fieldSelector=involvedObject.uid={pod_uid}")
    assert [(e["metadata"]["namespace"], e["reason"]) for e in by_uid["items"]] == [
        (namespace, "NodesyncEvict")
    ]
    # kubectl here is v1.32, newer than the server; its describe still works against 1.20.
    assert "Client Version: v1." in await asyncio.to_thread(
        _kubectl, kubeapi, "version", "--client"
    )
    described = await asyncio.to_thread(_kubectl, kubeapi, "describe", "node", node)
    events = described.split("\nEvents:", 1)[1]
    assert "Warning  NodesyncCordon" in events, described
    assert f"cordoned node {node} (rollback test)" in events
    assert "cordoned again" not in events
    described = await asyncio.to_thread(
        _kubectl, kubeapi, "describe", "pod", "web", "--namespace", namespace
    )
    assert "Normal  NodesyncEvict" in described.split("\nEvents:", 1)[1], described

    creates = requests(kubeapi, user=user_of(kubeapi, CONTROLLER), verb="create", resource="events")
    mine = [
        e
        for e in creates
        if e["objectRef"]["name"]
        in (event_name(node, key), event_name("web", f"plan-{node}/evict/web"))
    ]
    assert sorted(code(e) for e in mine) == [201, 201, 409]
