"""pytest plugin: real Prometheus, Alertmanager and promtool for tests.

Fixtures:

- ``promtool``: the path of promtool.
- ``prometheus_factory``: ``make(scrape_configs, rule_files=(), **kwargs) -> LocalPrometheus``,
  started (keyword arguments as :class:`~nodesync_sim.real.prometheus.LocalPrometheus`).
- ``alertmanager_factory``: ``make(config_yaml) -> LocalAlertmanager``, started.

Everything a factory started is stopped by PID and its directory removed after the test, then
checked to be gone. Tests that use them are marked ``@pytest.mark.prometheus``. Missing
binaries fail the test (never skip it): a CI run must not silently lose its real-Prometheus
tests. Remember that Prometheus scrapes for the first time ~5-6 s after it started: wait for
``up == 1`` (``wait_for_targets``), and raise the test's timeout if it needs more than 60 s.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from nodesync_sim.real.prometheus import LocalAlertmanager, LocalPrometheus, missing_binaries

PrometheusFactory = Callable[..., LocalPrometheus]
AlertmanagerFactory = Callable[[str], LocalAlertmanager]


def require_prometheus_binaries() -> None:
    """Fail the running test (never skip it) when Prometheus or Alertmanager is missing."""
    missing = missing_binaries()
    if missing:
        pytest.fail(
            "a real Prometheus and Alertmanager are required but these are missing: "
            + ", ".join(missing)
            + " (apt-get install --no-install-recommends prometheus prometheus-alertmanager)",
            pytrace=False,
        )


def require_promtool() -> str:
    """The path of promtool; fails the running test when it is not installed."""
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(
            "promtool not found on PATH: install the Debian package prometheus",
            pytrace=False,
        )
    return path


@pytest.fixture
def promtool() -> str:
    return require_promtool()


def _teardown(instances: Sequence[LocalPrometheus | LocalAlertmanager]) -> None:
    for instance in instances:
        instance.cleanup()
    leftovers = [item for instance in instances for item in instance.leftovers()]
    assert not leftovers, f"local Prometheus/Alertmanager left things behind: {leftovers}"


@pytest.fixture
def prometheus_factory() -> Iterator[PrometheusFactory]:
    """Start LocalPrometheus instances; all are cleaned up and checked after the test."""
    require_prometheus_binaries()
    started: list[LocalPrometheus] = []

    def make(
        scrape_configs: Sequence[dict[str, Any]],
        rule_files: Sequence[str | Path] = (),
        **kwargs: Any,
    ) -> LocalPrometheus:
        instance = LocalPrometheus(scrape_configs, rule_files, **kwargs)
        started.append(instance)
        instance.start()
        return instance

    try:
        yield make
    finally:
        _teardown(started)


@pytest.fixture
def alertmanager_factory() -> Iterator[AlertmanagerFactory]:
    """Start LocalAlertmanager instances; all are cleaned up and checked after the test."""
    require_prometheus_binaries()
    started: list[LocalAlertmanager] = []

    def make(config_yaml: str) -> LocalAlertmanager:
        instance = LocalAlertmanager(config_yaml)
        started.append(instance)
        instance.start()
        return instance

    try:
        yield make
    finally:
        _teardown(started)
