"""nodesync_sim.yamlfile: PyYAML's safe loader, with duplicate keys refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodesync_sim.yamlfile import YAMLError, load_file, loads, loads_all


def test_a_document_with_every_scalar_style() -> None:
    text = (
        "plain: text\n"
        "quoted: '10m'\n"
        "number: 0.1\n"
        "literal: |\n  one\n  two\n"
        "folded: >\n  one\n  two\n"
        "flow: {a: [1, 2]}\n"
        "matchType: =\n"
    )
    assert loads(text) == {
        "plain": "text",
        "quoted": "10m",
        "number": 0.1,
        "literal": "one\ntwo\n",
        "folded": "one two\n",
        "flow": {"a": [1, 2]},
        "matchType": "=",
    }


def test_a_duplicate_key_is_an_error_with_its_line() -> None:
    with pytest.raises(YAMLError, match=r"x.yml: line 3, column 1: found duplicate key 'a'"):
        loads("a: 1\nb:\na: 2\n", source="x.yml")


def test_a_duplicate_key_in_a_nested_mapping_is_an_error() -> None:
    with pytest.raises(YAMLError, match="duplicate key 'k'"):
        loads("outer:\n  - k: 1\n    k: 2\n")


def test_no_python_objects() -> None:
    with pytest.raises(YAMLError):
        loads("!!python/object/apply:os.system ['true']\n")


def test_documents_of_a_stream_and_errors_name_the_source(tmp_path: Path) -> None:
    assert loads_all("---\na: 1\n---\n---\nb: 2\n") == [{"a": 1}, {"b": 2}]
    path = tmp_path / "bad.yml"
    path.write_text("a: [\n")
    with pytest.raises(YAMLError, match=str(path)):
        load_file(path)
