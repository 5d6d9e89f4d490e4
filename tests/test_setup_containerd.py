"""scripts/setup-containerd: the newer containerd releases, looked up without network."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from nodesync_sim.real.containerd import release_of

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "setup-containerd"


def _run(*args: str, cache: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if cache is not None:
        env["NODESYNC_CACHE"] = str(cache)
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=60, env=env, check=False
    )


def test_print_dirs_names_one_unpacked_release_per_series_oldest_first() -> None:
    result = _run("--print-dirs", "--no-fetch")
    assert result.returncode == 0, result.stderr
    dirs = [Path(line) for line in result.stdout.splitlines()]
    assert [d.name.split(".")[0] for d in dirs] == ["1", "2"]
    assert dirs[0].name.startswith("1.7.")
    for directory in dirs:
        binary = directory / "usr" / "bin" / "containerd"
        out = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
        assert release_of(out) == directory.name


def test_no_fetch_on_an_empty_cache_fails_naming_the_script_and_creates_nothing(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "cache"
    result = _run("--print-dirs", "--no-fetch", cache=cache)
    assert result.returncode == 1
    assert result.stdout == ""
    assert "run scripts/setup-containerd" in result.stderr
    assert not cache.exists()


def test_an_unknown_argument_is_refused() -> None:
    result = _run("--print-dir")
    assert result.returncode == 2
    assert "unknown argument: --print-dir" in result.stderr
