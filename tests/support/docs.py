"""The suite's one reader of the project's Markdown documents, for the tests that check a doc
against the code: where the docs are, a level-2 section, a table's rows, the anchors GitHub
gives headings, and docs/metrics.md's metric names beside an exposition's.

docs/metrics.md lists metrics in tables whose first column is the name in backticks; a table
belongs to the nearest level-2 heading above it (e.g. "## Agent: runtime"), so a check can be
limited to the sections of one role.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
METRICS_DOC = DOCS / "metrics.md"
CONFIGURATION_DOC = DOCS / "configuration.md"
RBAC_DOC = DOCS / "rbac.md"

#: A docs/metrics.md row: the name, the type, and the labels cell.
_METRIC_ROW = re.compile(r"^\| `(nodesync_[a-z_]+)` \| [a-z]+ \| ([^|]*) \|", re.M)


def section(text: str, heading: str) -> str:
    """The body of the level-2 section ``## heading`` of a Markdown text (up to the next
    level-2 heading); fails the test when there is none."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"no section {heading!r}"
    return match.group(1)


def metric_rows(text: str) -> dict[str, str]:
    """metric name -> its labels cell, for the docs/metrics.md rows of ``text``."""
    return {m.group(1): m.group(2) for m in _METRIC_ROW.finditer(text)}


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lowercase, punctuation dropped, spaces to
    hyphens."""
    text = unicodedata.normalize("NFKC", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def markdown_anchors(text: str) -> list[str]:
    anchors: list[str] = []
    in_code = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            anchors.append(github_anchor(match.group(1)))
        # An HTML anchor (<a id="..."></a>) names a place inside a section, as GitHub renders it.
        anchors += re.findall(r'<a id="([^"]+)"></a>', line)
    return anchors


def markdown_table(text: str, first_header: str) -> list[dict[str, str]]:
    """The rows of the first Markdown table whose first header cell is ``first_header``, as
    dicts keyed by header; backticks around cells are removed."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        cells = _cells(line)
        if cells and cells[0] == first_header:
            rows: list[dict[str, str]] = []
            for row in lines[index + 2 :]:
                if not row.startswith("|"):
                    break
                values = _cells(row)
                rows.append(dict(zip(cells, values, strict=True)))
            return rows
    raise AssertionError(f"no table with first header {first_header!r}")


def _cells(line: str) -> list[str]:
    if not line.startswith("|"):
        return []
    return [cell.strip().strip("`") for cell in line.strip().strip("|").split("|")]


_ROW = re.compile(r"^\|\s*`([a-zA-Z_:][a-zA-Z0-9_:]*)`\s*\|")
_H2 = re.compile(r"^##\s+(.*?)\s*$")


def documented_metric_names(markdown: str, section_prefix: str | None = None) -> set[str]:
    """Names in the first column of the doc's tables, optionally only under level-2 headings
    starting with ``section_prefix`` (e.g. "Agent")."""
    names: set[str] = set()
    section = ""
    for line in markdown.splitlines():
        heading = _H2.match(line)
        if heading:
            section = heading.group(1)
            continue
        row = _ROW.match(line)
        if row and (section_prefix is None or section.startswith(section_prefix)):
            names.add(row.group(1))
    return names


_TYPED_ROW = re.compile(r"^\|\s*`(nodesync_[a-zA-Z0-9_]*)`\s*\|\s*([a-z]+)\s*\|")


def documented_metric_types() -> dict[str, str]:
    """docs/metrics.md's nodesync metric names, each with its type (gauge, counter,
    histogram)."""
    found: dict[str, str] = {}
    for line in METRICS_DOC.read_text(encoding="utf-8").splitlines():
        row = _TYPED_ROW.match(line)
        if row:
            found[row.group(1)] = row.group(2)
    return found


def exposed_metric_names(exposition: str) -> set[str]:
    """Metric names as documented: family names, with ``_total`` for counters (the text parser
    strips it); a histogram is its base name. The ``<name>_created`` gauges prometheus_client adds
    next to its own counters and histograms are part of those metrics, not names of their own."""
    families = list(text_string_to_metric_families(exposition))
    with_created = {f.name for f in families if f.type in ("counter", "histogram", "summary")}
    return {
        f.name + "_total" if f.type == "counter" else f.name
        for f in families
        if not (f.name.endswith("_created") and f.name.removesuffix("_created") in with_created)
    }
