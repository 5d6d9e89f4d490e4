"""Fixtures the deploy tests share."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


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
