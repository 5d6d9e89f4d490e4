"""A strict reader for the small YAML subset the rule files and rule tests are written in.

The project does not depend on a YAML library; promtool and Alertmanager parse these files for
real, and this reader serves the structural checks of the test suite and the local chain, which
rewrites copies of the shipped rule and Alertmanager files (exporter.sim.scaleout.overrides). It
accepts:

- block mappings (``key: value``) and block sequences (``- item``), indented with spaces;
- a mapping as a sequence item (``- key: value`` followed by more keys at the same column);
- scalars: plain, 'single-quoted', "double-quoted" (\\\\ \\" \\n \\t escapes), and literal
  blocks (``|`` and ``|-``);
- flow collections on one line: ``[a, b]``, ``{a: b}``, nested, with the same scalars;
- comments: whole lines and `` #`` after a plain or quoted value.

Every scalar is returned as a string (no type guessing); plain (unquoted) ones as ``Plain``,
a ``str`` subclass, so that ``resolve`` can apply YAML's core schema (numbers, booleans, null)
when a caller needs typed values, e.g. to write the same document as JSON. Anything else
(anchors, aliases, tags, folded blocks, multi-line flow or plain scalars, several documents,
tabs, duplicate keys) raises ``YamlSubsetError`` with the line number, so a file outside the
subset fails loudly instead of being read wrongly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_KEY = re.compile(
    r"""^(?P<key>'(?:[^']|'')*'|"(?:[^"\\]|\\.)*"|[^\s'"#\[\]{},&*!|>%@`?-][^#]*?)\s*:(?:\s+|$)"""
)
_PLAIN_KEY_FORBIDDEN = re.compile(r":\s")


class YamlSubsetError(ValueError):
    """The text is not in the supported subset."""


class Plain(str):
    """A plain (unquoted) scalar."""

    __slots__ = ()


_INT = re.compile(r"^[-+]?[0-9]+$")
_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")


def resolve(value: Any) -> Any:
    """The document with plain scalars typed by YAML's core schema: null, booleans, integers,
    floats; quoted scalars stay strings."""
    if isinstance(value, dict):
        return {str(key): resolve(item) for key, item in value.items()}
    if isinstance(value, list):
        return [resolve(item) for item in value]
    if isinstance(value, Plain):
        if value in ("null", "Null", "NULL", "~", ""):
            return None
        if value in ("true", "True", "TRUE"):
            return True
        if value in ("false", "False", "FALSE"):
            return False
        if _INT.match(value):
            return int(value)
        if _FLOAT.match(value):
            return float(value)
        return str(value)
    return value


@dataclass
class _Line:
    indent: int
    text: str
    number: int


def loads(text: str) -> Any:
    """Parse one document of the subset."""
    raw = text.splitlines()
    lines: list[_Line] = []
    for number, line in enumerate(raw, start=1):
        stripped = line.lstrip(" ")
        if stripped.startswith("\t") or "\t" in line[: len(line) - len(stripped)]:
            raise YamlSubsetError(f"line {number}: tab in indentation")
        if stripped in ("---", "...") or stripped.startswith("%"):
            raise YamlSubsetError(f"line {number}: document markers and directives unsupported")
        lines.append(_Line(len(line) - len(stripped), stripped.rstrip(), number))
    parser = _Parser(lines)
    parser.skip_blank()
    if parser.at_end():
        return None
    value = parser.node(parser.current().indent)
    parser.skip_blank()
    if not parser.at_end():
        rest = parser.current()
        raise YamlSubsetError(f"line {rest.number}: unexpected indentation or content")
    return value


def _is_blank(line: _Line) -> bool:
    return line.text == "" or line.text.startswith("#")


class _Parser:
    def __init__(self, lines: list[_Line]) -> None:
        self.lines = lines
        self.pos = 0

    def at_end(self) -> bool:
        return self.pos >= len(self.lines)

    def current(self) -> _Line:
        return self.lines[self.pos]

    def skip_blank(self) -> None:
        while not self.at_end() and _is_blank(self.current()):
            self.pos += 1

    def node(self, indent: int) -> Any:
        line = self.current()
        if line.indent != indent:
            raise YamlSubsetError(f"line {line.number}: unexpected indentation")
        if line.text == "-" or line.text.startswith("- "):
            return self.sequence(indent)
        return self.mapping(indent)

    def sequence(self, indent: int) -> list[Any]:
        items: list[Any] = []
        while True:
            self.skip_blank()
            if self.at_end():
                return items
            line = self.current()
            if line.indent != indent or not (line.text == "-" or line.text.startswith("- ")):
                if line.indent > indent:
                    raise YamlSubsetError(f"line {line.number}: unexpected indentation")
                return items
            rest = line.text[1:].lstrip(" ")
            if rest == "":
                self.pos += 1
                items.append(self.nested(indent))
            elif _KEY.match(rest):
                # A mapping item: its first key sits on the dash's line, the others below it.
                offset = len(line.text) - len(rest)
                self.lines[self.pos] = _Line(indent + offset, rest, line.number)
                items.append(self.mapping(indent + offset))
            else:
                self.pos += 1
                items.append(_scalar(rest, line.number))

    def mapping(self, indent: int) -> dict[str, Any]:
        result: dict[str, Any] = {}
        while True:
            self.skip_blank()
            if self.at_end():
                return result
            line = self.current()
            if line.indent < indent:
                return result
            if line.indent > indent:
                raise YamlSubsetError(f"line {line.number}: unexpected indentation")
            if line.text == "-" or line.text.startswith("- "):
                return result
            match = _KEY.match(line.text)
            if match is None:
                raise YamlSubsetError(f"line {line.number}: expected 'key: value'")
            raw_key = match.group("key")
            if raw_key[0] not in "'\"" and _PLAIN_KEY_FORBIDDEN.search(raw_key):
                raise YamlSubsetError(f"line {line.number}: ': ' inside a plain key")
            key = _scalar(raw_key, line.number)
            if key in result:
                raise YamlSubsetError(f"line {line.number}: duplicate key {key!r}")
            rest = line.text[match.end() :]
            self.pos += 1
            if rest == "" or rest.startswith("#"):
                result[key] = self.nested(indent, allow_same_indent_sequence=True)
            elif rest.split(" #", 1)[0].rstrip() in ("|", "|-"):
                result[key] = self.literal(indent, keep_last_newline=not rest.startswith("|-"))
            else:
                result[key] = _scalar(rest, line.number)

    def nested(self, indent: int, *, allow_same_indent_sequence: bool = False) -> Any:
        self.skip_blank()
        if self.at_end():
            return None
        line = self.current()
        if line.indent > indent:
            return self.node(line.indent)
        if (
            allow_same_indent_sequence
            and line.indent == indent
            and (line.text == "-" or line.text.startswith("- "))
        ):
            return self.sequence(indent)
        return None

    def literal(self, indent: int, *, keep_last_newline: bool) -> str:
        body: list[_Line] = []
        while not self.at_end():
            line = self.current()
            if line.text != "" and line.indent <= indent:
                break
            body.append(line)
            self.pos += 1
        while body and body[-1].text == "":
            body.pop()
        if not body:
            return ""
        block_indent = body[0].indent
        if block_indent <= indent:
            raise YamlSubsetError(f"line {body[0].number}: literal block must be indented")
        out: list[str] = []
        for line in body:
            if line.text == "":
                out.append("")
            elif line.indent < block_indent:
                raise YamlSubsetError(f"line {line.number}: literal block dedents")
            else:
                out.append(" " * (line.indent - block_indent) + line.text)
        text = "\n".join(out)
        return text + "\n" if keep_last_newline else text


def _scalar(text: str, number: int) -> Any:
    """A value written on one line: a quoted or plain scalar, or a flow collection."""
    reader = _Flow(text, number)
    value = reader.value(top=True)
    reader.skip_space()
    if reader.pos < len(text) and not text[reader.pos :].startswith("#"):
        raise YamlSubsetError(f"line {number}: unexpected text after value: {text[reader.pos :]!r}")
    return value


class _Flow:
    """Reads one line's value: scalars and (nested) flow collections."""

    def __init__(self, text: str, number: int) -> None:
        self.text = text
        self.number = number
        self.pos = 0

    def error(self, message: str) -> YamlSubsetError:
        return YamlSubsetError(f"line {self.number}: {message}")

    def skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] == " ":
            self.pos += 1

    def value(self, *, top: bool = False) -> Any:
        self.skip_space()
        if self.pos >= len(self.text):
            if top:
                return None
            raise self.error("value expected")
        char = self.text[self.pos]
        if char == "[":
            return self.collection("]")
        if char == "{":
            return self.collection("}")
        if char == "'":
            return self.single_quoted()
        if char == '"':
            return self.double_quoted()
        if char in "&*!|>%@`?":
            raise self.error(f"unsupported YAML syntax {char!r}")
        return self.plain(top=top)

    def collection(self, close: str) -> Any:
        self.pos += 1
        items: list[Any] = []
        mapping: dict[str, Any] = {}
        while True:
            self.skip_space()
            if self.pos >= len(self.text):
                raise self.error("flow collection not closed on its line")
            if self.text[self.pos] == close:
                self.pos += 1
                return mapping if close == "}" else items
            if close == "}":
                key = self.value()
                self.skip_space()
                if self.pos >= len(self.text) or self.text[self.pos] != ":":
                    raise self.error("':' expected in flow mapping")
                self.pos += 1
                if not isinstance(key, str):
                    raise self.error("flow mapping keys must be scalars")
                if key in mapping:
                    raise self.error(f"duplicate key {key!r}")
                mapping[key] = self.value()
            else:
                items.append(self.value())
            self.skip_space()
            if self.pos >= len(self.text):
                raise self.error("flow collection not closed on its line")
            if self.text[self.pos] == ",":
                self.pos += 1
            elif self.text[self.pos] != close:
                raise self.error(f"',' or {close!r} expected")

    def single_quoted(self) -> str:
        out: list[str] = []
        self.pos += 1
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char == "'":
                if self.text[self.pos + 1 : self.pos + 2] == "'":
                    out.append("'")
                    self.pos += 2
                    continue
                self.pos += 1
                return "".join(out)
            out.append(char)
            self.pos += 1
        raise self.error("single-quoted scalar not closed on its line")

    def double_quoted(self) -> str:
        escapes = {"\\": "\\", '"': '"', "n": "\n", "t": "\t", "/": "/"}
        out: list[str] = []
        self.pos += 1
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char == '"':
                self.pos += 1
                return "".join(out)
            if char == "\\":
                escaped = self.text[self.pos + 1 : self.pos + 2]
                if escaped not in escapes:
                    raise self.error(f"unsupported escape \\{escaped}")
                out.append(escapes[escaped])
                self.pos += 2
                continue
            out.append(char)
            self.pos += 1
        raise self.error("double-quoted scalar not closed on its line")

    def plain(self, *, top: bool) -> str:
        start = self.pos
        stops = "" if top else ",]}:"
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char == "#" and self.text[self.pos - 1] == " ":
                break
            if char in stops and (
                char != ":" or self.text[self.pos + 1 : self.pos + 2] in (" ", "")
            ):
                break
            self.pos += 1
        value = self.text[start : self.pos].rstrip()
        if top and re.search(r":\s", value):
            raise self.error(f"': ' inside a plain scalar: {value!r}")
        return Plain(value)
