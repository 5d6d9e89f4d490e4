"""Build the shipped kustomizations with ``kubectl kustomize`` and read what they give.

kustomize writes YAML; the project has no YAML library, so the output is read with the strict
subset reader of tests/rules (kustomize's output stays inside the subset: block collections,
quoted or plain scalars, literal blocks; anything else fails loudly). No cluster is needed.
"""

from __future__ import annotations

import copy
import functools
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from nodesync_sim.yamlfile import loads_all

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
BASE = DEPLOY / "base"
OVERLAYS = DEPLOY / "overlays"
COMPONENTS = DEPLOY / "components"
NAMESPACE = "nodesync"

Obj = dict[str, Any]


def kustomizations() -> list[Path]:
    """The base and every overlay (each directory of deploy/overlays with a kustomization)."""
    overlays = sorted(p.parent for p in OVERLAYS.glob("*/kustomization.yaml"))
    return [BASE, *overlays]


KUSTOMIZE_MAJOR = 5


@functools.cache
def kubectl() -> str:
    """kubectl with a kustomize v5 inside; the test fails (never skips) without one."""
    found = shutil.which("kubectl")
    if found is None:
        pytest.fail(
            "kubectl is required to build the kustomizations (kubectl kustomize, kustomize v5) "
            "and is not on PATH. Install a current kubectl (Debian's kubernetes-client 1.20 "
            "bundles a kustomize too old for these manifests).",
            pytrace=False,
        )
    version = subprocess.run(
        [found, "version", "--client"], capture_output=True, text=True, timeout=30, check=False
    )
    match = re.search(r"Kustomize Version: v(\d+)", version.stdout)
    if match is None or int(match.group(1)) < KUSTOMIZE_MAJOR:
        pytest.fail(
            f"{found} bundles no kustomize v{KUSTOMIZE_MAJOR} or newer "
            f"({version.stdout.strip() or version.stderr.strip()}): install a current kubectl",
            pytrace=False,
        )
    return found


def split_documents(text: str) -> list[Obj]:
    return loads_all(text, source="kubectl kustomize")


def _kustomize(path: str) -> tuple[Obj, ...]:
    result = subprocess.run(
        [kubectl(), "kustomize", path], capture_output=True, text=True, timeout=60, check=False
    )
    if result.returncode != 0:
        pytest.fail(f"kubectl kustomize {path} failed:\n{result.stderr}", pytrace=False)
    return tuple(split_documents(result.stdout))


_cached = functools.cache(_kustomize)


def build(path: Path) -> list[Obj]:
    """The objects ``kubectl kustomize path`` gives (fresh copies: tests may change them)."""
    return copy.deepcopy(list(_cached(str(path))))


def build_with(resources: Sequence[Path], components: Sequence[Path] = ()) -> list[Obj]:
    """Build a throwaway kustomization made of shipped ones (kustomize takes relative paths
    only), e.g. an overlay plus an optional component, as a user's own overlay would."""
    with tempfile.TemporaryDirectory(prefix="nodesync-kustomize-") as tmp:
        lines = ["apiVersion: kustomize.config.k8s.io/v1beta1", "kind: Kustomization"]
        lines.append("resources:")
        lines += [f"  - {os.path.relpath(p, tmp)}" for p in resources]
        if components:
            lines.append("components:")
            lines += [f"  - {os.path.relpath(p, tmp)}" for p in components]
        Path(tmp, "kustomization.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
        return list(_kustomize(tmp))


def find(objects: Iterable[Obj], kind: str, name: str | None = None) -> list[Obj]:
    return [
        o
        for o in objects
        if o.get("kind") == kind and (name is None or o["metadata"].get("name") == name)
    ]


def one(objects: Iterable[Obj], kind: str, name: str) -> Obj:
    found = find(objects, kind, name)
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def workloads(objects: Iterable[Obj]) -> list[Obj]:
    return [o for o in objects if o.get("kind") in ("DaemonSet", "Deployment", "StatefulSet")]


def controller_workload(objects: Iterable[Obj]) -> Obj:
    found = [o for o in workloads(objects) if o["metadata"]["name"] == "nodesync-controller"]
    assert len(found) == 1, "expected one controller workload"
    return found[0]


def container(workload: Obj, name: str) -> Obj:
    containers = workload["spec"]["template"]["spec"]["containers"]
    found = [c for c in containers if c["name"] == name]
    assert len(found) == 1, f"expected one container {name}"
    return found[0]


def env(container_spec: Obj) -> dict[str, Obj]:
    return {e["name"]: e for e in container_spec.get("env") or []}
