"""Reading kustomize's folded scalars: each comes back as the value YAML gives it."""

from __future__ import annotations

import pytest

from tests.deploy.kyaml import UnfoldError, unfold
from tests.rules.yamlsubset import YamlSubsetError, loads


def read(text: str) -> object:
    return loads(unfold(text))


def test_folded_single_quoted_scalar_is_one_value() -> None:
    text = "a:\n  summary: 'New node {{ $labels.node }}: it''s\n    cleaning it\n    up.'\n  b: c\n"
    assert read(text) == {
        "a": {"summary": "New node {{ $labels.node }}: it's cleaning it up.", "b": "c"}
    }


def test_folded_plain_scalar_is_one_value() -> None:
    text = "- description: Node {{ $labels.node }} is below\n    the threshold\n  expr: up\n"
    assert read(text) == [
        {"description": "Node {{ $labels.node }} is below the threshold", "expr": "up"}
    ]


def test_a_blank_line_inside_a_quoted_scalar_is_a_line_break() -> None:
    assert read("k: 'one\n\n  two'\n") == {"k": "one\ntwo"}


def test_folded_double_quoted_scalar_keeps_escapes_and_escaped_breaks() -> None:
    text = 'k: "tab\\there and \\"quotes\\" then a joined wo\\\n  rd and\n  more"\n'
    assert read(text) == {"k": 'tab\there and "quotes" then a joined word and more'}


def test_plain_sequence_items_fold_too() -> None:
    assert read("items:\n- first part\n  second part\n- next\n") == {
        "items": ["first part second part", "next"]
    }


def test_nested_collections_and_block_scalars_are_left_alone() -> None:
    text = (
        "rules:\n- apiGroups:\n  - ''\n  resources:\n  - nodes\n"
        "expr: |\n  a: b\n    and more\n  end\nnext: value\n"
    )
    assert read(text) == {
        "rules": [{"apiGroups": [""], "resources": ["nodes"]}],
        "expr": "a: b\n  and more\nend\n",
        "next": "value",
    }


def test_one_line_values_are_untouched() -> None:
    text = "a: 'x: y'\nb: \"z\"\nc: - d\n"
    assert unfold(text) == text


def test_an_unclosed_quote_is_an_error() -> None:
    with pytest.raises(UnfoldError):
        unfold("k: 'never\n  closed\n")


def test_what_the_subset_does_not_know_still_fails() -> None:
    with pytest.raises(YamlSubsetError):
        read("k: &anchor value\n")
