"""docs/simulator.md and docs/e2e.md agree with the code: every scenario key, timing default,
fault kind and controller setting is documented, every scenario of the library is in e2e.md's
table, and links resolve."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest

from nodesync_sim.fake.scaleout.scenario import FAULT_KINDS, Timing
from nodesync_sim.fake.scaleout.scenario_file import CONTROLLER_KEYS, TOP_KEYS, load
from tests.deploy.test_links import _check
from tests.support.docs import markdown_anchors, markdown_table

DOCS = Path(__file__).resolve().parents[4] / "docs"
SIMULATOR = (DOCS / "simulator.md").read_text(encoding="utf-8")
SCENARIOS_DIR = DOCS.parent / "scenarios"


def test_every_top_level_key_is_documented() -> None:
    rows = markdown_table(SIMULATOR, "key")
    assert [row["key"] for row in rows] == list(TOP_KEYS)
    [controller] = [row for row in rows if row["key"] == "controller"]
    documented = set(re.findall(r"`([a-z_]+)`", controller["meaning"]))
    assert documented == set(CONTROLLER_KEYS)


def test_every_timing_knob_is_documented_with_its_default() -> None:
    table = SIMULATOR[SIMULATOR.index("`timing` (defaults") :]
    rows = markdown_table(table, "key")
    documented: dict[str, str] = {}
    for row in rows:
        names = [name.strip(" `") for name in row["key"].split(",")]
        values = [v.strip() for v in row["default"].split(",")]
        documented.update(zip(names, values, strict=True))
    defaults = {f.name: getattr(Timing(), f.name) for f in msgspec.structs.fields(Timing)}
    assert set(documented) == set(defaults)
    for name, value in defaults.items():
        assert float(documented[name]) == float(value), name


def test_every_fault_kind_is_documented() -> None:
    rows = markdown_table(SIMULATOR, "kind")
    assert [row["kind"] for row in rows] == list(FAULT_KINDS)


@pytest.mark.parametrize("name", ["simulator.md", "e2e.md"])
def test_links_resolve(name: str) -> None:
    doc = DOCS / name
    text = doc.read_text(encoding="utf-8")
    problems = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if target.startswith("#"):
            if target[1:] not in markdown_anchors(text):
                problems.append(f"{target}: no heading here")
        elif found := _check(target, doc.parent):
            problems.append(found)
    assert problems == []


def test_the_library_table_lists_every_scenario_of_the_library() -> None:
    rows = markdown_table((DOCS / "e2e.md").read_text(encoding="utf-8"), "scenario")
    scored = {s.name for s in (load(p) for p in SCENARIOS_DIR.glob("*.json")) if s.expect}
    assert sorted(row["scenario"] for row in rows) == sorted(scored)
