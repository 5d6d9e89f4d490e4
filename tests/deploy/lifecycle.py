"""The deployed chain's later life, as docs/upgrade.md and docs/uninstall.md tell a user: an
upgrade while a rollback runs, and the uninstall, with a listing of what nodesync could leave."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.deploy.incluster import NAMESPACE, Installer
from tests.deploy.manifests import ROOT

UPGRADE_DOC = ROOT / "docs" / "upgrade.md"
UNINSTALL_DOC = ROOT / "docs" / "uninstall.md"
NEXT_TAG = "0.1.1"
#: What nodesync writes to Nodes (docs/uninstall.md's table).
NODE_ANNOTATIONS = ("nodesync.io/cleanup-request", "nodesync.io/cleanup-status")
TAINT = "nodesync.io/rollback"
#: The Events the controller writes.
SOURCE = "source=nodesync-controller"


def doc_blocks(path: Path, heading: str) -> list[str]:
    """The ``sh`` blocks of the section ``heading`` of a doc."""
    text = path.read_text()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end != -1 else len(text)]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.S)


def next_release(overlay: str) -> str:
    """The user's overlay with the image's tag changed, as upgrade.md says."""
    changed, count = re.subn(r"newTag: \S+", f"newTag: {NEXT_TAG}", overlay)
    assert count == 1, overlay
    return changed


def uninstall(installer: Installer, workdir: Path, *, helm: bool = False) -> None:
    """docs/uninstall.md to the letter: stop the controller, remove the manifests (or the Helm
    release, as its "With Helm" says), clear what stays on the nodes (a node listed as tainted
    would be untainted and uncordoned)."""
    (stop,) = doc_blocks(UNINSTALL_DOC, "1. Stop the rollbacks")
    installer.shell(stop, cwd=workdir)
    if helm:
        (remove,) = doc_blocks(UNINSTALL_DOC, "With Helm")
    else:
        remove, _by_label = doc_blocks(UNINSTALL_DOC, "2. Remove the manifests")
    installer.shell(remove, cwd=workdir)
    annotations, tainted, clear, _events_of_one, events = doc_blocks(
        UNINSTALL_DOC, "3. What stays on your nodes, and how to clear it"
    )
    installer.shell(annotations, cwd=workdir)
    for node in installer.shell(tainted, cwd=workdir).split():
        installer.shell(clear.replace("NODE", node), cwd=workdir)
    installer.shell(events, cwd=workdir)


def leftovers(installer: Installer) -> list[str]:
    """Everything of nodesync's still in the cluster: its namespace, CRD, RBAC objects, its
    Events, and its taint, annotations or labels on any Node."""
    found = []
    namespaces = installer.get("namespaces")["items"]
    found += [f"namespace {n['metadata']['name']}" for n in namespaces
              if n["metadata"]["name"] == NAMESPACE]  # fmt: skip
    crds = installer.get("crd")["items"]
    found += [f"crd {c['metadata']['name']}" for c in crds
              if c["spec"]["group"] == "nodesync.io"]  # fmt: skip
    for kind in ("clusterrole", "clusterrolebinding"):
        found += [f"{kind} {o['metadata']['name']}" for o in installer.get(kind)["items"]
                  if _ours(o)]  # fmt: skip
    for kind in ("role", "rolebinding"):
        found += [
            f"{kind} {o['metadata']['namespace']}/{o['metadata']['name']}"
            for o in installer.get(kind, "--all-namespaces")["items"]
            if _ours(o)
        ]
    events = installer.get("events", "--all-namespaces", "--field-selector", SOURCE)["items"]
    found += [f"event {e['metadata']['namespace']}/{e['metadata']['name']}" for e in events]
    for node in installer.get("nodes")["items"]:
        meta, spec = node["metadata"], node["spec"]
        name = meta["name"]
        found += [f"node {name} annotation {a}" for a in meta.get("annotations", {})
                  if a.startswith("nodesync.io/")]  # fmt: skip
        found += [f"node {name} label {a}" for a in meta.get("labels", {})
                  if a.startswith("nodesync.io/")]  # fmt: skip
        found += [f"node {name} taint {t['key']}" for t in spec.get("taints", [])
                  if t["key"] == TAINT]  # fmt: skip
    return found


def _ours(obj: dict[str, Any]) -> bool:
    meta = obj["metadata"]
    return (
        "nodesync" in meta["name"]
        or (meta.get("labels") or {}).get("app.kubernetes.io/name") == "nodesync"
    )
