"""The simulator's commands, ``nodesync demo`` and ``nodesync sim ...``, registered with the
product's CLI through the ``nodesync.commands`` entry point group (pyproject.toml): the product
never names this package.

Registering only declares flags; each command's module (and with it the simulator, the test API
server and the Kubernetes client) is imported when the command runs.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Mapping

from exporter.commandline import CommandSet, add_command
from nodesync_sim.settings import (
    APIServerSettings,
    DemoSettings,
    NodeSettings,
    ScenariosSettings,
    WaveSettings,
)


def register_demo(commands: CommandSet, environ: Mapping[str, str]) -> None:
    add_command(
        commands,
        "demo",
        environ,
        run=_run_demo,
        settings=[DemoSettings],
        help="the whole chain on this machine with a simulated scale-out wave (needs root)",
        description="Starts a test API server, a private containerd with a real agent, the "
        "controller with its webhook and rollback executor, simulated nodes, and a real "
        "Prometheus and Alertmanager with the shipped rules; a wave joins, one node fails and "
        "another crash-loops, and the hook rolls them back. Prints a summary line whenever "
        "something changes; Ctrl-C stops and removes everything.",
    )


def register_sim(commands: CommandSet, environ: Mapping[str, str]) -> None:
    sim = commands.add_parser(
        "sim",
        help="local stand-ins for trying nodesync out and for tests",
        description="Local stand-ins for trying nodesync out without a cluster, and for tests.",
        allow_abbrev=False,
    )
    sim_commands = sim.add_subparsers(dest="sim_command", required=True, metavar="SIM_COMMAND")
    add_command(
        sim_commands,
        "node",
        environ,
        run=_run_node,
        settings=[NodeSettings],
        help="start a private containerd with example pods and an agent watching it",
        description="Starts a private containerd (its own root, state and socket) with a few "
        "example pods (running, completed, failed, OOM-killed), runs the agent against it, "
        "and cleans everything up on Ctrl-C. Needs root, containerd, runc and busybox-static.",
    )
    add_command(
        sim_commands,
        "apiserver",
        environ,
        run=_run_apiserver,
        settings=[APIServerSettings],
        help="serve a test Kubernetes API server (in memory, plain HTTP, bearer token)",
        description="Serves an in-memory Kubernetes API server that speaks the REST and watch "
        "protocol (Nodes, Pods, Leases, Events, Namespaces, PodDisruptionBudgets) for trying "
        "nodesync out without a cluster. Writes a kubeconfig and prints its path.",
    )
    add_command(
        sim_commands,
        "wave",
        environ,
        run=_run_wave,
        settings=[WaveSettings],
        help="simulated nodes joining in waves, as a scenario file describes them",
        description="Adds a scenario's simulated nodes (old nodes, waves, faults) to an "
        "in-process test API server, or to a running one with --kubeconfig: each registers its "
        "Node, renews its Lease, reports conditions and runs its pods as a kubelet would. Serves "
        "the simulated nodes' agent metrics. See docs/simulator.md.",
    )
    add_command(
        sim_commands,
        "scenarios",
        environ,
        run=_run_scenarios,
        settings=[ScenariosSettings],
        help="run the scenario library through the local chain and score nodesync's decisions",
        description="Runs each scenario of the library (scenarios/*.json with an 'expect' key) "
        "through the local chain (test API server, simulated nodes, the controller, a real "
        "Prometheus and Alertmanager with the shipped rules and route) and prints, per "
        "scenario and in total, the precision and recall of the actions nodesync took against "
        "the expected ones and the time from each fault to the first rollback step. Exits 1 "
        "when any scenario is below 1.0. Needs Prometheus and Alertmanager (and root and "
        "containerd for a scenario with a real node). See docs/e2e.md.",
    )


def _run_demo(args: argparse.Namespace) -> int:
    from nodesync_sim.demo.demo import run_demo

    return asyncio.run(run_demo(args, sys.stdout))


def _run_node(args: argparse.Namespace) -> int:
    from nodesync_sim.demo.local_node import run_local_node

    return asyncio.run(run_local_node(args))


def _run_apiserver(args: argparse.Namespace) -> int:
    from nodesync_sim.fake.apiserver import cli

    return asyncio.run(cli.run(args))


def _run_scenarios(args: argparse.Namespace) -> int:
    from nodesync_sim.demo import library

    return asyncio.run(library.run(args, sys.stdout))


def _run_wave(args: argparse.Namespace) -> int:
    from nodesync_sim.fake.scaleout import cli

    return asyncio.run(cli.run(args))
