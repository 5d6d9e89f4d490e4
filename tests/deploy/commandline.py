"""A shipped container's command line and environment, parsed by nodesync's own CLI."""

from __future__ import annotations

import argparse
import re

from exporter.cli import get_parser
from exporter.controller.settings import TOKEN_ENV
from tests.deploy.manifests import Obj, env

#: Values for the variables a pod gets from elsewhere (the downward API, a Secret).
FROM_ELSEWHERE = {
    "NODE_NAME": "node-a",
    "POD_UID": "6f1c1f4e-0b7a-4a57-9d0e-3c2a1b0d9e8f",
    "NODESYNC_LEADER_ELECTION_IDENTITY": "nodesync-controller-0",
    TOKEN_ENV: "a-token",
}


def known_env(command: argparse.ArgumentParser) -> set[str]:
    """The variables a command reads: each flag's (named in its help), and the token."""
    found = {
        match.group(1)
        for action in command._actions
        if action.help and (match := re.search(r"\(env (\S+), default", action.help))
    }
    return found | {TOKEN_ENV}


def subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: argparse.ArgumentParser = action.choices[name]
            return found
    raise AssertionError(f"no command {name}")


def environment(spec: Obj) -> dict[str, str]:
    return {
        name: var["value"] if "value" in var else FROM_ELSEWHERE[name]
        for name, var in env(spec).items()
    }


def parse_container(spec: Obj) -> tuple[argparse.Namespace, set[str]]:
    """Parse the container's command line with the container's environment, as nodesync would
    at start; also return the NODESYNC_ variables the command does not read."""
    environ = environment(spec)
    parser = get_parser(environ)
    try:
        args = parser.parse_args(spec["args"])
    except SystemExit as exc:
        raise AssertionError(f"nodesync refuses {spec['args']} with {environ}") from exc
    command = subparser(parser, spec["args"][0])
    unknown = {n for n in environ if n.startswith("NODESYNC_") and n not in known_env(command)}
    return args, unknown
