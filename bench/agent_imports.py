"""Benchmark: what each of the agent's imports costs in resident memory and time.

The agent's memory is mostly imported code, so this is where its peak RSS is decided. Stages
are cumulative: each runs in fresh interpreters (``python -c``) that import everything of the
stages before it and then its own modules, and report their resident set (VmRSS), the modules
loaded and the time the stage's imports took. A stage's cost is its median RSS minus the
previous stage's. The last stage is not the agent's: it shows what importing the ``kubernetes``
client package would add on top. Beside the stages, the floor: a fresh interpreter importing
only grpcio, aiohttp and prometheus_client (as bench.agent_floor does).

No root needed, nothing is started but the interpreters:

    .venv/bin/python -m bench.agent_imports [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from dataclasses import dataclass

from bench.harness.processes import child_env
from bench.harness.report import command, machine


@dataclass(frozen=True)
class Stage:
    name: str
    code: str  # Python run after the previous stages' code


STAGES = (
    Stage("interpreter", "pass"),
    Stage("asyncio, ssl", "import asyncio, ssl"),
    Stage("aiohttp (client and web)", "import aiohttp, aiohttp.web"),
    Stage("grpc, protobuf, the CRI messages", "import grpc.aio, exporter.cri.pb.api_pb2"),
    Stage("prometheus_client", "import prometheus_client"),
    Stage(
        "the command line, the agent's parser built",
        "import exporter.cli; exporter.cli.get_parser({}, command='agent')",
    ),
    Stage("agent: runtime side (app, serve)", "import exporter.agent.app, exporter.serve"),
    Stage("agent: API side (api_connection)", "import exporter.agent.api_connection"),
    Stage("not the agent's: the kubernetes package", "import kubernetes"),
)
FLOOR = Stage(
    "floor: grpcio, aiohttp, prometheus_client", "import grpc.aio, aiohttp.web, prometheus_client"
)

_PROBE = """
import sys, time
started = time.perf_counter()
{code}
took = time.perf_counter() - started
rss = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmRSS:'))
print(rss * 1024, len(sys.modules), took)
"""


def _measure(before: list[str], code: str) -> tuple[int, int, float]:
    """RSS (bytes), modules loaded and seconds of ``code`` run after ``before``."""
    program = "\n".join([*before, _PROBE.format(code=code)])
    out = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=child_env(None),
    ).stdout.split()
    return int(out[0]), int(out[1]), float(out[2])


def run(repeat: int, argv: list[str] | None = None) -> dict[str, object]:
    where = machine()
    stages: list[dict[str, object]] = []
    before: list[str] = []
    previous_rss = 0.0
    for stage in STAGES:
        runs = [_measure(before, stage.code) for _ in range(repeat)]
        rss = statistics.median(r[0] for r in runs)
        stages.append(
            {
                "stage": stage.name,
                "rss_mib": rss / 2**20,
                "added_mib": (rss - previous_rss) / 2**20 if before else rss / 2**20,
                "modules": int(statistics.median(r[1] for r in runs)),
                "import_ms": statistics.median(r[2] for r in runs) * 1000,
            }
        )
        before.append(stage.code)
        previous_rss = rss
    floor = [_measure([], FLOOR.code) for _ in range(repeat)]
    return {
        "machine": where,
        "command": command("bench.agent_imports", argv),
        "repeat": repeat,
        "stages": stages,
        "floor": {
            "stage": FLOOR.name,
            "rss_mib": statistics.median(r[0] for r in floor) / 2**20,
            "modules": int(statistics.median(r[1] for r in floor)),
            "import_ms": statistics.median(r[2] for r in floor) * 1000,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=5, help="fresh interpreters per stage")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.repeat, argv), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
