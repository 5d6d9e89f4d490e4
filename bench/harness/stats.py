"""Percentiles and summaries of durations, as every benchmark reports them."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1) of a non-empty sample."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def summary_ms(samples: Sequence[float]) -> dict[str, float]:
    """Count, p50/p90/p99 and max of durations in seconds, in milliseconds ({"count": 0} for
    none)."""
    if not samples:
        return {"count": 0}
    return {
        "count": len(samples),
        "p50_ms": statistics.median(samples) * 1000,
        "p90_ms": percentile(samples, 0.9) * 1000,
        "p99_ms": percentile(samples, 0.99) * 1000,
        "max_ms": max(samples) * 1000,
    }
