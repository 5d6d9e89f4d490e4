"""Fixtures the deploy tests share."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deploy.manifests import ROOT

BUILD_TIMEOUT = 1500.0


@pytest.fixture
def kubelet_root() -> Iterator[Path]:
    """kubelet's root as kubelet makes it: root:root 0750, pods/ 0750, a pod directory."""
    parent = Path(tempfile.mkdtemp(prefix="nodesync-kubelet-"))
    try:
        parent.chmod(0o755)
        root = parent / "kubelet"
        (root / "pods" / "0b1c2d3e-pod").mkdir(parents=True)
        for path in (root, root / "pods", root / "pods" / "0b1c2d3e-pod"):
            path.chmod(0o750)
        yield root
    finally:
        shutil.rmtree(parent)


@dataclass(frozen=True)
class BuiltImage:
    archive: Path
    report: str  # what scripts/build-image printed


@pytest.fixture(scope="session")
def built_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BuiltImage]:
    archive = tmp_path_factory.mktemp("image") / "nodesync.oci.tar"
    result = subprocess.run(
        [str(ROOT / "scripts" / "build-image"), "--output", str(archive)],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(f"scripts/build-image failed:\n{result.stdout}{result.stderr}", pytrace=False)
    try:
        yield BuiltImage(archive, result.stdout)
    finally:
        archive.unlink(missing_ok=True)
