"""Read metric names from docs/metrics.md and from an exposition, to check one against the other.

The doc lists metrics in markdown tables whose first column is the name in backticks. A table
belongs to the nearest level-2 heading above it (e.g. "## Agent: runtime"), so a check can be
limited to the sections of one role.
"""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"

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
