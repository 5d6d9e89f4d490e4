"""Fault injection: latency, failing requests, compaction and dropped watches, set at runtime.

`Faults` is the state; the app consults it for every Kubernetes request (after authentication).
Tests set it from Python (`server.faults`) or over HTTP (`/_sim/faults`, see the app module).
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(slots=True)
class FailureRule:
    """Answer the next `count` matching requests with `status` (400, 429, 500 or 503)."""

    status: int
    count: int
    path_prefix: str = ""
    verb: str = ""  # a Kubernetes verb (get, list, watch, create, update, patch, delete)
    retry_after: int = 1  # seconds, for 429

    def matches(self, path: str, verb: str) -> bool:
        return path.startswith(self.path_prefix) and (not self.verb or self.verb == verb)


@dataclass(slots=True)
class LatencyRule:
    seconds: float
    path_prefix: str = ""
    verb: str = ""

    def matches(self, path: str, verb: str) -> bool:
        return path.startswith(self.path_prefix) and (not self.verb or self.verb == verb)


class Faults:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failures: list[FailureRule] = []
        self._latency: list[LatencyRule] = []

    def fail_next(
        self,
        count: int,
        status: int = 500,
        *,
        path_prefix: str = "",
        verb: str = "",
        retry_after: int = 1,
    ) -> None:
        if status not in (400, 429, 500, 503):
            raise ValueError("injected failures are 400, 429, 500 or 503")
        if count < 1:
            raise ValueError("count must be positive")
        with self._lock:
            self._failures.append(FailureRule(status, count, path_prefix, verb, retry_after))

    def add_latency(self, seconds: float, *, path_prefix: str = "", verb: str = "") -> None:
        if seconds < 0:
            raise ValueError("latency must not be negative")
        with self._lock:
            self._latency.append(LatencyRule(seconds, path_prefix, verb))

    def clear(self) -> None:
        with self._lock:
            self._failures.clear()
            self._latency.clear()

    def latency_for(self, path: str, verb: str) -> float:
        with self._lock:
            return sum(r.seconds for r in self._latency if r.matches(path, verb))

    def take_failure(self, path: str, verb: str) -> FailureRule | None:
        """The first matching failure rule, consuming one of its count."""
        with self._lock:
            for rule in self._failures:
                if rule.matches(path, verb):
                    rule.count -= 1
                    if rule.count <= 0:
                        self._failures.remove(rule)
                    return rule
            return None

    def describe(self) -> dict[str, Any]:
        with self._lock:
            return {
                "failures": [asdict(r) for r in self._failures],
                "latency": [asdict(r) for r in self._latency],
            }
