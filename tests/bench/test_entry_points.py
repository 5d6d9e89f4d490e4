"""Every benchmark module imports, and its command line parses: ``--help`` prints the usage and
exits 0. The benchmarks themselves run outside the test suite (docs/performance.md); this keeps
a refactoring from breaking one nobody ran."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import bench

MODULES = sorted(info.name for info in pkgutil.walk_packages(bench.__path__, prefix="bench."))
#: The modules run as ``python -m ...``: the benchmarks and the helper processes they start.
COMMANDS = [m for m in MODULES if callable(getattr(importlib.import_module(m), "main", None))]


def test_the_benchmarks_are_found() -> None:
    assert {"bench.storm", "bench.controller_sync", "bench.agent_sync"} <= set(COMMANDS)
    assert "bench.agent_node_objects" in COMMANDS
    assert "bench.harness.processes" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_every_module_imports(name: str) -> None:
    module = importlib.import_module(name)
    assert inspect.getdoc(module), f"{name} says nothing about what it does"


@pytest.mark.parametrize("name", COMMANDS)
def test_help_parses_the_command_line(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    main = importlib.import_module(name).main
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    usage = capsys.readouterr().out
    assert usage.startswith("usage:"), usage
