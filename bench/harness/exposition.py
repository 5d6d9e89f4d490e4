"""Values out of a Prometheus text exposition, as a scrape of nodesync returns it.

Two ways: :func:`parse` reads every family with prometheus_client's parser (exact, slower);
:func:`sample_value` and :func:`samples` scan the raw lines of one metric, for the loops that
scrape often and must not compete with the process they measure for the CPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from prometheus_client.parser import text_string_to_metric_families

#: Samples by name: (labels, value) of each.
Families = dict[str, list[tuple[dict[str, str], float]]]
#: A sample's labels, hashable.
Labels = frozenset[tuple[str, str]]


def parse(text: str) -> Families:
    """Every sample of the exposition, by sample name (``_count``, ``_sum`` ... apart)."""
    out: Families = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return out


def total(
    families: Mapping[str, Sequence[tuple[dict[str, str], float]]], name: str, **labels: str
) -> float:
    """The sum of the samples named ``name`` whose labels include ``labels``."""
    return sum(
        v for lab, v in families.get(name, []) if all(lab.get(k) == x for k, x in labels.items())
    )


def sample_value(body: bytes, sample: bytes) -> float | None:
    """The value of one sample line (its name and labels exactly as rendered), or None."""
    prefix = sample + b" "
    for line in body.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix) :])
    return None


def samples(body: bytes, name: str) -> dict[Labels, float]:
    """Every sample of one metric, by its labels (for label values without commas or escapes,
    as nodesync's are)."""
    found: dict[Labels, float] = {}
    prefix = name.encode() + b"{"
    for line in body.splitlines():
        if line.startswith(prefix):
            head, _, value = line.rpartition(b"} ")
            pairs = [p.partition("=") for p in head[len(prefix) :].decode().split(",") if p]
            found[frozenset((k, v.strip('"')) for k, _, v in pairs)] = float(value)
    return found
