"""Read a Dockerfile and a .dockerignore the way Docker does, as far as the checks need.

No Docker engine runs here, so the image cannot be built; what can be checked without one is
checked from these: the instructions, the stages and their references, the final stage's
user, ports, labels and entry point, and the build context the COPY instructions read.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

KNOWN = frozenset(
    {
        "ADD",
        "ARG",
        "CMD",
        "COPY",
        "ENTRYPOINT",
        "ENV",
        "EXPOSE",
        "FROM",
        "HEALTHCHECK",
        "LABEL",
        "ONBUILD",
        "RUN",
        "SHELL",
        "STOPSIGNAL",
        "USER",
        "VOLUME",
        "WORKDIR",
    }
)


@dataclass
class Instruction:
    keyword: str
    arguments: str
    line: int

    def flags(self) -> dict[str, str]:
        """The instruction's ``--name=value`` options (before its arguments)."""
        found: dict[str, str] = {}
        for word in shlex.split(self.arguments):
            if not word.startswith("--"):
                break
            name, _, value = word[2:].partition("=")
            found[name] = value
        return found

    def words(self) -> list[str]:
        """The arguments after the options."""
        words = shlex.split(self.arguments)
        while words and words[0].startswith("--"):
            words.pop(0)
        return words

    def exec_form(self) -> list[str] | None:
        try:
            value = json.loads(self.arguments)
        except ValueError:
            return None
        return value if isinstance(value, list) else None


@dataclass
class Stage:
    image: str
    name: str
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


@dataclass
class Dockerfile:
    global_args: dict[str, str]
    stages: list[Stage]
    directives: dict[str, str]

    def expand(self, text: str) -> str:
        """``${NAME}`` and ``$NAME`` of the global ARGs (their defaults)."""

        def value(match: re.Match[str]) -> str:
            name = match.group(1) or match.group(2)
            if name not in self.global_args:
                raise ValueError(f"ARG {name} is not declared before the first FROM")
            return self.global_args[name]

        return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, text)


class DockerfileError(ValueError):
    pass


def parse(text: str) -> Dockerfile:
    directives: dict[str, str] = {}
    logical: list[tuple[int, str]] = []
    pending = ""
    start = 0
    in_directives = True
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if in_directives:
            directive = re.match(r"^#\s*(\w+)\s*=\s*(.+)$", stripped)
            if directive:
                directives[directive.group(1).lower()] = directive.group(2).strip()
                continue
            in_directives = False
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        logical.append((start, pending + stripped))
        pending = ""
    if pending:
        raise DockerfileError(f"line {start}: continuation never ends")

    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for number, line in logical:
        keyword, _, arguments = line.partition(" ")
        if keyword != keyword.upper() or keyword not in KNOWN:
            raise DockerfileError(f"line {number}: unknown instruction {keyword!r}")
        instruction = Instruction(keyword, arguments.strip(), number)
        if keyword == "FROM":
            words = instruction.words()
            if len(words) == 3 and words[1].lower() == "as":
                stages.append(Stage(words[0], words[2]))
            elif len(words) == 1:
                stages.append(Stage(words[0], ""))
            else:
                raise DockerfileError(f"line {number}: FROM {arguments!r}")
        elif not stages:
            if keyword != "ARG":
                raise DockerfileError(f"line {number}: {keyword} before the first FROM")
            name, _, default = instruction.arguments.partition("=")
            global_args[name] = default
        else:
            stages[-1].instructions.append(instruction)
    if not stages:
        raise DockerfileError("no FROM")
    return Dockerfile(global_args, stages, directives)


def labels(stage: Stage) -> dict[str, str]:
    found: dict[str, str] = {}
    for instruction in stage.all("LABEL"):
        for word in shlex.split(instruction.arguments):
            key, sep, value = word.partition("=")
            if not sep:
                raise DockerfileError(f"line {instruction.line}: LABEL {word!r} without a value")
            found[key] = value
    return found


# ---------------------------------------------------------------- .dockerignore


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out)


@dataclass
class DockerIgnore:
    patterns: list[tuple[bool, re.Pattern[str]]]

    @classmethod
    def parse(cls, text: str) -> DockerIgnore:
        patterns = []
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            negated = line.startswith("!")
            pattern = line[1:].strip() if negated else line
            pattern = pattern.strip("/") or "."
            patterns.append((negated, _pattern_regex(pattern)))
        return cls(patterns)

    def excluded(self, path: str) -> bool:
        """Whether ``path`` (relative to the context) stays out of the build context: the last
        pattern that matches the path, or one of its parent directories, decides."""
        parts = path.strip("/").split("/")
        candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        excluded = False
        for negated, regex in self.patterns:
            if any(regex.fullmatch(c) for c in candidates):
                excluded = not negated
        return excluded


def context_files(root: Path, ignore: DockerIgnore, sources: list[str]) -> list[Path]:
    """The files of ``sources`` (paths relative to ``root``) that reach the build context;
    a symbolic link is one entry (Docker copies links as links)."""
    files: list[Path] = []
    for source in sources:
        path = root / source
        found = (
            [p for p in sorted(path.rglob("*")) if p.is_symlink() or p.is_file()]
            if path.is_dir()
            else [path]
        )
        files += [p for p in found if not ignore.excluded(p.relative_to(root).as_posix())]
    return files


def stage_references(instruction: Instruction) -> list[str]:
    """Stages an instruction reads from: ``COPY --from=`` and ``RUN --mount=...,from=``."""
    flags = instruction.flags()
    found = []
    if "from" in flags:
        found.append(flags["from"])
    mount = flags.get("mount", "")
    for option in mount.split(","):
        key, _, value = option.partition("=")
        if key == "from":
            found.append(value)
    return found
