"""Run the real ``promtool check metrics`` on an exposition."""

from __future__ import annotations

import shutil
import subprocess

import pytest

#: The process_* families both roles serve (the text parser's names: counters without _total).
PROCESS_FAMILIES = frozenset(
    {
        "process_cpu_seconds",
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
    }
)


def check_metrics(exposition: str) -> None:
    """Fail the test unless promtool accepts the exposition without findings."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail(
            "promtool not found on PATH: install Prometheus' promtool (Debian: the 'prometheus' "
            "package) to run tests marked 'prometheus'"
        )
    result = subprocess.run(
        [promtool, "check", "metrics"],
        input=exposition,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, (
        f"promtool check metrics rc={result.returncode}\n{result.stdout}{result.stderr}\n"
        f"--- exposition ---\n{exposition}"
    )
