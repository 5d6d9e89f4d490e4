"""The line store: objects' chunks written family by family, in key order, each family joined
again only when a chunk of it changed."""

from __future__ import annotations

import pytest

from exporter.metrics.store import Family, LineStore, render_all

A = Family("test_a", "The first family.")
B = Family("test_b", "The second family.")


def text(store: LineStore) -> str:
    return b"".join(store.exposition()).decode()


def test_families_in_order_objects_by_key() -> None:
    store = LineStore([A, B])
    store.put("y", [b'test_a{k="y"} 1.0\n', b""])
    store.put("x", [b'test_a{k="x"} 2.0\n', b'test_b{k="x"} 3.0\n'])
    assert text(store) == (
        "# HELP test_a The first family.\n# TYPE test_a gauge\n"
        'test_a{k="x"} 2.0\ntest_a{k="y"} 1.0\n'
        "# HELP test_b The second family.\n# TYPE test_b gauge\n"
        'test_b{k="x"} 3.0\n'
    )
    assert len(store) == 2
    assert store.chunks("y") == (b'test_a{k="y"} 1.0\n', b"")


def test_a_change_rejoins_only_its_family() -> None:
    store = LineStore([A, B])
    store.put("x", [b"test_a 1.0\n", b"test_b 1.0\n"])
    first = store.exposition()
    store.put("x", [b"test_a 2.0\n", b"test_b 1.0\n"])
    second = store.exposition()
    assert second[1] == b"test_a 2.0\n"
    assert second[3] is first[3], "the unchanged family was joined again"


def test_delete_and_replace() -> None:
    store = LineStore([A])
    store.put("x", [b'test_a{k="x"} 1.0\n'])
    store.put("y", [b'test_a{k="y"} 1.0\n'])
    store.delete("x")
    store.delete("never-there")
    assert "x" not in store
    assert text(store).endswith('test_a{k="y"} 1.0\n')
    store.replace({"z": [b'test_a{k="z"} 1.0\n']})
    assert "y" not in store
    assert text(store) == render_all([A], [("z", [b'test_a{k="z"} 1.0\n'])]).decode()
    with pytest.raises(KeyError):
        store.chunks("y")


def test_an_empty_store_still_names_its_families() -> None:
    assert text(LineStore([A])) == "# HELP test_a The first family.\n# TYPE test_a gauge\n"


def test_one_chunk_per_family() -> None:
    with pytest.raises(ValueError, match="2 chunks for 1 families"):
        LineStore([A]).put("x", [b"", b""])


@pytest.mark.parametrize("help_text", ['say "hi"', "a\\b", "two\nlines"])
def test_a_help_that_needs_escaping_is_refused(help_text: str) -> None:
    """HELP is escaped differently in the two text formats: the store keeps one text."""
    with pytest.raises(ValueError, match="escaping"):
        Family("test_x", help_text)
