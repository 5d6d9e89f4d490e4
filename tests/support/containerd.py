"""pytest plugin: the ``containerd`` fixture, a real private containerd per test.

Tests that use it are marked ``@pytest.mark.containerd``. Missing binaries fail the test
(never skip it): a CI run must not silently lose its real-runtime tests.

The fixture runs the machine's containerd (Debian 12: 1.6). Tests marked
``@pytest.mark.containerd_releases`` run once per release instead: the machine's, and 1.7.x and
2.x unpacked by scripts/setup-containerd (ids such as ``containerd-1.7.24``); a release that is
not unpacked fails its tests with one line naming the script.
"""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nodesync_sim.real.containerd import LocalContainerd, missing_binaries, release_of

REPO_ROOT = Path(__file__).resolve().parents[2]
SETUP_SCRIPT = REPO_ROOT / "scripts" / "setup-containerd"
NEWER_SERIES = ("1.7", "2")
"""The release series scripts/setup-containerd unpacks, oldest first."""


@dataclass(frozen=True)
class Release:
    """One containerd release the tests run against."""

    name: str
    """``1.6.20``, ``1.7.24``, ...; the series alone when the release is not there."""
    bin_dir: str | None
    """Where its binaries are; None: the machine's PATH."""
    problem: str = ""
    """Why it cannot run here; empty when it can."""

    @property
    def id(self) -> str:
        return f"containerd-{self.name}"


def _machine_release() -> Release:
    try:
        out = subprocess.run(
            ["containerd", "--version"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
        return Release(release_of(out), None)
    except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
        return Release("system", None, f"the machine's containerd does not run: {exc}")


def _newer_releases() -> list[Release]:
    result = subprocess.run(
        [str(SETUP_SCRIPT), "--print-dirs", "--no-fetch"],
        capture_output=True,
        text=True,
        check=False,
    )
    dirs = result.stdout.split()
    if result.returncode != 0 or len(dirs) != len(NEWER_SERIES):
        reason = (result.stderr.strip().splitlines() or ["no output"])[-1]
        reason = reason.removeprefix("setup-containerd: ")
        return [Release(f"{series}.x", None, reason) for series in NEWER_SERIES]
    return [Release(Path(d).name, str(Path(d) / "usr" / "bin")) for d in dirs]


@functools.cache
def releases() -> tuple[Release, ...]:
    """The machine's containerd, then each newer release, oldest first."""
    return (_machine_release(), *_newer_releases())


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "containerd_release" in metafunc.fixturenames and metafunc.definition.get_closest_marker(
        "containerd_releases"
    ):
        found = releases()
        metafunc.parametrize("containerd_release", found, ids=[r.id for r in found], indirect=True)


@pytest.fixture
def containerd_release(request: pytest.FixtureRequest) -> Release:
    """The release the test runs against: the machine's, or each one under
    ``@pytest.mark.containerd_releases``. Fails the test when that release cannot run."""
    param = getattr(request, "param", None)
    release = param if isinstance(param, Release) else releases()[0]
    if release.problem:
        pytest.fail(f"containerd {release.name}: {release.problem}", pytrace=False)
    missing = missing_binaries(release.bin_dir)
    if missing:
        pytest.fail(
            "a real containerd is required but these are missing: "
            + ", ".join(missing)
            + " (install the Debian packages containerd, runc and busybox-static; run as root;"
            + " run scripts/setup-containerd for the newer releases)",
            pytrace=False,
        )
    return release


@pytest.fixture
def containerd(containerd_release: Release) -> Iterator[LocalContainerd]:
    """A started LocalContainerd; after the test it is cleaned up and checked to be gone."""
    instance = LocalContainerd(bin_dir=containerd_release.bin_dir)
    try:
        instance.start()
        yield instance
    finally:
        instance.cleanup()
    leftovers = instance.leftovers()
    assert not leftovers, f"LocalContainerd left things behind: {leftovers}"
