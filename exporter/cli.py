"""Command line: ``nodesync agent``, ``controller``, ``plan``, and the commands other packages
register (exporter.commandline): parse, build settings, hand over.

A command line that names one of these three commands first builds the parser of that command
alone: the agent, on every node, then imports neither the controller's settings (and the
models their defaults come from) nor the installed packages' entry points
(docs/performance.md, "Agent: the API view"). Any other command line, ``--help`` included,
builds every command.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence

from prometheus_client import disable_created_metrics

from exporter import __version__
from exporter.commandline import (
    ArgumentParser,
    CommandSet,
    HelpFormatter,
    add_command,
    add_version,
    deprecations,
    registered_commands,
)
from exporter.logs import setup_logging
from exporter.settings.declare import build, log_fields

log = logging.getLogger("nodesync")


def get_parser(
    environ: Mapping[str, str] | None = None, *, command: str | None = None
) -> argparse.ArgumentParser:
    """The parser of every command, or of ``command`` alone when it is one of the product's."""
    environ = os.environ if environ is None else environ
    parser = ArgumentParser(
        prog="nodesync",
        description="Node state sync during Kubernetes scale-out: metrics and safe rollbacks.",
        allow_abbrev=False,
        formatter_class=HelpFormatter,
    )
    add_version(parser)
    # Subcommands are parsers of the same class (one-line errors); typed as any parser's.
    commands: CommandSet = parser.add_subparsers(  # type: ignore[assignment]
        dest="command", required=True, metavar="COMMAND"
    )
    if command in OWN_COMMANDS:
        OWN_COMMANDS[command](commands, environ)
        return parser
    for add in OWN_COMMANDS.values():
        add(commands, environ)
    for register in registered_commands():  # e.g. the simulator's demo and sim commands
        register(commands, environ)
    return parser


def _add_agent(commands: CommandSet, environ: Mapping[str, str]) -> None:
    from exporter.agent.settings import AgentSettings

    add_command(
        commands,
        "agent",
        environ,
        run=_run_agent,
        settings=[AgentSettings],
        help="per-node exporter: container runtime, kubelet and host state as metrics",
        description="Per-node exporter (one per node, as a DaemonSet): reads the container runtime "
        "over CRI, kubelet's healthz and pod directories, and the host, every --sync.period, and "
        "serves the last snapshot on /metrics.",
    )


def _add_controller(commands: CommandSet, environ: Mapping[str, str]) -> None:
    from exporter.controller.settings import ControllerSettings, ExecutorSettings, WebhookSettings

    add_command(
        commands,
        "controller",
        environ,
        run=functools.partial(_run_controller, environ=environ),
        settings=[ControllerSettings, WebhookSettings, ExecutorSettings],
        help="cluster view: every Node and node Lease as metrics, grouped into scale-out waves",
        description="Watches all Nodes and the Leases in kube-node-lease and serves node "
        "conditions, lease renewals, scale-out waves and roles on /metrics.",
    )


def _add_plan(commands: CommandSet, environ: Mapping[str, str]) -> None:
    from exporter.controller.settings import PlanSettings

    add_command(
        commands,
        "plan",
        environ,
        run=_run_plan,
        settings=[PlanSettings],
        help="show what the rollback hook would do with an Alertmanager payload, changing nothing",
        description="Reads a webhook payload (file or - for stdin) and the live cluster, and "
        "prints the plan or refusal per alert and the budget it would use. Writes nothing.",
    )


#: The product's commands, in the order ``--help`` lists them, each added by its function.
OWN_COMMANDS: dict[str, Callable[[CommandSet, Mapping[str, str]], None]] = {
    "agent": _add_agent,
    "controller": _add_controller,
    "plan": _add_plan,
}


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = get_parser(os.environ, command=argv[0] if argv else None).parse_args(argv)
    setup_logging(args.log_format, args.log_level)
    for notice in deprecations(args):
        log.warning(notice)
    # ``<name>_created`` series double the exposition and no rule or dashboard uses them.
    disable_created_metrics()  # type: ignore[no-untyped-call]
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        return 130


def _run_plan(args: argparse.Namespace) -> int:
    from exporter.controller import plan_command
    from exporter.controller.settings import PlanSettings

    return asyncio.run(plan_command.run(build(PlanSettings, args)))


def _cannot_start(role: str, error: str) -> int:
    """A misconfiguration found at start: one line (no traceback) naming the flag; exit 2."""
    log.error(f"cannot start the {role}", extra={"error": error})
    return 2


def _run_agent(args: argparse.Namespace) -> int:
    from exporter.agent.app import make_app
    from exporter.agent.settings import AgentSettings
    from exporter.serve import ListenError, serve

    settings = build(AgentSettings, args)
    log.info("starting agent", extra={"version": __version__, **log_fields(settings)})
    try:
        asyncio.run(
            serve(
                make_app(settings),
                settings.listen_host,
                settings.listen_port,
            )
        )
    except ListenError as exc:
        return _cannot_start("agent", f"--web.listen-address {exc}")
    return 0


def _run_controller(args: argparse.Namespace, *, environ: Mapping[str, str]) -> int:
    from exporter.controller.app import make_app
    from exporter.controller.journal import JournalError
    from exporter.controller.settings import ControllerSettings, ExecutorSettings, WebhookSettings
    from exporter.controller.webhook import WebhookConfigError, tls_context
    from exporter.controller.wiring import rollback_extensions
    from exporter.kube.config import ConfigError
    from exporter.serve import ListenError, serve

    settings = build(ControllerSettings, args)
    try:
        executor = build(ExecutorSettings, args)
    except ValueError as exc:
        log.error("cannot configure the rollback executor", extra={"error": str(exc)})
        return 2
    try:
        webhook = WebhookSettings.from_args(args, environ)
        # Without a token there is no webhook, and so nothing to execute: a cluster view only.
        extensions = rollback_extensions(webhook, executor) if webhook.has_token else []
        ssl_context = tls_context(webhook)
    except (ValueError, WebhookConfigError) as exc:
        log.error("cannot configure the webhook", extra={"error": str(exc)})
        return 2
    log.info(
        "starting controller",
        extra={
            "version": __version__,
            **log_fields(settings),
            **log_fields(webhook),
            **log_fields(executor),
        },
    )
    if not webhook.has_token:
        log.warning("no webhook token: serving the cluster view only, no rollbacks")
    try:
        app = make_app(settings, extensions=extensions)
        asyncio.run(
            serve(
                app,
                settings.listen_host,
                settings.listen_port,
                ssl_context=ssl_context,
            )
        )
    except ConfigError as exc:
        return _cannot_start("controller", str(exc))
    except JournalError as exc:
        return _cannot_start(
            "controller",
            f"--journal.path {webhook.journal_path}: {str(exc).removeprefix('journal: ')}",
        )
    except ListenError as exc:
        return _cannot_start("controller", f"--web.listen-address {exc}")
    return 0
