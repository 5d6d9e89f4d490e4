"""A prometheus_client collector that serves the families of the latest snapshot."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from prometheus_client.core import Metric
from prometheus_client.registry import Collector


class SnapshotCollector(Collector):
    """Yields whatever ``latest()`` returns at scrape time; building families is the caller's job
    (done once per sync), so a scrape never waits for a source."""

    def __init__(self, latest: Callable[[], Sequence[Metric]]) -> None:
        self._latest = latest

    def collect(self) -> Iterable[Metric]:
        yield from self._latest()

    def describe(self) -> Iterable[Metric]:
        # Empty: registration must not call collect(); names are not checked for clashes.
        return []
