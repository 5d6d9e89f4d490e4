"""Every key of the product's aiohttp applications is defined in a keys module: the agent's,
the controller's, the serving layer's; and the simulator's test API server keeps its own the same
way. What an application holds is read in one place, and a handler that reaches for something
the app holds imports it from there."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The trees whose aiohttp applications keep their keys in keys modules.
TREES = (ROOT / "exporter", ROOT / "nodesync_sim")
KEYS_MODULES = {
    "exporter/agent/keys.py",
    "exporter/controller/keys.py",
    "exporter/serve/keys.py",
    "nodesync_sim/fake/apiserver/keys.py",
}


def _app_keys(source: str) -> list[int]:
    """The lines of ``source`` that call ``web.AppKey(...)`` or ``AppKey(...)``."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            called = node.func
            name = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", "")
            if name == "AppKey":
                lines.append(node.lineno)
    return lines


def test_no_app_key_is_defined_outside_the_keys_modules() -> None:
    outside = {
        f"{path.relative_to(ROOT)}:{line}"
        for tree in TREES
        for path in tree.rglob("*.py")
        if str(path.relative_to(ROOT)) not in KEYS_MODULES
        for line in _app_keys(path.read_text())
    }
    assert not outside, f"AppKeys defined outside {sorted(KEYS_MODULES)}: {sorted(outside)}"


def test_each_keys_module_defines_keys() -> None:
    for module in KEYS_MODULES:
        assert _app_keys((ROOT / module).read_text()), f"{module} defines no AppKey"


def test_the_check_finds_a_key_defined_elsewhere() -> None:
    assert _app_keys('from aiohttp import web\nX = web.AppKey("x", int)\n') == [2]
    assert _app_keys('from aiohttp.web import AppKey\nX = AppKey("x")\n') == [2]
    assert _app_keys('X = "web.AppKey(" \n') == []
