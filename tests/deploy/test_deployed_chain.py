"""nodesync as a user installs it: the image built by scripts/build-image, the shipped manifests
applied to a real cluster by the commands of docs/install.md, the pods run by real kubelets.

The cluster (tests/deploy/incluster.py) has two nodes with networks of their own. The test runs
docs/install.md's steps 2 and 3 as they are written (the shell blocks through bash, the overlay
as the doc gives it): the namespace and the webhook token, the dry-run overlay, then the standard
overlay with the delete-nodes component. It checks what the doc promises: the agent on every
node with the shipped security settings (as its process has them, not only as its spec says),
reading that node's containerd, kubelet and the API server; the controller an ordinary pod with
a pod address behind its Service, in dry run first and then acting.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nodesync_sim.real.cluster import RealCluster
from nodesync_sim.real.node import RealNode
from nodesync_sim.real.removal import remove_tree
from tests.deploy.conftest import BuiltImage
from tests.deploy.incluster import (
    AGENT_PORT,
    NAMESPACE,
    OPERATOR_KINDS,
    Installer,
    doc_blocks,
    import_image,
    journal_directory,
    journal_volume,
    operator_crd,
    wait_rolled_out,
)
from tests.deploy.manifests import BASE, build, one
from tests.support.kubeapi import find_binaries
from tests.support.realcluster import kube_binaries, require_node_binaries
from tests.support.wait import until

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(1800)]

NODES = 2


@dataclass
class Deployment:
    cluster: RealCluster
    nodes: list[RealNode]
    installer: Installer
    workdir: Path


def _image_names() -> tuple[str, ...]:
    """The image as the doc's overlay names it (registry and tag of its ``images:``)."""
    (overlay, *_) = doc_blocks("3. Your overlay, in dry run first", "yaml")
    name = re.search(r"newName: (\S+)", overlay)
    tag = re.search(r"newTag: (\S+)", overlay)
    assert name, overlay
    assert tag, overlay
    return (f"{name.group(1)}:{tag.group(1)}",)


@pytest.fixture(scope="module")
def deployment(built_image: BuiltImage) -> Iterator[Deployment]:
    require_node_binaries()
    _, etcd = find_binaries()
    cluster = RealCluster(kube_binaries(), etcd, service_accounts=True)
    workdir = Path(tempfile.mkdtemp(prefix="nodesync-install-"))
    try:
        with journal_directory() as journal:
            yield from _install(cluster, workdir, journal, built_image)
    finally:
        cluster.cleanup()
        remove_tree(workdir)
    assert not cluster.leftovers()


def _install(
    cluster: RealCluster, workdir: Path, journal: Path, built_image: BuiltImage
) -> Iterator[Deployment]:
    """What the cluster's administrator provides before the doc begins (incluster.py)."""
    cluster.start()
    nodes = [cluster.add_node(network=True) for _ in range(NODES)]
    for node in nodes:
        node.expose(AGENT_PORT)
        import_image(node, built_image.archive, _image_names())
    installer = Installer(cluster, workdir)
    installer.apply(*(operator_crd(*kind) for kind in OPERATOR_KINDS))
    installer.apply(journal_volume(journal))
    yield Deployment(cluster, nodes, installer, workdir)


def _pods(installer: Installer, component: str) -> list[dict[str, Any]]:
    selector = f"app.kubernetes.io/component={component}"
    items: list[dict[str, Any]] = installer.get("-n", NAMESPACE, "pods", "-l", selector)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def _ready(pod: dict[str, Any]) -> bool:
    conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions", [])}
    return pod["status"].get("phase") == "Running" and conditions.get("Ready") == "True"


def _process_status(node: RealNode, pod: dict[str, Any]) -> dict[str, str]:
    """/proc/<pid>/status of the pod's (one) container, as its node's containerd runs it."""
    (status,) = pod["status"]["containerStatuses"]
    container = status["containerID"].removeprefix("containerd://")
    socket = node.cri_endpoint.removeprefix("unix://")
    out = subprocess.run(
        ["ctr", "-a", socket, "-n", "k8s.io", "tasks", "ls"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    pids = {line.split()[0]: line.split()[1] for line in out.splitlines()[1:] if line.strip()}
    fields = {}
    for line in Path(f"/proc/{pids[container]}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def _agent_metrics(node: RealNode) -> str:
    with urllib.request.urlopen(f"http://{node.name}:{AGENT_PORT}/metrics", timeout=5) as answer:
        text: str = answer.read().decode()
    return text


def _sample(text: str, series: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[1])
    return None


def _controller_env(pod: dict[str, Any]) -> dict[str, str]:
    (container,) = pod["spec"]["containers"]
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def test_the_shipped_manifests_run_on_real_kubelets_as_docs_install_says(
    deployment: Deployment,
) -> None:
    installer, nodes = deployment.installer, deployment.nodes

    # Step 2: the namespace and the webhook token, in the checkout.
    (secret_step,) = doc_blocks("2. The namespace and the webhook token", "sh")
    installer.shell(secret_step, cwd=deployment.workdir / "nodesync")
    token = installer.get("-n", NAMESPACE, "secret", "nodesync-webhook-token")
    assert set(token["data"]) == {"token"}

    # Step 3: the user's overlay of the dry-run one, applied and rolled out as the doc says.
    overlay, components, *_ = doc_blocks("3. Your overlay, in dry run first", "yaml")
    apply_step, *_ = doc_blocks("3. Your overlay, in dry run first", "sh")
    installer.overlay(overlay)
    installer.shell(apply_step, cwd=deployment.workdir)

    # The agent: one pod per node, Ready, as the DaemonSet declares it.
    shipped = one(build(BASE), "DaemonSet", "nodesync-agent")["spec"]["template"]["spec"]
    agents = _pods(installer, "agent")
    assert sorted(p["spec"]["nodeName"] for p in agents) == sorted(n.name for n in nodes)
    by_node = {node.name: node for node in nodes}
    (image,) = _image_names()
    for pod in agents:
        assert _ready(pod), pod["status"]
        assert pod["spec"]["hostNetwork"] is True
        assert pod["spec"]["securityContext"] == {
            **shipped["securityContext"],
            **{k: v for k, v in pod["spec"]["securityContext"].items() if k == "fsGroup"},
        }
        (container,) = pod["spec"]["containers"]
        assert container["image"] == image
        assert container["securityContext"] == shipped["containers"][0]["securityContext"]
        # ... and its process has them: the user and groups, no capability, no new
        # privileges, seccomp filtering.
        status = _process_status(by_node[pod["spec"]["nodeName"]], pod)
        assert status["Uid"].split() == ["65532"] * 4, status["Uid"]
        assert status["Gid"].split() == ["65532"] * 4, status["Gid"]
        assert "0" in status["Groups"].split(), status["Groups"]
        assert int(status["CapEff"], 16) == 0
        assert int(status["CapPrm"], 16) == 0
        assert status["NoNewPrivs"] == "1"
        assert status["Seccomp"] == "2"

    # Each agent reads its node: the containerd, kubelet's healthz on the node's loopback, and
    # the API server with its service account's token.
    for node in nodes:

        def reads_its_node(node: RealNode = node) -> bool:
            text = _agent_metrics(node)
            return all(
                _sample(text, series) == 1.0
                for series in (
                    "nodesync_cri_up",
                    "nodesync_kubelet_healthy",
                    'nodesync_source_up{source="apiserver"}',
                    'nodesync_source_up{source="runtime"}',
                )
            )

        until(
            reads_its_node,
            timeout=60,
            what=f"the agent on {node.name} reads its node",
            detail=lambda node=node: _agent_metrics(node),  # type: ignore[misc]
        )

    # The controller: an ordinary pod with a pod address behind its Service, in dry run.
    (controller,) = _pods(installer, "controller")
    assert _ready(controller), controller["status"]
    assert controller["spec"].get("hostNetwork") is not True
    assert _controller_env(controller)["NODESYNC_ROLLBACK_DRY_RUN"] == "true"
    address = controller["status"]["podIP"]
    assert address.startswith("10.214."), address
    endpoints = installer.get("-n", NAMESPACE, "endpoints", "nodesync-controller")
    served = {(a["ip"], p["port"]) for s in endpoints["subsets"] for a in s["addresses"]
              for p in s["ports"]}  # fmt: skip
    assert served == {(address, 9618)}

    # To act: the standard overlay with the delete-nodes component, applied again.
    acting = overlay.replace("deploy/overlays/dry-run", "deploy/overlays/standard")
    assert acting != overlay
    installer.overlay(acting + components)
    installer.shell(apply_step, cwd=deployment.workdir)

    def acting_controller() -> dict[str, Any] | None:
        pods = _pods(installer, "controller")
        if len(pods) != 1 or not _ready(pods[0]):
            return None
        env = _controller_env(pods[0])
        return pods[0] if env["NODESYNC_ROLLBACK_DRY_RUN"] == "false" else None

    new = until(acting_controller, timeout=240, what="the acting controller Ready")
    assert _controller_env(new)["NODESYNC_ROLLBACK_DELETE_NODES"] == "true"
    wait_rolled_out(installer, "daemonset", "nodesync-agent")
    assert installer.get("clusterrole", "nodesync-controller-delete-nodes")["rules"]
