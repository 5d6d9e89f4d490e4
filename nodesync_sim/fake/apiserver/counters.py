"""Request counters by (verb, resource, HTTP code), readable from Python.

`resource` is the plural with its subresource ("pods/eviction", "nodes/status"); non-resource
requests count under their path. Tests use this to assert how many API writes code made.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import NamedTuple

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


class RequestKey(NamedTuple):
    verb: str
    resource: str
    code: int


class RequestCounters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[RequestKey] = Counter()

    def record(self, verb: str, resource: str, code: int) -> None:
        with self._lock:
            self._counts[RequestKey(verb, resource, code)] += 1

    def snapshot(self) -> dict[RequestKey, int]:
        with self._lock:
            return dict(self._counts)

    def count(
        self, verb: str | None = None, resource: str | None = None, code: int | None = None
    ) -> int:
        """Requests matching every given filter (None matches anything)."""
        with self._lock:
            return sum(
                n
                for key, n in self._counts.items()
                if (verb is None or key.verb == verb)
                and (resource is None or key.resource == resource)
                and (code is None or key.code == code)
            )

    def writes(self, resource: str | None = None) -> int:
        """Write requests (create/update/patch/delete), any outcome."""
        return sum(self.count(verb=v, resource=resource) for v in WRITE_VERBS)

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()
