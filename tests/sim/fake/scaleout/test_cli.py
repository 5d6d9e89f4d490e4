"""``nodesync sim wave``: runs a scenario against its own test API server and serves the agent
metrics, stops on time and leaves nothing; refuses what it cannot run with exit status 2."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

import aiohttp
import pytest

from exporter.cli import get_parser
from exporter.kube.api import KubeAPI
from exporter.kube.config import kubeconfig_configuration
from exporter.kube.resources import NODES
from nodesync_sim.fake.apiserver import APIServer
from nodesync_sim.fake.scaleout import cli as sim_wave
from tests.metrics.exposition import series
from tests.sim.fake.scaleout.support import doc
from tests.support.wait import until_async

SCENARIO = doc(
    old_nodes={"count": 1, "age_seconds": 3600},
    waves=[{"name": "w", "count": 2, "pods_per_node": 1}],
)


async def _line(stream: asyncio.StreamReader, prefix: str) -> str:
    while True:
        raw = await asyncio.wait_for(stream.readline(), 20)
        assert raw, f"the command ended before printing {prefix!r}"
        line = raw.decode().strip()
        if line.startswith(prefix):
            return line.removeprefix(prefix).strip()


async def test_the_command_runs_the_scenario_serves_metrics_and_stops(tmp_path: Path) -> None:
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(SCENARIO))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "exporter",
        "sim",
        "wave",
        "--scenario",
        str(path),
        "--apiserver.listen-address",
        "127.0.0.1:0",
        "--web.listen-address",
        "127.0.0.1:0",
        "--duration",
        "6s",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        assert proc.stdout is not None
        kubeconfig = Path(await _line(proc.stdout, "kubeconfig:"))
        metrics = await _line(proc.stdout, "agent metrics:")
        api = KubeAPI(await kubeconfig_configuration(str(kubeconfig)))
        try:

            async def registered() -> set[str] | None:
                names = {n["metadata"]["name"] for n in (await api.list(NODES)).items}
                return names if len(names) == 3 else None

            assert await until_async(registered, timeout=15, what="the nodes") == {
                "old-000",
                "w-000",
                "w-001",
            }
        finally:
            await api.close()

        async def served() -> set[str] | None:
            async with aiohttp.ClientSession() as session, session.get(metrics) as response:
                text = await response.text()
            nodes = {dict(k)["node"] for k in series(text, "nodesync_cri_up")}
            return nodes if len(nodes) == 3 else None

        assert await until_async(served, timeout=15, what="every node's metrics") == {
            "old-000",
            "w-000",
            "w-001",
        }
        assert await asyncio.wait_for(proc.wait(), 20) == 0
        assert not kubeconfig.parent.exists()  # its temporary kubeconfig is removed
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def _args(*argv: str) -> argparse.Namespace:
    return get_parser({}).parse_args(["sim", "wave", *argv])


async def test_what_it_cannot_run_exits_2(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert await sim_wave.run(_args()) == 2
    assert "give a scenario" in caplog.text
    assert await sim_wave.run(_args("--scenario", str(tmp_path / "none.json"))) == 2
    assert "cannot read" in caplog.text

    real = tmp_path / "real.json"
    real.write_text(
        json.dumps(doc(waves=[{"name": "w", "count": 1}], real_node={"name": "r", "wave": "w"}))
    )
    listen = ("--apiserver.listen-address", "127.0.0.1:0", "--web.listen-address", "127.0.0.1:0")
    assert await sim_wave.run(_args("--scenario", str(real), *listen)) == 2
    assert "needs a real runtime" in caplog.text

    # Against a running API server old nodes cannot be given their creation times.
    old = tmp_path / "old.json"
    old.write_text(json.dumps(SCENARIO))
    async with APIServer() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        args = _args("--scenario", str(old), "--kubeconfig", str(kubeconfig), *listen)
        assert await sim_wave.run(args) == 2
    assert "created 3600 s ago" in caplog.text
