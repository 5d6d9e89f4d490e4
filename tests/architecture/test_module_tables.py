"""docs/architecture.md's module tables are true to the tree: every module a table names exists,
and every module of the agent and the controller has its row."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.docs import DOCS, markdown_table, section

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ROOT / "exporter"
ARCHITECTURE = DOCS / "architecture.md"
ROLES = {"agent": "The agent, module by module", "controller": "The controller, module by module"}


def _tables(text: str) -> list[list[dict[str, str]]]:
    """Every table of ``text`` whose first header is "module" (backticks kept off)."""
    found = []
    for start in (m.start() for m in re.finditer(r"^\| module \|", text, re.M)):
        found.append(markdown_table(text[start:], "module"))
    return found


def named_modules(heading: str) -> set[str]:
    """The modules (``agent/app.py``, ``controller/steps/``) the tables of a section name."""
    text = section(ARCHITECTURE.read_text(encoding="utf-8"), heading)
    return {row["module"] for table in _tables(text) for row in table}


def _exists(module: str) -> bool:
    path = PRODUCT / module
    return path.is_dir() if module.endswith("/") else path.is_file()


def test_every_module_a_table_names_exists() -> None:
    for heading in ROLES.values():
        missing = sorted(m for m in named_modules(heading) if not _exists(m))
        assert not missing, f"docs/architecture.md, {heading!r}, names what is not there: {missing}"


def test_every_module_of_a_role_has_its_row() -> None:
    for role, heading in ROLES.items():
        named = named_modules(heading)
        tree = {
            f"{role}/{p.name}/" if p.is_dir() else f"{role}/{p.name}"
            for p in (PRODUCT / role).iterdir()
            if (p.suffix == ".py" and p.name != "__init__.py")
            or (p.is_dir() and (p / "__init__.py").exists())
        }
        assert sorted(tree - named) == [], f"no row in docs/architecture.md, {heading!r}"


def test_the_reader_finds_both_kinds_of_table() -> None:
    assert "agent/sync.py" in named_modules(ROLES["agent"])
    assert "agent/app.py" in named_modules(ROLES["agent"])  # the table of what puts them together
    assert "controller/steps/" in named_modules(ROLES["controller"])
