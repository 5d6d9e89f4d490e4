"""pytest plugin: the ``containerd`` fixture, a real private containerd per test.

Tests that use it are marked ``@pytest.mark.containerd``. Missing binaries fail the test
(never skip it): a CI run must not silently lose its real-runtime tests.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nodesync_sim.containerd import LocalContainerd, missing_binaries


@pytest.fixture
def containerd() -> Iterator[LocalContainerd]:
    """A started LocalContainerd; after the test it is cleaned up and checked to be gone."""
    missing = missing_binaries()
    if missing:
        pytest.fail(
            "a real containerd is required but these are missing: "
            + ", ".join(missing)
            + " (install the Debian packages containerd, runc and busybox-static; run as root)",
            pytrace=False,
        )
    instance = LocalContainerd()
    try:
        instance.start()
        yield instance
    finally:
        instance.cleanup()
    leftovers = instance.leftovers()
    assert not leftovers, f"LocalContainerd left things behind: {leftovers}"
