"""msgspec's refusals worded as nodesync words every decoding error: the JSON path first."""

from __future__ import annotations

from typing import Annotated

import msgspec
import pytest

from exporter.model.codec import error_message


class _Item(msgspec.Struct):
    name: str
    count: int = 0


class _Doc(msgspec.Struct):
    items: list[_Item]
    labels: dict[str, str] = {}


class _Doc2(msgspec.Struct):
    items: list[_Item]
    labels: dict[Annotated[str, msgspec.Meta(min_length=1)], str]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"items": [{"name": "a"}, {"count": 1}]}', "$.items[1].name: missing"),
        (b"{}", "$.items: missing"),
        (
            b'{"items": [{"name": "a", "count": "x"}]}',
            "$.items[0].count: expected `int`, got `str`",
        ),
        (b'{"items": [], "labels": {"a": 1}}', "$.labels[...]: expected `str`, got `int`"),
        (b"[]", "$: expected `object`, got `array`"),
    ],
)
def test_the_path_comes_first(raw: bytes, message: str) -> None:
    with pytest.raises(msgspec.ValidationError) as raised:
        msgspec.json.decode(raw, type=_Doc)
    assert error_message(raised.value) == message


def test_a_root_names_the_document() -> None:
    with pytest.raises(msgspec.ValidationError) as raised:
        msgspec.convert({"items": [{}]}, _Doc)
    assert error_message(raised.value, root="node n-1") == "node n-1.items[0].name: missing"


def test_a_bad_key_is_named_by_its_map() -> None:
    with pytest.raises(msgspec.ValidationError) as raised:
        msgspec.json.decode(b'{"items": [], "labels": {"": "x"}}', type=_Doc2)
    assert error_message(raised.value) == "$.labels: a key: expected `str` of length >= 1"
