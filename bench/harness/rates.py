"""A writer's rate over time, from counter samples, against what its token bucket promises.

A token bucket of ``qps`` tokens per second holding at most ``burst`` allows at most
``burst + qps * T`` writes in any window of T seconds, and no more than that: a bucket that
starts full may average above ``qps`` over windows shorter than about ``burst / qps`` and
longer, by design. The report gives both the bound's check and the averages per window length.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.harness.samplers import CounterSample

#: Window lengths (seconds) over which the write rate is averaged.
WINDOWS = (1.0, 2.0, 3.0, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0)


def _active(samples: Sequence[CounterSample]) -> list[CounterSample]:
    """The samples from the one before the first change to the last change."""
    changes = [i for i in range(1, len(samples)) if samples[i].writes != samples[i - 1].writes]
    if not changes:
        return []
    return list(samples[changes[0] - 1 : changes[-1] + 1])


def _bound_check(window: Sequence[CounterSample], qps: float, burst: int) -> tuple[int, float]:
    """(pairs of samples between which more was written than the bucket allows, the largest
    excess over the bound: negative when it always held). Between two samples the counters
    were read somewhere inside each request, so the time between them is at most
    ``received_j - sent_i``: a sound bound to check against."""
    violations = 0
    worst_excess = -float("inf")
    for i, start in enumerate(window):
        for end in window[i + 1 :]:
            delta = end.writes - start.writes
            bound = burst + qps * (end.received - start.sent)
            worst_excess = max(worst_excess, delta - bound)
            if delta > bound:
                violations += 1
    return violations, worst_excess


def _best_averages(window: Sequence[CounterSample], mids: Sequence[float]) -> dict[float, float]:
    """The highest average rate over a window of each length in WINDOWS (the time of a sample
    is the middle of its request)."""
    best: dict[float, float] = {}
    for i, start in enumerate(window):
        for length in WINDOWS:
            j = next((k for k in range(i + 1, len(window)) if mids[k] - mids[i] >= length), None)
            if j is None:
                continue
            rate = (window[j].writes - start.writes) / (mids[j] - mids[i])
            best[length] = max(best.get(length, 0.0), rate)
    return best


def write_rates(samples: Sequence[CounterSample], qps: float, burst: int) -> dict[str, Any]:
    """The writes counted in ``samples`` over time: total, average, most in one second, the
    highest average per window length, and the token bucket's bound (``burst + qps * T``)."""
    window = _active(samples)
    if not window:
        return {"total": 0}
    total = window[-1].writes - window[0].writes
    span = window[-1].received - window[0].sent
    violations, worst_excess = _bound_check(window, qps, burst)
    mids = [(s.sent + s.received) / 2 for s in window]
    best = _best_averages(window, mids)
    calm = next(
        (
            length
            for length in WINDOWS
            if all(best.get(w, 0.0) <= qps for w in WINDOWS if w >= length)
        ),
        None,
    )
    per_second: list[int] = []
    t0 = mids[0]
    for k in range(1, len(window)):
        second = int(mids[k] - t0)
        while len(per_second) <= second:
            per_second.append(0)
        per_second[second] += window[k].writes - window[k - 1].writes
    return {
        "total": total,
        "active_seconds": span,
        "average_per_second": total / span if span > 0 else None,
        "max_in_one_second": max(per_second, default=0),
        "max_average_per_second_over": {f"{k:g}s": v for k, v in sorted(best.items())},
        "shortest_window_s_never_averaging_above_qps": calm,
        "token_bucket_bound_violations": violations,
        "closest_to_bound_writes": worst_excess,
        "per_second": per_second,
    }
