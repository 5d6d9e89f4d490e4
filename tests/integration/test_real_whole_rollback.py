"""A whole node rollback on the real kube-apiserver, as the product's service accounts with the
shipped RBAC: the ``nodesync controller`` process (webhook, executor, leader election) and the
``nodesync agent`` process on a real containerd. The node failed to join and its containerd
holds a sandbox no pod owns; one Alertmanager delivery must end with every step done (cordon,
taint, drain with an eviction, the agent's cleanup, verify, delete), no request refused, and,
just before the delete, ``kubectl describe node`` showing every nodesync Event of the rollback,
the refusal of a second alert of the same delivery included.

Nobody runs a kubelet here: the test confirms the evicted pod's deletion as a kubelet would
(tests/support/scene.py, Scene.play_node_side), and never answers the cleanup itself.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from exporter.cri.client import CRIClient
from nodesync_sim.real.containerd import LocalContainerd
from nodesync_sim.real.kube_apiserver import ADMIN, AGENT, CONTROLLER, LocalKubeAPIServer
from nodesync_sim.real.runtime_pods import ContainerSpec, run_pod
from tests.support.acceptance import DEADLINE, NODE_ROLLBACK_EVENTS, ROLLBACK_ARGS
from tests.support.realkube import AGENT_RBAC, code, rbac_applied, requests, user_of
from tests.support.rollback_requests import alert, delete_of, steps
from tests.support.scene import Scene
from tests.support.wait import until

pytestmark = [pytest.mark.kubeapi, pytest.mark.containerd, pytest.mark.timeout(240)]

LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
SLEEPER = [ContainerSpec("app", ["/bin/sleep", "inf"])]
REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def agent_rbac(scene: Scene) -> Iterator[None]:
    """The shipped agent RBAC on the scene's server, for the test."""
    with rbac_applied(scene.server, AGENT, [AGENT_RBAC], ["/api/v1/nodes", LEASES]):
        yield


def _sandbox_ids(endpoint: str) -> set[str]:
    async def ids() -> set[str]:
        async with CRIClient(endpoint, timeout=5) as cri:
            return {s.id for s in await cri.list_pod_sandboxes()}

    return asyncio.run(ids())


def _start_pod(endpoint: str, name: str, namespace: str, uid: str) -> str:
    return asyncio.run(run_pod(endpoint, name, namespace, uid, SLEEPER)).sandbox_id


def _metrics(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            return str(answer.read().decode())
    except OSError:
        return ""


def _kubectl(server: LocalKubeAPIServer, *args: str) -> str:
    kubectl = shutil.which("kubectl")
    assert kubectl is not None, "kubectl is not on PATH (scripts/setup installs one)"
    result = subprocess.run(
        [kubectl, "--kubeconfig", str(server.kubeconfig(ADMIN)), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _described_events(described: str) -> set[tuple[str, str]]:
    """(type, reason) of each Event row of ``kubectl describe``'s Events table."""
    rows = described.split("\nEvents:", 1)[1].splitlines()
    return {
        (row.split()[0], row.split()[1])
        for row in rows
        if row.split()[:1] in (["Normal"], ["Warning"])
    }


@pytest.fixture
def agent_process(
    scene: Scene,
    agent_rbac: None,
    containerd: LocalContainerd,
    tmp_path: Path,
    unused_tcp_port_factory: Callable[[], int],
) -> Iterator[Callable[[str], int]]:
    """Starts ``nodesync agent`` for a node (returns its metrics port); stopped by its PID."""
    started: list[subprocess.Popen[bytes]] = []

    def start(node: str) -> int:
        port, closed = unused_tcp_port_factory(), unused_tcp_port_factory()
        kubelet_root = tmp_path / "kubelet"
        (kubelet_root / "pods").mkdir(parents=True)
        log = (tmp_path / "agent.log").open("wb")
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        started.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "exporter",
                    "agent",
                    f"--node.name={node}",
                    f"--kubeconfig={scene.server.kubeconfig(AGENT)}",
                    f"--cri.endpoint={containerd.endpoint}",
                    f"--containerd.root={containerd.root}",
                    f"--kubelet.root-dir={kubelet_root}",
                    f"--kubelet.healthz-url=http://127.0.0.1:{closed}/healthz",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--sync.period=0.2s",
                    "--stats.period=0s",
                    "--apiserver.initial-jitter=0s",
                    "--drift.grace-period=0.5s",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        )
        log.close()
        return port

    try:
        yield start
    finally:
        for process in started:
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(15)


def test_a_whole_rollback_with_a_real_agent_as_the_shipped_service_accounts(
    scene: Scene,
    containerd: LocalContainerd,
    agent_process: Callable[[str], int],
) -> None:
    scene.agent_answers = False  # the real agent answers the cleanup request
    node = scene.add_node("1")
    node_uid = scene.node(node)["metadata"]["uid"]
    web_uid = scene.add_pod("web", node)
    _start_pod(containerd.endpoint, "web", scene.namespace, web_uid)
    orphan = _start_pod(containerd.endpoint, "gone", scene.namespace, str(uuid.uuid4()))

    port = agent_process(node)
    orphan_reported = 'nodesync_drift_pods{kind="orphan_sandbox"} 1.0'
    until(
        lambda: orphan_reported in _metrics(port),
        timeout=DEADLINE,
        what="the agent to report the orphan sandbox",
    )

    proxy = scene.proxy("controller")
    proxy.gate(delete_of(node))
    controller = scene.controller("controller", *ROLLBACK_ARGS, proxy=proxy)
    scene.until(lambda: scene.leader() == controller.identity, "the controller to lead")
    # Alertmanager's delivery: the rollback, and an alert no action can come of (refused).
    scene.deliver([controller], alert(node), alert(node, "reboot_node"))

    scene.until(proxy.gated.is_set, "the rollback to reach the node's deletion", timeout=120)
    assert orphan not in _sandbox_ids(containerd.endpoint)  # the agent removed it
    # Just before the delete, everything nodesync did to the node is in kubectl describe
    # (Events are found by the node's uid), the refusal as a Warning.
    described = _kubectl(scene.server, "describe", "node", node)
    shown = _described_events(described)
    # All but the deletion, which has not happened yet.
    assert {("Normal", reason) for reason in NODE_ROLLBACK_EVENTS[:-1]} <= shown, described
    assert ("Warning", "NodesyncRefused") in shown, described
    assert "unknown_action" in described.split("\nEvents:", 1)[1], described
    by_uid = scene.server.ok("GET", f"/api/v1/events?fieldSelector=involvedObject.uid={node_uid}")
    assert {e["reason"] for e in by_uid["items"]} >= set(NODE_ROLLBACK_EVENTS[:-1])

    proxy.open_gate()
    scene.until(lambda: scene.phases() == ["Succeeded"], "the rollback to finish", timeout=60)
    assert scene.get_node(node) is None
    [rollback] = scene.rollbacks()
    done = steps(rollback)
    assert [name for name, step in done.items() if step["state"] != "done"] == [], done
    assert set(done) >= {"cordon", "taint", "drain", "cleanup_runtime", "verify", "delete_node"}
    assert 'nodesync_cleanup_requests_total{result="done"} 1.0' in _metrics(port)
    scene.wait_audited("delete_node", node)
    effects = scene.effects()
    for effect in ("cordon", "taint", "cleanup_request", "delete_node"):
        assert effects[(effect, node)] == 1, effects
    assert effects[("eviction", "web")] == 1, effects
    scene.check_the_record_came_first()
    assert scene.event_reasons(node)["NodesyncDeleteNode"] == 1

    # Every request of both service accounts was allowed.
    server = scene.server
    for identity in (AGENT, CONTROLLER):
        user = user_of(server, identity)
        refused = [
            (e["verb"], e["requestURI"], code(e))
            for e in requests(server, user=user, product=True)
            if code(e) == 403
        ]
        assert refused == [], (identity, refused)
    assert requests(server, user=user_of(server, AGENT), verb="patch", resource="nodes", name=node)
    assert controller.running, controller.log_tail()
