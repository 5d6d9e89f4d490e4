"""Shared fixtures. Real-service fixtures live in tests/support and are loaded as plugins."""

from __future__ import annotations

import pytest

pytest_plugins = [
    "tests.support.containerd",
    "tests.support.kubeapi",
    "tests.support.controllers",  # after kubeapi, whose fixtures it uses
    "tests.support.prometheus",
    "tests.support.realcluster",
]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A skipped test is a failed run: real-service tests must run, never vanish silently."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if skipped and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if reporter is not None:
            reporter.write_line(
                f"{len(skipped)} test(s) skipped: every test must run here; failing the run",
                red=True,
            )
