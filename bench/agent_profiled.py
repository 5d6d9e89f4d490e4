"""``nodesync agent`` with its event loop's thread profiled (cProfile) over a window.

Runs the agent's command line in this process; SIGUSR2 starts the profiler on the main thread
(the event loop: everything of the agent but grpc's own threads), SIGUSR1 stops it and writes
to OUT (JSON) the ``--top`` functions by their own time and by their cumulative time.
bench.agent_node_objects starts the agent this way with ``--cprofile`` and profiles its CPU
window (the profiler's own cost is in the figures: the shares matter, not the sums):

    .venv/bin/python -m bench.agent_profiled OUT agent --node.name ... (the agent's flags)
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import signal
from types import FrameType

TOP = 30


def _where(function: tuple[str, int, str]) -> str:
    filename, line, name = function
    for marker in ("site-packages/", "/exporter/", "/lib/python3"):
        if marker in filename:
            filename = filename.split(marker, 1)[1]
            break
    return f"{filename}:{line}({name})"


def report(profile: cProfile.Profile) -> dict[str, object]:
    stats = pstats.Stats(profile)
    table = stats.stats  # type: ignore[attr-defined]
    rows = [
        {"function": _where(f), "calls": nc, "own_s": tt, "cumulative_s": ct}
        for f, (_, nc, tt, ct, _) in table.items()
    ]
    return {
        "total_s": stats.total_tt,  # type: ignore[attr-defined]
        "by_own_time": sorted(rows, key=lambda r: -float(r["own_s"]))[:TOP],
        "by_cumulative_time": sorted(rows, key=lambda r: -float(r["cumulative_s"]))[:TOP],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("out", help="where SIGUSR1 writes the profile (JSON)")
    parser.add_argument("nodesync", nargs=argparse.REMAINDER, help="agent and its flags")
    args = parser.parse_args(argv)
    profile = cProfile.Profile()

    def start(_signum: int, _frame: FrameType | None) -> None:
        profile.enable()

    def stop(_signum: int, _frame: FrameType | None) -> None:
        profile.disable()
        with open(args.out, "w") as file:
            json.dump(report(profile), file, indent=2)

    signal.signal(signal.SIGUSR2, start)
    signal.signal(signal.SIGUSR1, stop)
    from exporter.cli import main as nodesync

    return nodesync(args.nodesync)


if __name__ == "__main__":
    raise SystemExit(main())
