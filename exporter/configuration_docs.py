"""docs/configuration.md's tables, generated from the settings' declarations.

Each command's section holds a table between two markers; everything else in the file is prose
kept by hand. ``scripts/gen-configuration`` rewrites the tables (``--check`` only says whether
they are current; the test suite runs that check).

    <!-- settings: nodesync agent -->
    | flag | environment variable | default | meaning |
    ...
    <!-- end of settings -->
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

from exporter.commandline import BooleanAction, SettingAction

_BLOCK = re.compile(r"(?ms)^<!-- settings: (?P<command>[^>]+?) -->\n.*?^<!-- end of settings -->$")
_HEADER = "| flag | environment variable | default | meaning |\n|---|---|---|---|"


def commands(
    parser: argparse.ArgumentParser, prefix: str = "nodesync"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command of the command line (``nodesync agent``, ``nodesync sim wave`` ...)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield prefix, parser
    for action in subs:
        for name, sub in action.choices.items():
            yield from commands(sub, f"{prefix} {name}")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(parser: argparse.ArgumentParser) -> str:
    rows = [_HEADER]
    for action in parser._actions:
        if not isinstance(action, SettingAction) or action.help == argparse.SUPPRESS:
            continue
        s = action.setting
        flags = [s.flag]
        if isinstance(action, BooleanAction):
            flags.append("--no-" + s.flag.removeprefix("--"))
        meaning = s.documentation
        if s.aliases:
            former = ", ".join(f"`{a}`" for a in s.aliases)
            meaning += f" (formerly {former}, deprecated)"
        rows.append(
            f"| {', '.join(f'`{f}`' for f in flags)} | `{s.environment}` | `{s.default}` "
            f"| {_cell(meaning)} |"
        )
    return "\n".join(rows)


def render(text: str, parser: argparse.ArgumentParser) -> str:
    """``text`` with every marked table replaced by the one the command line gives. A marker
    for a command that does not exist, and a command without a marker, are errors."""
    tables = {name: table(sub) for name, sub in commands(parser)}
    seen: set[str] = set()

    def replace(match: re.Match[str]) -> str:
        command = match.group("command")
        if command not in tables:
            raise ValueError(f"docs/configuration.md has a table for {command!r}: no such command")
        seen.add(command)
        return f"<!-- settings: {command} -->\n{tables[command]}\n<!-- end of settings -->"

    result = _BLOCK.sub(replace, text)
    missing = sorted(set(tables) - seen)
    if missing:
        raise ValueError(f"docs/configuration.md has no table for {', '.join(missing)}")
    return result
