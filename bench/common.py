"""Small helpers the benchmarks share."""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence
from datetime import UTC, datetime


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rfc3339(at: float | None = None) -> str:
    moment = datetime.fromtimestamp(time.time() if at is None else at, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(at: float | None = None) -> str:
    """A Kubernetes MicroTime: RFC 3339 UTC with microseconds."""
    moment = datetime.fromtimestamp(time.time() if at is None else at, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1) of a non-empty sample."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]
