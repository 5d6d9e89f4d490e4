"""README.md and docs/*.md speak of the CLI nodesync has: every ``nodesync <command>`` they show
exists, and every ``--flag`` shown with one is a flag of that command.

Where a command and its flags are "shown together":

- in a shell code block or an inline code span: the flags that follow ``nodesync <command>``
  in the same shell command (line continuations joined; pipes and ``&&`` end a command);
- in a paragraph or list item: the flags written as inline code anywhere in it, when it names
  commands in inline code (each flag must belong to one of them);
- in a table under a heading that names a command: the flags in the rows' first column (and
  commands in a table's inline code are checked like any other).

A word is the ``nodesync`` program only in a command's first position (``kubectl -n nodesync``
is a namespace); names like ``nodesync.io/rollback`` are not the program.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from exporter.cli import get_parser

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_BLOCKS = frozenset({"", "sh", "bash", "shell", "console"})
SEPARATORS = re.compile(r"\|\||&&|[|;]|\$\(|`")
PREFIXES = frozenset({"exec", "sudo", "time", "env", "$", "command"})

Command = tuple[str, ...]


def _commands() -> dict[Command, set[str]]:
    """Every command path ("agent", "sim node", ...; () is nodesync itself) and its flags."""
    found: dict[Command, set[str]] = {}

    def walk(parser: argparse.ArgumentParser, path: Command) -> None:
        found[path] = set(parser._option_string_actions)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, (*path, name))

    walk(get_parser({}), ())
    return found


COMMANDS = _commands()


@dataclass(frozen=True)
class Mention:
    document: str
    line: int
    command: Command
    flags: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.document}:{self.line}: nodesync {' '.join(self.command)}"


def _is_program(word: str) -> bool:
    return word == "nodesync" or word.endswith("/nodesync")


def shell_mentions(text: str, document: str, line: int) -> list[Mention]:
    """``nodesync ...`` in command position in one shell line, with the flags that follow."""
    mentions = []
    for part in SEPARATORS.split(text):
        words = part.split()
        while words and (words[0] in PREFIXES or re.match(r"^[A-Z_][A-Z0-9_]*=", words[0])):
            words.pop(0)
        if not words or not _is_program(words[0]):
            continue
        command: Command = ()
        rest = words[1:]
        while rest and not rest[0].startswith("-") and (*command, rest[0]) in COMMANDS:
            command = (*command, rest[0])
            rest = rest[1:]
        if (
            rest
            and not rest[0].startswith("-")
            and any(c[: len(command)] == command and len(c) > len(command) for c in COMMANDS)
        ):
            # a word where a (sub)command belongs that is none: an unknown command
            command = (*command, rest[0])
        flags = tuple(w.split("=", 1)[0] for w in rest if w.startswith("--"))
        mentions.append(Mention(document, line, command, flags))
    return mentions


def _code_blocks(lines: list[str]) -> tuple[list[tuple[int, str]], set[int]]:
    """(first line number, joined shell line) of every shell code block line, and the line
    numbers inside any code block."""
    shell: list[tuple[int, str]] = []
    inside: set[int] = set()
    fence: str | None = None
    language = ""
    pending = ""
    start = 0
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if fence is None:
            match = re.match(r"^(```+|~~~+)\s*([\w-]*)", stripped)
            if match:
                fence, language = match.group(1), match.group(2).lower()
                inside.add(number)
            continue
        inside.add(number)
        if stripped.startswith(fence):
            fence = None
            continue
        if language not in SHELL_BLOCKS:
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        shell.append((start, (pending + stripped).split(" #", 1)[0]))
        pending = ""
    return shell, inside


def _spans(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", text)


def mentions(path: Path, root: Path = ROOT) -> tuple[list[Mention], list[str]]:
    """Every command mention in a document, and every flag shown with commands that none of
    them has (as messages)."""
    name = path.relative_to(root).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Mention] = []
    problems: list[str] = []
    blocks, inside = _code_blocks(lines)
    for number, text in blocks:
        found += shell_mentions(text, name, number)
    heading_command: Command | None = None
    paragraph: list[tuple[int, str]] = []

    def close_paragraph() -> None:
        spans = [(n, s) for n, line in paragraph for s in _spans(line)]
        commands = []
        for n, span in spans:
            # A bare `nodesync` names the project or its namespace, not a command.
            here = shell_mentions(span, name, n) if span.strip() != "nodesync" else []
            found.extend(here)
            commands += [m.command for m in here]
        if commands:
            flags = {s.split("=", 1)[0].split()[0] for _, s in spans if s.startswith("--")}
            for flag in sorted(flags):
                if not any(flag in COMMANDS.get(c, set()) for c in commands):
                    owners = " or ".join("nodesync " + " ".join(c) for c in commands)
                    problems.append(f"{name}:{paragraph[0][0]}: {flag} is no flag of {owners}")
        paragraph.clear()

    for number, line in enumerate(lines, start=1):
        if number in inside:
            close_paragraph()
            continue
        if line.startswith("#"):
            close_paragraph()
            spans = [m for s in _spans(line) for m in shell_mentions(s, name, number)]
            found += spans
            heading_command = spans[0].command if spans else None
            continue
        if line.startswith("|"):
            close_paragraph()
            for span in _spans(line):
                if span.strip() != "nodesync":
                    found.extend(shell_mentions(span, name, number))
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            flag = re.fullmatch(r"`(--[\w.-]+)`", cells[0]) if cells else None
            if flag and heading_command is not None:
                found.append(Mention(name, number, heading_command, (flag.group(1),)))
            continue
        if not line.strip() or re.match(r"^\s*([-*]|\d+\.)\s", line):
            close_paragraph()
        if line.strip():
            paragraph.append((number, line))
    close_paragraph()
    return found, problems


ALL = {path.relative_to(ROOT).as_posix(): mentions(path) for path in DOCUMENTS}


def check(found: list[Mention], problems: list[str]) -> list[str]:
    """Everything wrong with a document's mentions: unknown commands, unknown flags."""
    problems = list(problems)
    for mention in found:
        if mention.command not in COMMANDS:
            problems.append(f"{mention}: no such command")
            continue
        problems += [
            f"{mention}: no flag {flag}"
            for flag in mention.flags
            if flag not in COMMANDS[mention.command]
        ]
    return problems


@pytest.mark.parametrize("document", sorted(ALL))
def test_every_command_shown_exists_with_the_flags_shown(document: str) -> None:
    assert check(*ALL[document]) == []


def test_the_readme_shows_every_role_and_links_the_install_docs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    shown = {m.command for m in ALL["README.md"][0]}
    for command in (("agent",), ("controller",), ("plan",), ("sim", "node")):
        assert command in shown, f"README.md never shows nodesync {' '.join(command)}"
    for doc in ("install.md", "upgrade.md", "uninstall.md", "rbac.md"):
        assert f"(docs/{doc})" in readme


def test_the_checks_find_what_they_are_for(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# Title\n\n```sh\nnodesync agent --no-such-flag \\\n  --sync.period 10s\n"
        "kubectl -n nodesync get pods\nnodesync contoller\n```\n\n"
        "Run `nodesync plan` with `--payload` and `--rollback.delete-nodes` and `--cri.endpoint`\n"
        "in namespace `nodesync`.\n\n"
        "## `nodesync controller`\n\n| flag | meaning |\n|---|---|\n| `--rollback.dry-run` | x |\n"
        "| `--sync.period` | y |\n| `nodesync sim nodes` | z |\n",
        encoding="utf-8",
    )
    found, problems = mentions(doc, tmp_path)
    assert [(m.command, m.flags) for m in found] == [
        (("agent",), ("--no-such-flag", "--sync.period")),
        (("contoller",), ()),
        (("plan",), ()),
        (("controller",), ()),
        (("controller",), ("--rollback.dry-run",)),
        (("controller",), ("--sync.period",)),
        (("sim", "nodes"), ()),
    ]
    assert check(found, problems) == [
        "doc.md:10: --cri.endpoint is no flag of nodesync plan",
        "doc.md:4: nodesync agent: no flag --no-such-flag",
        "doc.md:7: nodesync contoller: no such command",
        "doc.md:18: nodesync controller: no flag --sync.period",
        "doc.md:19: nodesync sim nodes: no such command",
    ]
