"""Command line: ``nodesync agent``, ``nodesync sim ...``: parse, build settings, hand over."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Mapping, Sequence

from prometheus_client import disable_created_metrics

from exporter import __version__
from exporter.controller import plan_flags
from exporter.controller.hook_settings import HookSettings, add_hook_flags
from exporter.controller.settings import ControllerSettings, add_controller_flags
from exporter.controller.webhook_settings import WebhookSettings, add_webhook_flags
from exporter.logs import setup_logging
from exporter.settings import (
    AgentSettings,
    FlagAdder,
    add_agent_flags,
    add_common_flags,
    listen_address,
    positive_duration,
)

log = logging.getLogger("nodesync")


def get_parser(environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    environ = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog="nodesync",
        description="Node state sync during Kubernetes scale-out: metrics and safe rollbacks.",
    )
    parser.add_argument("--version", action="version", version=f"nodesync {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    agent = commands.add_parser(
        "agent",
        help="per-node exporter: container runtime, kubelet and host state as metrics",
        description="Per-node exporter (one per node, as a DaemonSet): reads the container runtime "
        "over CRI, kubelet's healthz and pod directories, and the host, every --sync-period, and "
        "serves the last snapshot on /metrics.",
    )
    add = FlagAdder(agent, environ)
    add_agent_flags(add)
    add_common_flags(add)

    controller = commands.add_parser(
        "controller",
        help="cluster view: every Node and node Lease as metrics, grouped into scale-out waves",
        description="Watches all Nodes and the Leases in kube-node-lease and serves node "
        "conditions, lease renewals, scale-out waves and roles on /metrics.",
    )
    add = FlagAdder(controller, environ)
    add_controller_flags(add)
    add_webhook_flags(add)
    add_hook_flags(add)
    add_common_flags(add)

    plan = commands.add_parser(
        "plan",
        help="show what the rollback hook would do with an Alertmanager payload, changing nothing",
        description="Reads a webhook payload (file or - for stdin) and the live cluster, and "
        "prints the plan or refusal per alert and the budget it would use. Writes nothing.",
    )
    add = FlagAdder(plan, environ)
    plan_flags.add_arguments(add)
    add_common_flags(add)

    demo = commands.add_parser(
        "demo",
        help="the whole chain on this machine with a simulated scale-out wave (needs root)",
        description="Starts a test API server, a private containerd with a real agent, the "
        "controller with its webhook and rollback executor, simulated nodes, and a real "
        "Prometheus and Alertmanager with the shipped rules; a wave joins, one node fails and "
        "another crash-loops, and the hook rolls them back. Prints a summary line whenever "
        "something changes; Ctrl-C stops and removes everything.",
    )
    add = FlagAdder(demo, environ)
    from exporter.sim import demo_flags

    demo_flags.add_arguments(add)
    add_common_flags(add)

    sim = commands.add_parser("sim", help="local stand-ins for trying nodesync out and for tests")
    sim_commands = sim.add_subparsers(dest="sim_command", required=True, metavar="SIM_COMMAND")
    node = sim_commands.add_parser(
        "node",
        help="start a private containerd with example pods and an agent watching it",
        description="Starts a private containerd (its own root, state and socket) with a few "
        "example pods (running, completed, failed, OOM-killed), runs the agent against it, "
        "and cleans everything up on Ctrl-C. Needs root, containerd, runc and busybox-static.",
    )
    add = FlagAdder(node, environ)
    add.add(
        "--web.listen-address",
        default="127.0.0.1:9617",
        type=listen_address,
        help="address of the agent's /metrics",
    )
    add.add("--sync-period", default="5s", type=positive_duration, help="agent sync period")
    add_common_flags(add)

    apiserver = sim_commands.add_parser(
        "apiserver",
        help="serve a test Kubernetes API server (in memory, plain HTTP, bearer token)",
        description="Serves an in-memory Kubernetes API server that speaks the REST and watch "
        "protocol (Nodes, Pods, Leases, Events, Namespaces, PodDisruptionBudgets) for trying "
        "nodesync out without a cluster. Writes a kubeconfig and prints its path.",
    )
    add = FlagAdder(apiserver, environ)
    from exporter.sim.apiserver import cli as sim_apiserver  # only the sim commands load sim

    sim_apiserver.add_arguments(add)
    add_common_flags(add)

    wave = sim_commands.add_parser(
        "wave",
        help="simulated nodes joining in waves, as a scenario file describes them",
        description="Adds a scenario's simulated nodes (old nodes, waves, faults) to an "
        "in-process test API server, or to a running one with --kubeconfig: each registers its "
        "Node, renews its Lease, reports conditions and runs its pods as a kubelet would. Serves "
        "the simulated nodes' agent metrics. See docs/simulator.md.",
    )
    add = FlagAdder(wave, environ)
    from exporter.sim.scaleout import flags as sim_wave_flags

    sim_wave_flags.add_arguments(add)
    add_common_flags(add)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    environ = os.environ
    args = get_parser(environ).parse_args(argv)
    setup_logging(args.log_format, args.log_level)
    # ``<name>_created`` series double the exposition and no rule or dashboard uses them.
    disable_created_metrics()  # type: ignore[no-untyped-call]
    try:
        if args.command == "agent":
            return _run_agent(AgentSettings.from_args(args))
        if args.command == "controller":
            return _run_controller(args, environ)
        if args.command == "plan":
            from exporter.controller import plan_cli

            return asyncio.run(plan_cli.run(args))
        if args.command == "demo":
            from exporter.sim.demo import run_demo

            return asyncio.run(run_demo(args, sys.stdout))
        if args.command == "sim" and args.sim_command == "node":
            from exporter.sim.local_node import run_local_node

            return asyncio.run(run_local_node(args))
        if args.command == "sim" and args.sim_command == "apiserver":
            from exporter.sim.apiserver import cli as sim_apiserver

            return asyncio.run(sim_apiserver.run(args))
        if args.command == "sim" and args.sim_command == "wave":
            from exporter.sim.scaleout import cli as sim_wave

            return asyncio.run(sim_wave.run(args))
    except KeyboardInterrupt:
        return 130
    print(f"unknown command {args.command!r}", file=sys.stderr)
    return 2


def _run_agent(settings: AgentSettings) -> int:
    from exporter.agent.app import make_app
    from exporter.serve import serve

    log.info("starting agent", extra={"version": __version__, **settings.as_log_fields()})
    asyncio.run(serve(make_app(settings), settings.listen_host, settings.listen_port))
    return 0


def _run_controller(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    from exporter.controller.app import make_app
    from exporter.controller.executor import executor_extension
    from exporter.controller.journal import JournalError
    from exporter.controller.webhook import WebhookConfigError, tls_context, webhook_extension
    from exporter.kube.config import ConfigError
    from exporter.serve import serve

    settings = ControllerSettings.from_args(args)
    hook = HookSettings.from_args(args)
    try:
        webhook = WebhookSettings.from_args(args, environ)
        # Without a token there is no webhook, and so nothing to execute: a cluster view only.
        extensions = (
            [webhook_extension(webhook), executor_extension(hook)] if webhook.has_token else []
        )
        ssl_context = tls_context(webhook)
    except (ValueError, WebhookConfigError) as exc:
        log.error("cannot configure the webhook", extra={"error": str(exc)})
        return 2
    log.info(
        "starting controller",
        extra={
            "version": __version__,
            **settings.as_log_fields(),
            **webhook.as_log_fields(),
            **hook.as_log_fields(),
        },
    )
    if not webhook.has_token:
        log.warning("no webhook token: serving the cluster view only, no rollbacks")
    try:
        app = make_app(settings, extensions=extensions)
        asyncio.run(serve(app, settings.listen_host, settings.listen_port, ssl_context=ssl_context))
    except (ConfigError, JournalError) as exc:
        log.error("cannot start the controller", extra={"error": str(exc)})
        return 2
    return 0
