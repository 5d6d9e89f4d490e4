"""The layering contracts (pyproject.toml's ``[tool.importlinter]``) hold, and each of them fails
``lint-imports`` — and with it ``scripts/test`` — when a module breaks it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

# A module that breaks the contract, and the import it gains.
BREAKS = {
    "product-without-simulator": ("exporter/controller/app.py", "import nodesync_sim.flags"),
    "model-pure": ("exporter/model/guards/checks.py", "import socket"),
    "model-knows-no-flags": ("exporter/model/drain.py", "import exporter.settings.values"),
    "metrics-pure": ("exporter/metrics/nodes.py", "import sqlite3"),
    "boundaries-independent": ("exporter/kube/api.py", "import exporter.cri.client"),
    "boundaries-below-roles": ("exporter/host/probes.py", "import exporter.agent.sync"),
    "roles-independent": ("exporter/agent/sync.py", "import exporter.controller.journal"),
    "webhook-executor-independent": (
        "exporter/controller/executor.py",
        "import exporter.controller.webhook",
    ),
    "sim-wings": ("nodesync_sim/fake/scaleout/simulator.py", "import nodesync_sim.demo.chain"),
    "real-without-fakes": ("nodesync_sim/real/process.py", "import nodesync_sim.fake.apiserver"),
}


def _contracts() -> dict[str, str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {c["id"]: c["name"] for c in config["tool"]["importlinter"]["contracts"]}


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(tree / "pyproject.toml"), "--no-cache"],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _copy(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    ignore = shutil.ignore_patterns("__pycache__")
    for package in ("exporter", "nodesync_sim"):
        shutil.copytree(ROOT / package, tree / package, ignore=ignore, symlinks=True)
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def test_every_contract_has_a_breaking_example() -> None:
    assert set(BREAKS) == set(_contracts())


def test_the_contracts_hold(tmp_path: Path) -> None:
    result = _lint(_copy(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    for name in _contracts().values():
        assert f"{name} KEPT" in result.stdout


@pytest.mark.parametrize("contract", sorted(BREAKS))
def test_a_broken_contract_fails_the_lint(tmp_path: Path, contract: str) -> None:
    tree = _copy(tmp_path)
    module, statement = BREAKS[contract]
    path = tree / module
    path.write_text(path.read_text() + f"\n{statement}  # noqa\n")
    result = _lint(tree)
    assert result.returncode != 0
    name = _contracts()[contract]
    assert f"{name} BROKEN" in result.stdout
    broken = [line for line in result.stdout.splitlines() if line.endswith("BROKEN")]
    assert broken == [f"{name} BROKEN"], broken
