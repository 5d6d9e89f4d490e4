"""pytest plugin: ``nodesync controller`` subprocesses on the real kube-apiserver, for the
acceptance tests of rollbacks as NodeRollbacks (tests/controller/test_real_*.py).

Fixtures:

- ``controller_rbac`` (module): the shared server serving NodeRollbacks, with the controller's
  shipped RBAC applied (deploy/base/controller-rbac.yaml and the delete-nodes component), so the
  controllers run as the ``nodesync-controller`` service account with exactly the permissions
  they ship with. Removed after the module, and checked to be refused again.
- ``warm_pool`` (module): interpreters started ahead with the controller's modules imported
  (tests/support/warm_start.py), each of which becomes one ``python -m exporter controller``.
- ``scene``: one test's world on that server (:class:`Scene`): uniquely named Nodes with their
  Leases and pods, controllers (each with its own journal, port and optional
  :class:`~tests.support.kubeproxy.KubeProxy`), and the parts nobody runs on this server, played
  by the test: Alertmanager (:meth:`Scene.deliver`), the node's agent (cleanup answers) and the
  kubelet (a pod evicted gets a deletionTimestamp; the kubelet's part is to delete it with grace
  0). After the test every process is stopped by its PID and every object deleted.

The leader Lease lives in the test's own namespace (with the ``ha`` overlay's leader-election
Role copied there), so each test has its own election.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import signal
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from exporter.model.rfc3339 import format_micro_time, format_time
from nodesync_sim.real.kube_apiserver import CONTROLLER, LocalKubeAPIServer
from nodesync_sim.real.process import ChildProcess, free_port
from tests.support.kubeapi import REPO_ROOT, create_namespace, delete_namespace
from tests.support.kubeproxy import KubeProxy, Predicate, ProxiedRequest
from tests.support.wait import until

RBAC_FILES = (
    REPO_ROOT / "deploy" / "base" / "controller-rbac.yaml",
    REPO_ROOT / "deploy" / "components" / "delete-nodes" / "rbac.yaml",
)
LEADER_ELECTION_RBAC = REPO_ROOT / "deploy" / "overlays" / "ha" / "leader-election-rbac.yaml"
LEADER_LEASE = "nodesync-controller"  # the only name the shipped Role lets the controller write
NODE_LEASES = "kube-node-lease"
NODEROLLBACKS = "/apis/nodesync.io/v1alpha1/noderollbacks"
CASE_LABEL = "nodesync.test/case"
WAVE_LABEL = "nodesync.test/wave"
CLEANUP_REQUEST = "nodesync.io/cleanup-request"
CLEANUP_STATUS = "nodesync.io/cleanup-status"
ROLLBACK_TAINT = "nodesync.io/rollback"

#: How long a controller may take to start and list the cluster (both cores may be busy).
START_TIMEOUT = 60.0
#: The default deadline of :meth:`Scene.until`: generous, as nothing here is timing-based.
DEADLINE = 60.0
POLL = 0.05
#: What tests/support/warm_start.py prints once its imports are done (not imported from there:
#: importing it is what makes a process warm).
WARM = "warm: waiting for SIGUSR1"
WEBHOOK_TOKEN = "acceptance-" + secrets.token_hex(8)

#: Leader election short enough for a test, long enough for two busy cores.
LEADER_ELECTION = (
    "--leader-election.enabled=true",
    "--leader-election.lease-duration=3s",
    "--leader-election.renew-deadline=2s",
    "--leader-election.retry-period=0.5s",
)

#: Flags of every controller here: node rollbacks end with the deletion, the budget lets each
#: test's nodes be rolled back, and API writes are not throttled to a crawl.
ROLLBACK_ARGS = (
    "--rollback.delete-nodes=true",
    "--guard.max-rollback-fraction=1",
    "--apiserver.qps=100",
    "--apiserver.burst=100",
)
#: The Events of a node rollback that ran every step, each once.
NODE_ROLLBACK_EVENTS = (
    "NodesyncRollback",
    "NodesyncCordon",
    "NodesyncTaint",
    "NodesyncDrain",
    "NodesyncCleanupRuntime",
    "NodesyncVerify",
    "NodesyncDeleteNode",
)


# ---------------------------------------------------------------- RBAC


def _rbac_path(doc: dict[str, Any]) -> tuple[str, str]:
    """(collection, object path) of an RBAC document."""
    base = "/apis/rbac.authorization.k8s.io/v1"
    plural = {
        "ClusterRole": "clusterroles",
        "ClusterRoleBinding": "clusterrolebindings",
        "Role": "roles",
        "RoleBinding": "rolebindings",
    }[doc["kind"]]
    namespace = doc["metadata"].get("namespace")
    collection = f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"
    return collection, f"{collection}/{doc['metadata']['name']}"


def _rbac_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] != "ServiceAccount"]


@pytest.fixture(scope="module")
def controller_rbac(noderollback_crd: LocalKubeAPIServer) -> Iterator[LocalKubeAPIServer]:
    """The shipped controller RBAC on the shared server, for this module's tests."""
    server = noderollback_crd
    created: list[str] = []
    try:
        for doc in (d for f in RBAC_FILES for d in _rbac_docs(f)):
            collection, path = _rbac_path(doc)
            answer = server.request("POST", collection, doc)
            if answer.status == 409:  # left by an interrupted run: take it as ours
                server.ok("PUT", path, {**doc, "metadata": server.ok("GET", path)["metadata"]})
            elif answer.status != 201:
                raise AssertionError(f"POST {collection}: {answer.status} {answer.body}")
            created.append(path)
        server.wait_for(
            lambda: (
                server.request("GET", NODEROLLBACKS, identity=CONTROLLER).status == 200
                and server.request("GET", "/api/v1/nodes", identity=CONTROLLER).status == 200
            ),
            "the controller's RBAC to take effect",
        )
        yield server
    finally:
        for path in reversed(created):
            server.request("DELETE", path)
        # Leave the shared server as found: the controller's account is refused again.
        server.wait_for(
            lambda: server.request("GET", "/api/v1/nodes", identity=CONTROLLER).status == 403,
            "the controller to be refused again",
        )


# ---------------------------------------------------------------- a controller process


@dataclass
class Warm:
    """An interpreter with the controller's modules imported (tests/support/warm_start.py),
    waiting for its arguments."""

    process: ChildProcess
    argv_file: Path


class WarmPool:
    """A few :class:`Warm` processes kept ready: a controller taken from here starts in well
    under a second, and the next one's imports run while the test works."""

    def __init__(self, directory: Path, size: int = 2) -> None:
        self.directory = directory
        self.size = size
        self._launched = 0
        self._ready: list[Warm] = []
        self._taken: list[Warm] = []
        self._fill()

    def _fill(self) -> None:
        while len(self._ready) < self.size:
            self._launched += 1
            name = f"controller-{self._launched}"
            argv_file = self.directory / f"{name}.argv.json"
            env = {
                **os.environ,
                "NODESYNC_WEBHOOK_TOKEN": WEBHOOK_TOKEN,
                "PYTHONPATH": str(REPO_ROOT),
            }
            process = ChildProcess(
                [sys.executable, "-m", "tests.support.warm_start", str(argv_file)],
                log_path=self.directory / f"{name}.log",
                cwd=REPO_ROOT,
                env=env,
                name=name,
            )
            process.start()
            self._ready.append(Warm(process, argv_file))

    def take(self) -> Warm:
        warm = self._ready.pop(0)
        self._taken.append(warm)
        self._fill()
        return warm

    def close(self) -> None:
        """Kill every process launched (by PID), idle or not."""
        for warm in self._taken + self._ready:
            warm.process.kill()
        self._ready, self._taken = [], []


@pytest.fixture(scope="module")
def warm_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WarmPool]:
    pool = WarmPool(tmp_path_factory.mktemp("controllers"))
    try:
        yield pool
    finally:
        pool.close()


class Controller:
    """One ``nodesync controller`` process (``python -m exporter controller ...``, from a
    :class:`WarmPool`): its own journal and port, talking to the API server through ``proxy``
    (its own, so the test can stop it at an exact request) or directly."""

    def __init__(
        self,
        scene: Scene,
        name: str,
        *,
        proxy: KubeProxy | None,
        leader_elect: bool,
        identity: str,
        args: Sequence[str],
        journal: Path | None = None,
    ) -> None:
        self.scene = scene
        self.name = name
        self.proxy = proxy
        self.identity = identity
        self.port = free_port()
        self.journal = journal or scene.workdir / f"{name}.journal.db"
        kubeconfig = scene.workdir / f"{name}.kubeconfig"
        if proxy is not None:
            proxy.kubeconfig(CONTROLLER, kubeconfig)
        else:
            kubeconfig.write_text(scene.server.kubeconfig(CONTROLLER).read_text())
        self.argv = [
            "controller",
            f"--kubeconfig={kubeconfig}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            f"--journal.path={self.journal}",
            f"--wave.label={WAVE_LABEL}",
            "--log.level=info",
        ]
        if leader_elect:
            self.argv += [
                *LEADER_ELECTION,
                f"--leader-election.namespace={scene.namespace}",
                f"--leader-election.name={LEADER_LEASE}",
                f"--leader-election.identity={identity}",
            ]
        self.argv += list(args)
        warm = scene.pool.take()
        self.process = warm.process
        self._argv_file = warm.argv_file
        self.log = warm.process.log_path
        self.started = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.started and self.process.running

    def start(self) -> Controller:
        """Run the controller and wait until it is ready."""
        self.process.wait_until(
            lambda: WARM in self.log.read_text(errors="replace"),
            timeout=START_TIMEOUT,
            what="warm (its imports done)",
        )
        self._argv_file.write_text(json.dumps(self.argv))
        self.started = True
        self.process.signal(signal.SIGUSR1)
        self.process.wait_until(
            lambda: self._get("/readyz") == 200,
            timeout=START_TIMEOUT,
            what="ready (its cluster view listed)",
        )
        return self

    def _request(
        self, method: str, path: str, body: bytes | None = None
    ) -> tuple[int, dict[str, Any]]:
        headers = {"Authorization": f"Bearer {WEBHOOK_TOKEN}", "Content-Type": "application/json"}
        request = urllib.request.Request(self.url + path, data=body, headers=headers, method=method)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(request, timeout=10) as answer:
                return answer.status, json.loads(answer.read() or b"{}")
        except urllib.error.HTTPError as error:
            with error:
                raw = error.read()
            try:
                return error.code, json.loads(raw or b"{}")
            except ValueError:
                return error.code, {"body": raw.decode(errors="replace")}
        except OSError:
            return 0, {}

    def _get(self, path: str) -> int:
        return self._request("GET", path)[0]

    def post_alerts(self, payload: dict[str, Any]) -> int:
        """POST the payload to the webhook as Alertmanager does; the HTTP status (0: no answer)."""
        return self._request("POST", "/alerts", json.dumps(payload).encode())[0]

    def metric(self, name: str, **labels: str) -> float | None:
        """One sample of a fresh scrape of /metrics (None: no such series)."""
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(self.url + "/metrics", timeout=10) as answer:
            text = answer.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and sample.labels == labels:
                    return float(sample.value)
        return None

    def kill(self) -> None:
        """SIGKILL (no shutdown of any kind), and wait until it is gone."""
        self.process.kill()
        assert self.process.returncode == -signal.SIGKILL, self.process.returncode
        if self.proxy is not None:
            self.proxy.release()

    def stop(self) -> None:
        """At the end of a test: SIGKILL (nothing of its shutdown is under test here)."""
        self.process.kill()
        if self.proxy is not None:
            self.proxy.release()

    def log_tail(self, lines: int = 60) -> str:
        return self.process.log_tail(lines)


# ---------------------------------------------------------------- alerts

#: When the test alerts began firing (one value for the session: every re-send is one episode).
STARTED = float(int(time.time()) - 60)


def alert(node: str, action: str = "rollback_node", **labels: str) -> dict[str, Any]:
    """One firing alert as Alertmanager sends it; its fingerprint derives from its labels."""
    all_labels = {
        "alertname": "NodesyncNewNodeNotReady",
        "node": node,
        "nodesync_action": action,
        **labels,
    }
    fingerprint = hashlib.sha256(json.dumps(all_labels, sort_keys=True).encode()).hexdigest()[:16]
    return {
        "status": "firing",
        "labels": all_labels,
        "annotations": {},
        "startsAt": format_time(STARTED),
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "",
        "fingerprint": fingerprint,
    }


def payload(*alerts: dict[str, Any]) -> dict[str, Any]:
    return {
        "version": "4",
        "groupKey": '{}:{alertname="NodesyncNewNodeNotReady"}',
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "nodesync",
        "groupLabels": {"alertname": "NodesyncNewNodeNotReady"},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager.invalid",
        "alerts": list(alerts),
    }


# ---------------------------------------------------------------- where to stop a controller


def _spec(request: ProxiedRequest) -> dict[str, Any]:
    body = request.body if isinstance(request.body, dict) else {}
    spec = body.get("spec")
    return spec if isinstance(spec, dict) else {}


def cordon_of(node: str) -> Predicate:
    """The cordon patch of ``node``."""
    return lambda r: (
        r.method == "PATCH"
        and r.path == f"/api/v1/nodes/{node}"
        and _spec(r).get("unschedulable") is True
    )


def uncordon_of(node: str) -> Predicate:
    """The patch that lifts the cordon of ``node``."""
    return lambda r: (
        r.method == "PATCH"
        and r.path == f"/api/v1/nodes/{node}"
        and "unschedulable" in _spec(r)
        and _spec(r)["unschedulable"] is not True
    )


def taint_of(node: str) -> Predicate:
    """The patch that adds nodesync's taint to ``node``."""
    return lambda r: (
        r.method == "PATCH"
        and r.path == f"/api/v1/nodes/{node}"
        and ROLLBACK_TAINT in {t.get("key") for t in _spec(r).get("taints") or ()}
    )


def eviction_in(namespace: str) -> Predicate:
    """The first eviction of a pod in ``namespace``."""
    prefix = f"/api/v1/namespaces/{namespace}/pods/"
    return lambda r: (
        r.method == "POST" and r.path.startswith(prefix) and r.path.endswith("/eviction")
    )


def cleanup_request_on(node: str) -> Predicate:
    """The patch that asks ``node``'s agent for a cleanup."""

    def match(r: ProxiedRequest) -> bool:
        body = r.body if isinstance(r.body, dict) else {}
        annotations = (body.get("metadata") or {}).get("annotations") or {}
        return (
            r.method == "PATCH"
            and r.path == f"/api/v1/nodes/{node}"
            and (CLEANUP_REQUEST in annotations)
        )

    return match


def delete_of(node: str) -> Predicate:
    return lambda r: r.method == "DELETE" and r.path == f"/api/v1/nodes/{node}"


def rollback_created() -> Predicate:
    """The first NodeRollback create."""
    return lambda r: r.method == "POST" and r.path == NODEROLLBACKS


def step_recorded(step: str, state: str) -> Predicate:
    """A NodeRollback status write that records ``step`` in ``state``."""

    def match(r: ProxiedRequest) -> bool:
        body = r.body if isinstance(r.body, dict) else {}
        steps = (body.get("status") or {}).get("steps") or ()
        return (
            r.method == "PUT"
            and r.path.startswith(NODEROLLBACKS + "/")
            and r.path.endswith("/status")
            and any(s.get("name") == step and s.get("state") == state for s in steps)
        )

    return match


def steps(rollback: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A NodeRollback's steps by name."""
    return {s["name"]: s for s in rollback.get("status", {}).get("steps") or ()}


# ---------------------------------------------------------------- the audit log


@dataclass(frozen=True)
class Write:
    """A write the API server's audit log recorded."""

    user: str
    verb: str
    resource: str
    subresource: str
    namespace: str
    name: str
    code: int
    body: Any

    @classmethod
    def of(cls, event: dict[str, Any]) -> Write:
        ref = event.get("objectRef") or {}
        return cls(
            user=(event.get("user") or {}).get("username", ""),
            verb=event.get("verb", ""),
            resource=ref.get("resource", ""),
            subresource=ref.get("subresource", ""),
            namespace=ref.get("namespace", ""),
            name=ref.get("name", ""),
            code=int((event.get("responseStatus") or {}).get("code") or 0),
            body=event.get("requestObject"),
        )

    @property
    def effect(self) -> str:
        """What a controller's write on a Node or Pod did: cordon, uncordon, taint, untaint,
        cleanup_request, eviction, delete_node ("" for anything else)."""
        body: dict[str, Any] = self.body if isinstance(self.body, dict) else {}
        spec: dict[str, Any] = body["spec"] if isinstance(body.get("spec"), dict) else {}
        if self.resource == "nodes" and self.verb == "delete":
            return "delete_node"
        if self.resource == "pods" and self.subresource == "eviction" and self.verb == "create":
            return "eviction"
        if self.resource != "nodes" or self.verb != "patch":
            return ""
        if "unschedulable" in spec:
            return "cordon" if spec["unschedulable"] is True else "uncordon"
        if "taints" in spec:
            keys = {t.get("key") for t in spec["taints"] or ()}
            return "taint" if ROLLBACK_TAINT in keys else "untaint"
        annotations = (body.get("metadata") or {}).get("annotations") or {}
        if CLEANUP_REQUEST in annotations:
            return "cleanup_request"
        return "patch"


#: The steps an effect belongs to (its intent must be recorded first).
EFFECT_STEPS = {
    "cordon": {"cordon"},
    "taint": {"taint"},
    "eviction": {"drain", "evict_pod"},
    "cleanup_request": {"cleanup_runtime"},
    "delete_node": {"delete_node"},
}


# ---------------------------------------------------------------- the scene


@dataclass
class Scene:
    """One test's world on the shared server; see the module docstring."""

    server: LocalKubeAPIServer
    namespace: str
    workdir: Path
    pool: WarmPool
    case: str = field(default_factory=lambda: secrets.token_hex(3))
    nodes: list[str] = field(default_factory=list)
    controllers: list[Controller] = field(default_factory=list)
    proxies: list[KubeProxy] = field(default_factory=list)
    agent_answers: bool = True
    answered: list[tuple[str, str]] = field(default_factory=list)
    _audit_start: int = 0

    @property
    def controller_user(self) -> str:
        return self.server.identities[CONTROLLER].user

    # -- the cluster

    def node_name(self, suffix: str) -> str:
        return f"acc-{self.case}-{suffix}"

    def add_node(
        self,
        suffix: str,
        *,
        ready: bool = False,
        lease_age: float | None = 1.0,
        annotations: dict[str, str] | None = None,
    ) -> str:
        """A Node that joined just now (NotReady unless ``ready``) and its Lease, renewed
        ``lease_age`` seconds ago (None: none). Returns its name."""
        name = self.node_name(suffix)
        now = time.time()
        since = format_time(now - 5)
        self.nodes.append(name)
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {CASE_LABEL: self.case, WAVE_LABEL: f"wave-{self.case}"},
                "annotations": annotations or {},
            },
            "spec": {},
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True" if ready else "False",
                        "reason": "KubeletReady" if ready else "KubeletNotReady",
                        "lastTransitionTime": since,
                        "lastHeartbeatTime": since,
                    }
                ]
            },
        }
        self.server.ok("POST", "/api/v1/nodes", node)
        if lease_age is not None:
            lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": name, "namespace": NODE_LEASES},
                "spec": {
                    "holderIdentity": name,
                    "leaseDurationSeconds": 40,
                    "renewTime": format_micro_time(now - lease_age),
                },
            }
            self.server.ok(
                "POST", f"/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASES}/leases", lease
            )
        return name

    def add_pod(self, name: str, node: str) -> str:
        """A running pod of a ReplicaSet bound to ``node``; returns its uid."""
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "ReplicaSet",
                        "name": f"{name}-rs",
                        "uid": "00000000-0000-0000-0000-" + secrets.token_hex(6),
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 30,
                "containers": [{"name": "c", "image": "registry.invalid/app:1"}],
            },
        }
        created = self.server.ok("POST", f"/api/v1/namespaces/{self.namespace}/pods", pod)
        return str(created["metadata"]["uid"])

    def get_node(self, name: str) -> dict[str, Any] | None:
        answer = self.server.request("GET", f"/api/v1/nodes/{name}")
        if answer.status == 404:
            return None
        assert answer.status == 200, (answer.status, answer.body)
        node: dict[str, Any] = answer.body
        return node

    def node(self, name: str) -> dict[str, Any]:
        """The Node, which must exist."""
        node = self.get_node(name)
        assert node is not None, f"node {name} is gone"
        return node

    def recover(self, name: str) -> None:
        """The node's kubelet is back: Ready True, its Lease renewed now."""
        now = time.time()
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "lastTransitionTime": format_time(now),
            "lastHeartbeatTime": format_time(now),
        }
        self.server.ok(
            "PATCH",
            f"/api/v1/nodes/{name}/status",
            {"status": {"conditions": [ready]}},
            content_type="application/merge-patch+json",
        )
        self.renew_lease(name)

    def renew_lease(self, name: str) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASES}/leases/{name}"
        lease = self.server.ok("GET", path)
        lease["spec"]["renewTime"] = format_micro_time(time.time())
        self.server.ok("PUT", path, lease)

    def pods(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.server.ok(
            "GET", f"/api/v1/namespaces/{self.namespace}/pods"
        )["items"]
        return items

    # -- the parts nobody runs here, played by the test

    def play_node_side(self) -> None:
        """One round of the node agents and kubelets of this scene's nodes: answer each open
        cleanup request ``done`` (unless ``agent_answers`` is off), and delete pods that were
        evicted (they carry a deletionTimestamp) with grace 0, as a kubelet confirms them."""
        if self.agent_answers:
            for name in self.nodes:
                node = self.get_node(name)
                if node is None:
                    continue
                annotations = node["metadata"].get("annotations") or {}
                request = annotations.get(CLEANUP_REQUEST)
                status = annotations.get(CLEANUP_STATUS)
                if not request or (status and json.loads(status).get("id") == request):
                    continue
                answer = {
                    "id": request,
                    "state": "done",
                    "removedSandboxes": 1,
                    "removedContainers": 2,
                    "skipped": 0,
                    "finishedAt": format_time(time.time()),
                    "error": "",
                    "remaining": {"sandboxes": 0, "containers": 0, "pods": []},
                }
                patch = {"metadata": {"annotations": {CLEANUP_STATUS: json.dumps(answer)}}}
                self.server.ok(
                    "PATCH",
                    f"/api/v1/nodes/{name}",
                    patch,
                    content_type="application/merge-patch+json",
                )
                self.answered.append((name, request))
        for pod in self.pods():
            if pod["metadata"].get("deletionTimestamp"):
                self.delete_pod(pod["metadata"]["name"])

    def delete_pod(self, name: str) -> None:
        answer = self.server.request(
            "DELETE",
            f"/api/v1/namespaces/{self.namespace}/pods/{name}",
            {"gracePeriodSeconds": 0},
        )
        assert answer.status in (200, 202, 404), (answer.status, answer.body)

    def until(self, condition: Callable[[], Any], what: str, timeout: float = DEADLINE) -> Any:
        """:func:`tests.support.wait.until`, playing the node side at every poll, and failing at
        once (with its log) when a controller that should run exited."""

        def played() -> Any:
            for controller in self.controllers:
                if controller.process.returncode not in (None, -signal.SIGKILL, 0, -15):
                    pytest.fail(f"{controller.name} exited:\n{controller.log_tail()}")
            self.play_node_side()
            return condition()

        def logs() -> str:
            return "".join(f"\n--- {c.name}:\n{c.log_tail(20)}" for c in self.controllers)

        return until(played, timeout=timeout, what=what, interval=POLL, detail=logs)

    # -- controllers, and Alertmanager

    def proxy(self, name: str) -> KubeProxy:
        proxy = KubeProxy(self.server, name).start()
        self.proxies.append(proxy)
        return proxy

    def controller(
        self,
        name: str,
        *args: str,
        proxy: KubeProxy | None = None,
        leader_elect: bool = True,
        identity: str = "",
        journal: Path | None = None,
        start: bool = True,
    ) -> Controller:
        """A controller, started; with ``start`` false only taken from the pool (for
        :meth:`Controller.start` later, e.g. as a restart). ``journal``: another one's file, as
        the same replica restarted."""
        controller = Controller(
            self,
            name,
            proxy=proxy,
            leader_elect=leader_elect,
            identity=identity or f"{name}-{self.case}",
            args=args,
            journal=journal,
        )
        self.controllers.append(controller)
        return controller.start() if start else controller

    def leader(self) -> str:
        """The holder of this scene's leader Lease ("" when none)."""
        path = f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{LEADER_LEASE}"
        answer = self.server.request("GET", path)
        if answer.status != 200:
            return ""
        return str(answer.body.get("spec", {}).get("holderIdentity") or "")

    def deliver(
        self, controllers: Iterable[Controller], *alerts: dict[str, Any], timeout: float = DEADLINE
    ) -> Controller:
        """Alertmanager: POST the alerts to the replicas in turn until one answers 200 (a
        follower answers 503 and Alertmanager retries); returns the one that took them."""
        replicas = list(controllers)
        body = payload(*alerts)

        def taken() -> Controller | None:
            for controller in replicas:
                if controller.running and controller.post_alerts(body) == 200:
                    return controller
            return None

        found: Controller = self.until(taken, "a controller to accept the alerts", timeout)
        return found

    # -- what the cluster says

    def rollbacks(self) -> list[dict[str, Any]]:
        """This scene's NodeRollbacks, oldest first."""
        items = self.server.ok("GET", NODEROLLBACKS)["items"]
        mine = [r for r in items if r.get("spec", {}).get("nodeName") in self.nodes]
        return sorted(
            mine, key=lambda r: (r["metadata"]["creationTimestamp"], r["metadata"]["name"])
        )

    def phases(self) -> list[str]:
        """The phase of each of this scene's NodeRollbacks, oldest first ("" before the
        first status)."""
        return [str(r.get("status", {}).get("phase", "")) for r in self.rollbacks()]

    def events(self, node: str) -> list[dict[str, Any]]:
        """The Events about ``node`` (and about this scene's pods on it)."""
        selector = f"involvedObject.name={node}"
        found: list[dict[str, Any]] = self.server.ok(
            "GET", f"/api/v1/namespaces/default/events?fieldSelector={selector}"
        )["items"]
        return found

    def pod_events(self, pod: str) -> list[dict[str, Any]]:
        selector = f"involvedObject.name={pod}"
        found: list[dict[str, Any]] = self.server.ok(
            "GET", f"/api/v1/namespaces/{self.namespace}/events?fieldSelector={selector}"
        )["items"]
        return found

    def event_reasons(self, node: str) -> Counter[str]:
        return Counter(e["reason"] for e in self.events(node))

    def audit_events(self) -> list[dict[str, Any]]:
        """The audit log since the scene began (complete lines only)."""
        with self.server.audit_log.open("rb") as log:
            log.seek(self._audit_start)
            text = log.read().decode()
        return [json.loads(line) for line in text.split("\n")[:-1] if line]

    def writes(self) -> list[Write]:
        """The controllers' writes so far (the audit log since the scene began)."""
        events = self.audit_events()
        return [
            w
            for w in map(Write.of, events)
            if w.user == self.controller_user and w.verb in ("create", "update", "patch", "delete")
        ]

    def effects(self) -> Counter[tuple[str, str]]:
        """(effect, object name) of the controllers' writes on this scene's Nodes and pods
        that the API server carried out (2xx), counted: the effects that happened."""
        found: Counter[tuple[str, str]] = Counter()
        for w in self.writes():
            mine = w.name in self.nodes if w.resource == "nodes" else w.namespace == self.namespace
            if w.effect and mine and 200 <= w.code < 300:
                found[(w.effect, w.name)] += 1
        return found

    def check_the_record_came_first(self) -> None:
        """Intent before effect, as the audit log orders the writes: every effect on a Node or
        pod came after a status write (carrying the resourceVersion it read) that recorded its
        step running; every status write carried a resourceVersion."""
        running: set[str] = set()
        for w in self.writes():
            if w.resource == "noderollbacks" and w.subresource == "status":
                body = w.body if isinstance(w.body, dict) else {}
                assert (body.get("metadata") or {}).get("resourceVersion"), w
                steps = (body.get("status") or {}).get("steps") or ()
                running |= {s["name"] for s in steps if s.get("state") != "pending"}
                continue
            step = EFFECT_STEPS.get(w.effect)
            mine = w.name in self.nodes if w.resource == "nodes" else w.namespace == self.namespace
            if step is not None and mine:
                assert running & step, f"{w.effect} {w.name} before its step was recorded"

    def wait_audited(self, effect: str, name: str) -> None:
        """Until the audit log shows the effect (it is written right after the answer)."""
        until(
            lambda: self.effects()[(effect, name)] >= 1,
            timeout=DEADLINE,
            what=f"the audit log to show {effect} {name}",
            interval=POLL,
        )

    # -- the end

    def close(self) -> None:
        """Stop every controller and proxy, delete every object of the scene."""
        failures: list[str] = []
        for controller in self.controllers:
            controller.stop()
        for proxy in self.proxies:
            proxy.stop()
        server = self.server
        for rollback in self.rollbacks():
            server.request("DELETE", f"{NODEROLLBACKS}/{rollback['metadata']['name']}")
        for name in self.nodes:
            for event in self.events(name):
                server.request(
                    "DELETE", f"/api/v1/namespaces/default/events/{event['metadata']['name']}"
                )
            for path in (
                f"/api/v1/nodes/{name}",
                f"/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASES}/leases/{name}",
            ):
                answer = server.request("DELETE", path, {"gracePeriodSeconds": 0})
                if answer.status not in (200, 202, 404):
                    failures.append(f"DELETE {path}: {answer.status}")
        for rollback in self.rollbacks():
            failures.append(f"NodeRollback {rollback['metadata']['name']} left")
        for name in self.nodes:
            server.wait_gone(f"/api/v1/nodes/{name}")
        if failures:
            raise AssertionError("scene cleanup failed: " + "; ".join(failures))


@pytest.fixture
def scene(
    controller_rbac: LocalKubeAPIServer, warm_pool: WarmPool, tmp_path: Path
) -> Iterator[Scene]:
    server = controller_rbac
    namespace = create_namespace(server, "acc-")
    for doc in _rbac_docs(LEADER_ELECTION_RBAC):  # the leader Lease's Role, in this namespace
        doc["metadata"]["namespace"] = namespace
        collection, _ = _rbac_path(doc)
        server.ok("POST", collection, doc)
    made = Scene(server, namespace, tmp_path, warm_pool)
    made._audit_start = server.audit_log.read_bytes().rfind(b"\n") + 1  # after the last line
    try:
        yield made
    finally:
        try:
            made.close()
        finally:
            for pod in made.pods():
                made.delete_pod(pod["metadata"]["name"])
            delete_namespace(server, namespace)
