"""docs/configuration.md and the CLI agree: every flag documented, every documented flag real."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from exporter.cli import get_parser

DOC = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
ROW = re.compile(r"^\| `(--[^`]+)` \| `([A-Z0-9_]+)` \| `([^`]*)` \|")


def _documented() -> dict[str, dict[str, tuple[str, str]]]:
    sections: dict[str, dict[str, tuple[str, str]]] = {}
    current = None
    for line in DOC.read_text().splitlines():
        if line.startswith("## `nodesync "):
            current = line.strip("# `")
            sections[current] = {}
        elif current and (m := ROW.match(line)):
            sections[current][m.group(1)] = (m.group(2), m.group(3))
    return sections


def _commands() -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, prefix: str) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            found[prefix] = parser
        for action in subs:
            for name, sub in action.choices.items():
                walk(sub, f"{prefix} {name}")

    walk(get_parser({}), "nodesync")
    return found


def _flags(parser: argparse.ArgumentParser) -> dict[str, tuple[str, str]]:
    """flag → (environment variable, default) as shown in --help."""
    flags = {}
    for action in parser._actions:
        long = [o for o in action.option_strings if o.startswith("--") and o != "--help"]
        if long and action.help and "(env " in action.help:
            found = re.search(r"\(env ([A-Z0-9_]+), default '([^']*)'\)", action.help)
            assert found, action.help
            flags[long[0]] = (found.group(1), found.group(2))
    return flags


COMMANDS = _commands()
# Variables with a meaning of their own outside nodesync (the downward API's usual name).
CONVENTIONAL = {"NODE_NAME"}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_flag_is_documented_with_its_variable_and_default(command: str) -> None:
    documented = _documented()
    assert command in documented, f"docs/configuration.md has no section for `{command}`"
    flags = _flags(COMMANDS[command])
    assert set(documented[command]) == set(flags)
    for flag, (env, default) in flags.items():
        assert documented[command][flag] == (env, default), flag
        assert env.startswith("NODESYNC_") or env in CONVENTIONAL, env


def test_no_section_for_a_command_that_does_not_exist() -> None:
    assert set(_documented()) <= set(COMMANDS)
