"""``nodesync sim wave``: run a scenario's simulated nodes until interrupted.

Against an in-process test API server (the default: it writes a kubeconfig and prints its path,
and old nodes get their creation times), or a running API server (``--kubeconfig``). The
simulated nodes' agent metrics are served on ``--web.listen-address`` (scrape them with
``honor_labels: true``). A scenario with a real node needs a real containerd and agent: run
it in the local chain (nodesync_sim.demo.chain) instead.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import shutil
import signal
import tempfile
from pathlib import Path

from exporter.kube.api import KubeAPI
from exporter.kube.config import ConfigError, kubeconfig_configuration
from nodesync_sim.fake.apiserver import APIServer
from nodesync_sim.fake.scaleout.scenario import ScenarioError
from nodesync_sim.fake.scaleout.scenario_file import load
from nodesync_sim.fake.scaleout.simulator import Backdate, Simulator, SimulatorError

log = logging.getLogger(__name__)


async def _until_stopped(duration: float) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        if duration > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(duration):
                    await stop.wait()
        else:
            await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)


async def _simulate(
    args: argparse.Namespace, api: KubeAPI, backdate: Backdate | None, label: str
) -> int:
    scenario = load(args.scenario)
    simulator = Simulator(scenario, api, backdate=backdate)
    host, port = args.web_listen_address
    await simulator.start()
    try:
        bound = await simulator.serve_metrics(host, port)
        simulator.start_waves()
        nodes = len(simulator.layout.nodes)
        print(f"scenario {scenario.name}: {nodes} simulated nodes on {label}", flush=True)
        print(f"agent metrics: http://{host}:{bound}/metrics", flush=True)
        await _until_stopped(args.duration)
    finally:
        await simulator.stop()
    return 0


async def _with_apiserver(args: argparse.Namespace) -> int:
    """Run the scenario against an in-process test API server, which can give old nodes their
    creation times."""
    host, port = args.apiserver_listen_address
    scratch = None if args.apiserver_kubeconfig else tempfile.mkdtemp(prefix="nodesync-sim-")
    path = Path(args.apiserver_kubeconfig or f"{scratch}/kubeconfig")
    try:
        async with APIServer(host=host, port=port) as server:
            server.write_kubeconfig(path)
            print(f"serving the Kubernetes API on {server.url}", flush=True)
            print(f"kubeconfig: {path}", flush=True)
            async with KubeAPI(server.aio_configuration()) as api:
                return await _simulate(args, api, server.store.creation_time, server.url)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


async def run(args: argparse.Namespace) -> int:
    if not args.scenario:
        log.error("give a scenario: --scenario FILE (see scenarios/)")
        return 2
    try:
        load(args.scenario)
        if args.kubeconfig:
            configuration = await kubeconfig_configuration(args.kubeconfig)
            async with KubeAPI(configuration) as api:
                return await _simulate(args, api, None, f"the API server of {args.kubeconfig}")
        return await _with_apiserver(args)
    except (ScenarioError, SimulatorError, ConfigError) as exc:
        log.error("cannot run the scenario: %s", exc)
        return 2
