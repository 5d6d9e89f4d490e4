"""Read the project's rule files, rule test files and runbooks for structural checks, and run
promtool and amtool."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nodesync_sim.yamlfile import load_file

ROOT = Path(__file__).resolve().parents[2]
RULES_DIR = ROOT / "rules"
TESTS_DIR = Path(__file__).resolve().parent
RUNBOOKS = ROOT / "docs" / "runbooks.md"
RULES_DOC = ROOT / "docs" / "rules.md"
ALERTMANAGER_CONFIG = ROOT / "deploy" / "alertmanager" / "alertmanager.yml"
THRESHOLDS = RULES_DIR / "thresholds.yml"

ACTIONS = ("rollback_node", "evict_pod", "cleanup_orphans", "none")
SEVERITIES = ("critical", "warning")


def rule_files() -> list[Path]:
    return sorted(RULES_DIR.glob("*.yml"))


def unit_test_files() -> list[Path]:
    return sorted(TESTS_DIR.glob("*_test.yml"))


@dataclass(frozen=True)
class Rule:
    file: Path
    group: str
    data: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.data.get("alert") or self.data.get("record"))

    @property
    def is_alert(self) -> bool:
        return "alert" in self.data

    @property
    def expr(self) -> str:
        return str(self.data["expr"])


def load(path: Path) -> Any:
    return load_file(path)


def groups(path: Path) -> list[dict[str, Any]]:
    data = load(path)
    assert isinstance(data, dict), f"{path}: top level is not a mapping"
    assert set(data) == {"groups"}, f"{path}: top-level keys {sorted(data)}, expected groups"
    result = data["groups"]
    assert isinstance(result, list), f"{path}: groups is not a list"
    return result


def rules(path: Path) -> list[Rule]:
    return [Rule(path, group["name"], rule) for group in groups(path) for rule in group["rules"]]


def all_rules() -> list[Rule]:
    return [rule for path in rule_files() for rule in rules(path)]


def alerts() -> list[Rule]:
    return [rule for rule in all_rules() if rule.is_alert]


def binary(name: str) -> str:
    """The path of a required tool; fails (never skips) the test when it is missing."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name} not found on PATH: install it (Debian: packages 'prometheus' for promtool, "
            f"'prometheus-alertmanager' for amtool and prometheus-alertmanager) to run the tests "
            f"marked 'prometheus'"
        )
    return path


def run(args: list[str], *, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, capture_output=True, text=True, timeout=30, check=False, cwd=cwd or ROOT
    )


def explain(result: subprocess.CompletedProcess[str]) -> str:
    """promtool and amtool write their failure details to stderr: show both streams."""
    return (
        f"{' '.join(result.args)} exited {result.returncode}\n"
        f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
    )
