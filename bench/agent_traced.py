"""``nodesync agent`` with tracemalloc on: what of the agent's memory Python allocated, and where.

Runs the agent's command line in this process with tracemalloc tracing from the first import
on; on SIGUSR1 it writes to OUT (JSON) the memory Python's allocators hold now and at their
peak, and the ``--top`` places holding the most, grouped: a package of site-packages, a
module of nodesync, a module of the standard library, or ``imports`` (the code objects and
constants the importer unmarshalled). What the C extensions allocate themselves (grpc's core,
OpenSSL, protobuf's upb, aiohttp's parsers) and glibc's arenas are not traced: the gap between
these figures and the process' anonymous memory is theirs. bench.agent_node_objects starts the
agent this way with ``--tracemalloc``:

    .venv/bin/python -m bench.agent_traced OUT agent --node.name ... (the agent's flags)
"""

from __future__ import annotations

import argparse
import json
import signal
import sysconfig
import tracemalloc
from collections import Counter
from types import FrameType

TOP = 25
STDLIB = sysconfig.get_path("stdlib")


def place(filename: str) -> str:
    """The group an allocation's file belongs to."""
    if filename.startswith("<frozen"):
        return "imports (code objects, constants)"
    if "site-packages/" in filename:
        return filename.split("site-packages/", 1)[1].split("/", 1)[0]
    if "/exporter/" in filename:
        return "exporter/" + filename.split("/exporter/", 1)[1]
    if filename.startswith(STDLIB):
        return "stdlib: " + filename[len(STDLIB) :].lstrip("/")
    return filename


def report() -> dict[str, object]:
    snapshot = tracemalloc.take_snapshot()
    grouped: Counter[str] = Counter()
    blocks: Counter[str] = Counter()
    for stat in snapshot.statistics("filename"):
        group = place(stat.traceback[0].filename)
        grouped[group] += stat.size
        blocks[group] += stat.count
    current, peak = tracemalloc.get_traced_memory()
    return {
        "traced_kib": current / 1024,
        "traced_peak_kib": peak / 1024,
        "tracemalloc_overhead_kib": tracemalloc.get_tracemalloc_memory() / 1024,
        "top": [
            {"place": group, "kib": size / 1024, "blocks": blocks[group]}
            for group, size in grouped.most_common(TOP)
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("out", help="where SIGUSR1 writes the allocations (JSON)")
    parser.add_argument("nodesync", nargs=argparse.REMAINDER, help="agent and its flags")
    args = parser.parse_args(argv)
    out = args.out
    tracemalloc.start(1)

    def dump(_signum: int, _frame: FrameType | None) -> None:
        with open(out, "w") as file:
            json.dump(report(), file, indent=2)

    signal.signal(signal.SIGUSR1, dump)
    from exporter.cli import main as nodesync

    return nodesync(args.nodesync)


if __name__ == "__main__":
    raise SystemExit(main())
