"""What every benchmark's result says about where and how it ran."""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Sequence

import psutil


def machine() -> dict[str, object]:
    """CPUs, memory, Python, the platform and the load average now (other processes' work
    is the main source of noise in the figures)."""
    return {
        "cpus": os.cpu_count(),
        "memory_bytes": psutil.virtual_memory().total,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_1m_at_start": os.getloadavg()[0],
    }


def command(module: str, argv: Sequence[str] | None) -> str:
    """The command line that reproduces a run, as docs/performance.md writes it."""
    args = sys.argv[1:] if argv is None else list(argv)
    return " ".join([".venv/bin/python", "-m", module, *args])
