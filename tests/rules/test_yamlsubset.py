"""The YAML-subset reader: what it reads, how it types plain scalars, and that it rejects
everything outside the subset instead of misreading it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.rules.yamlsubset import Plain, YamlSubsetError, loads, resolve

READS: list[tuple[str, str, Any]] = [
    ("empty document", "# only a comment\n\n", None),
    ("flat mapping", "a: 1\nb: two\n", {"a": "1", "b": "two"}),
    (
        "nested mappings and sequences",
        "groups:\n  - name: g\n    rules:\n      - record: a:b:c\n        expr: up\n",
        {"groups": [{"name": "g", "rules": [{"record": "a:b:c", "expr": "up"}]}]},
    ),
    ("sequence at the key's indentation", "k:\n- a\n- b\n", {"k": ["a", "b"]}),
    ("empty value", "a:\nb: 1\n", {"a": None, "b": "1"}),
    (
        "comments everywhere",
        "# head\na: 1 # trailing\n  # indented comment\nb: 'x # not a comment'\n",
        {"a": "1", "b": "x # not a comment"},
    ),
    ("single quotes", "a: 'it''s {{ $value }}: ok'\n", {"a": "it's {{ $value }}: ok"}),
    ("double quotes", 'a: "say \\"hi\\"\\n\\\\"\n', {"a": 'say "hi"\n\\'}),
    (
        "literal block keeps inner indentation, blank lines and comments",
        "expr: |\n  sum(\n    x  # why\n\n  )\nnext: 1\n",
        {"expr": "sum(\n  x  # why\n\n)\n", "next": "1"},
    ),
    ("literal block, stripped", "a: |-\n  one\n  two\n\n", {"a": "one\ntwo"}),
    (
        "flow collections, nested",
        "a: {x: 1, y: [p, 'q, r'], z: {}}\nb: []\n",
        {"a": {"x": "1", "y": ["p", "q, r"], "z": {}}, "b": []},
    ),
    (
        "flow mapping as a sequence item",
        "s:\n  - {labels: 'm{a=\"1\"}', value: 0.5}\n",
        {"s": [{"labels": 'm{a="1"}', "value": "0.5"}]},
    ),
    ("colons without a space are plain text", "a: x:y:z / w:v\n", {"a": "x:y:z / w:v"}),
    ("quoted scalar item with a colon", "- 'a: b'\n- c\n", ["a: b", "c"]),
]


@pytest.mark.parametrize(
    ("text", "expected"), [(t, e) for _, t, e in READS], ids=[n for n, _, _ in READS]
)
def test_reads(text: str, expected: Any) -> None:
    assert loads(text) == expected


def test_plain_scalars_are_marked_and_resolved_by_the_core_schema() -> None:
    data = loads("a: [1, -2, 0.25, 1e3, true, null, ~, 2m, '3']\n")
    assert isinstance(data["a"][0], Plain)
    assert not isinstance(data["a"][-1], Plain)
    assert resolve(data) == {"a": [1, -2, 0.25, 1000.0, True, None, None, "2m", "3"]}


REJECTS = [
    ("tab indentation", "a:\n\tb: 1\n", "tab"),
    ("document marker", "---\na: 1\n", "document"),
    ("anchor", "a: &x 1\n", "unsupported"),
    ("alias", "a: *x\n", "unsupported"),
    ("tag", "a: !!str 1\n", "unsupported"),
    ("folded block", "a: >\n  text\n", "unsupported"),
    ("duplicate key", "a: 1\na: 2\n", "duplicate"),
    ("duplicate flow key", "a: {x: 1, x: 2}\n", "duplicate"),
    ("deeper line after a scalar", "a: one\n  two\n", "indentation"),
    ("unclosed quote", "a: 'open\n", "not closed"),
    ("unclosed flow", "a: [1, 2\n", "not closed"),
    ("colon-space in a plain value", "a: b: c\n", "': '"),
    ("not a mapping entry", "a: 1\njust text\n", "key: value"),
    ("unknown escape", 'a: "\\q"\n', "escape"),
    ("text after a quoted value", "a: 'x' y\n", "after value"),
]


@pytest.mark.parametrize(
    ("text", "message"), [(t, m) for _, t, m in REJECTS], ids=[n for n, _, _ in REJECTS]
)
def test_rejects(text: str, message: str) -> None:
    with pytest.raises(YamlSubsetError, match=message) as error:
        loads(text)
    assert "line " in str(error.value)
