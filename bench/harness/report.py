"""What every benchmark's result says about where and how it ran."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

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


def run_main(
    doc: str | None,
    argv: list[str] | None,
    options: Callable[[argparse.ArgumentParser], object],
    run: Callable[[argparse.Namespace], Coroutine[Any, Any, dict[str, Any]]],
) -> int:
    """A benchmark's ``main``: its options (``options`` adds them to a parser described by the
    first paragraph of ``doc``), one ``run`` with them, the result printed as JSON."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0] if doc else None)
    options(parser)
    result = asyncio.run(run(parser.parse_args(argv)))
    print(json.dumps(result, indent=2))
    return 0
