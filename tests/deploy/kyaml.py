"""Read kustomize's YAML output with the project's strict YAML-subset reader.

kustomize (kyaml) writes block YAML inside the subset but for one thing: it folds long scalars
over several lines, plain and quoted alike::

    summary: 'New node {{ $labels.node }} has drifted ({{ $labels.kind }}): cleaning
      it up.'

``unfold`` joins every such scalar back onto one line, as a double-quoted scalar holding the
value YAML gives it (folding: a line break between two lines is one space; a blank line is a
line break; in double quotes, an escaped line break joins without a space). Everything else is
left alone, so the subset reader still rejects whatever it does not know.
"""

from __future__ import annotations

import json
import re

# "key: value", "- key: value" or "- value": where a scalar may start on a line.
_KEY_VALUE = re.compile(
    r"""^(?P<lead>\s*(?:-\s+)*)(?P<key>(?:'(?:[^']|'')*'|"(?:[^"\\]|\\.)*"|[^\s'"#\-][^#]*?|-[^\s][^#]*?)):\s+(?P<value>\S.*)$"""
)
_KEY_ONLY = re.compile(r"""^\s*(?:-\s+)*(?:'(?:[^']|'')*'|"(?:[^"\\]|\\.)*"|[^\s'"#][^#]*?):\s*$""")
_ITEM = re.compile(r"^(?P<lead>\s*(?:-\s+)+)(?P<value>(?:[^\s-]|-\S).*)$")


class UnfoldError(ValueError):
    pass


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _closed_single(text: str) -> int | None:
    """Index just past the closing quote of a single-quoted scalar starting at text[0]."""
    i = 1
    while i < len(text):
        if text[i] == "'":
            if i + 1 < len(text) and text[i + 1] == "'":
                i += 2
                continue
            return i + 1
        i += 1
    return None


def _closed_double(text: str) -> int | None:
    i = 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == '"':
            return i + 1
        i += 1
    return None


_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "/": "/", " ": " ", "0": "\0"}


def _double_value(body: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in _ESCAPES:
            out.append(_ESCAPES[nxt])
            i += 2
        elif nxt == "x":
            out.append(chr(int(body[i + 2 : i + 4], 16)))
            i += 4
        elif nxt == "u":
            out.append(chr(int(body[i + 2 : i + 6], 16)))
            i += 6
        else:
            raise UnfoldError(f"unknown escape \\{nxt}")
    return "".join(out)


def _fold(lines: list[str]) -> str:
    """YAML's line folding of a flow scalar's lines (each already stripped): a line break
    between two non-blank lines is a space, each blank line a line break."""
    out = lines[0]
    breaks = 0
    for line in lines[1:]:
        if not line:
            breaks += 1
            continue
        out += "\n" * breaks if breaks else " "
        out += line
        breaks = 0
    return out


def _single_quoted(lines: list[str]) -> str:
    """The value of a single-quoted scalar over ``lines`` (quotes included)."""
    parts = [line.strip() for line in lines]
    parts[0], parts[-1] = parts[0][1:], parts[-1][:-1]
    return _fold(parts).replace("''", "'")


def _double_quoted(lines: list[str]) -> str:
    """The value of a double-quoted scalar over ``lines``: an escaped line break (a line ending
    in an odd number of backslashes) joins two lines without a space."""
    parts = [line.strip() for line in lines]
    parts[0], parts[-1] = parts[0][1:], parts[-1][:-1]
    joined: list[str] = []
    glue = False
    for part in parts:
        if glue:
            joined[-1] += part
        else:
            joined.append(part)
        glue = (len(part) - len(part.rstrip("\\"))) % 2 == 1
        if glue:
            joined[-1] = joined[-1][:-1]
    return _double_value(_fold(joined))


def _scalar_start(line: str) -> tuple[str, str, int] | None:
    """(text before the value, the value, the column deeper lines must pass to continue it),
    for a line whose value is a scalar; None for any other line."""
    if line.lstrip().startswith("#") or _KEY_ONLY.match(line):
        return None
    match = _KEY_VALUE.match(line)
    if match is not None:
        parent = len(match.group("lead"))  # the key's column
    else:
        match = _ITEM.match(line)
        if match is None:
            return None
        parent = len(match.group("lead")) - 2  # the last dash's column
    return line[: match.start("value")], match.group("value"), parent


def unfold(text: str) -> str:
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        start = _scalar_start(lines[i])
        if start is None:
            out.append(lines[i])
            i += 1
            continue
        prefix, value, parent = start
        j = i + 1
        if value[0] in "|>":
            # A block scalar: its lines are copied as they are (the subset reader reads them).
            while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > parent):
                j += 1
            out.extend(lines[i:j])
            i = j
            continue
        if value[0] in "'\"":
            closer = _closed_single if value[0] == "'" else _closed_double
            while closer(" ".join([value, *(x.strip() for x in lines[i + 1 : j])])) is None:
                if j >= len(lines):
                    raise UnfoldError(f"line {i + 1}: quoted scalar never closed")
                j += 1
            if j == i + 1:
                out.append(lines[i])
            else:
                read = _single_quoted if value[0] == "'" else _double_quoted
                out.append(
                    prefix + json.dumps(read([value, *lines[i + 1 : j]]), ensure_ascii=False)
                )
            i = j
            continue
        # A plain scalar: the deeper, non-blank lines that follow continue it.
        while j < len(lines) and lines[j].strip() and _indent(lines[j]) > parent:
            j += 1
        if j == i + 1 or value[0] in "[{&*!%@`":
            out.extend(lines[i:j])
        else:
            parts = [value.strip(), *(x.strip() for x in lines[i + 1 : j])]
            if any(p.startswith("#") for p in parts[1:]):
                raise UnfoldError(f"line {i + 2}: a comment inside a folded plain scalar")
            out.append(prefix + json.dumps(_fold(parts), ensure_ascii=False))
        i = j
    return "\n".join(out)
