"""Small modules with one job: a module of the product over LIMIT lines either is split by job
or says in its docstring why it stays whole, on a line that starts with ``Stays whole:``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ROOT / "exporter"
LIMIT = 400
#: Generated code: not read, not split.
GENERATED = (PRODUCT / "cri" / "pb",)
_REASON = re.compile(r"^Stays whole: \S.{20,}", re.MULTILINE)


def _modules() -> list[Path]:
    return sorted(
        path
        for path in PRODUCT.rglob("*.py")
        if not any(path.is_relative_to(generated) for generated in GENERATED)
    )


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def _oversized() -> list[str]:
    return [str(path.relative_to(ROOT)) for path in _modules() if _lines(path) > LIMIT]


def test_the_product_has_modules_to_look_at() -> None:
    assert len(_modules()) > 100


@pytest.mark.parametrize("module", _oversized())
def test_a_module_over_the_limit_says_why_it_stays_whole(module: str) -> None:
    doc = ast.get_docstring(ast.parse((ROOT / module).read_text())) or ""
    assert _REASON.search(doc), (
        f"{module} has {_lines(ROOT / module)} lines (over {LIMIT}): split it by job, or "
        "say why it stays whole in its docstring, on a line starting with 'Stays whole:'"
    )


def test_only_a_stated_reason_passes() -> None:
    assert not _REASON.search("A module with several jobs.\n\nIt is long.")
    assert not _REASON.search("Stays whole:")
    assert _REASON.search("One job.\n\nStays whole: one protocol, whose steps share their state.")
