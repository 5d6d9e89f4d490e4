"""YAML as nodesync reads it: PyYAML's safe loader, refusing duplicate keys.

A mapping that names a key twice is almost always a mistake (the second value silently wins
in PyYAML and in most other readers, but not in all), so it is an error with its line here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml


class YAMLError(ValueError):
    """The text is not YAML nodesync accepts; the message names the line."""


class _StrictLoader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {key!r}",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


# YAML 1.1 resolves a plain "=" to its "value" type, which no safe loader constructs; YAML 1.2
# and every Kubernetes tool read it as the string it looks like (e.g. a matcher's matchType).
_StrictLoader.add_constructor(
    "tag:yaml.org,2002:value",
    lambda loader, node: loader.construct_scalar(node),  # type: ignore[arg-type]
)


def _error(exc: yaml.YAMLError, source: str) -> YAMLError:
    """One line: where, and what is wrong there."""
    where = [source] if source else []
    what = str(exc)
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        if mark is not None:
            where.append(f"line {mark.line + 1}, column {mark.column + 1}")
        what = exc.problem or exc.context or what
    return YAMLError(": ".join([*where, " ".join(what.split())]))


def loads(text: str, *, source: str = "") -> Any:
    """One document (None for an empty text). ``source`` names the text in errors."""
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        raise _error(exc, source) from None


def loads_all(text: str, *, source: str = "") -> list[Any]:
    """Every document of a multi-document text (``---`` separated), empty ones left out."""
    try:
        documents: Iterator[Any] = yaml.load_all(text, Loader=_StrictLoader)
        return [d for d in documents if d is not None]
    except yaml.YAMLError as exc:
        raise _error(exc, source) from None


def load_file(path: str | Path) -> Any:
    """One document from a file; OSError when it cannot be read."""
    return loads(Path(path).read_text(encoding="utf-8"), source=str(path))
