"""Instruments of the agent's subscription to containerd's task events, and of what each
runtime cycle found, by what started it."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge


class EventMetrics:
    """``nodesync_cri_events_up``, ``nodesync_cri_events_total{topic}`` and
    ``nodesync_runtime_changes_total{trigger}``; every label value exists from the start."""

    def __init__(
        self, registry: CollectorRegistry, topics: Iterable[str], triggers: Iterable[str]
    ) -> None:
        self._up = Gauge(
            "nodesync_cri_events_up",
            "1 while the agent is subscribed to containerd's task events; 0 while it is not "
            "and changes wait for the next periodic relist.",
            registry=registry,
        )
        self._events = Counter(
            "nodesync_cri_events",
            "containerd task events received (start, exit, oom; an OOM kill's repeated "
            "events once).",
            labelnames=["topic"],
            registry=registry,
        )
        self._changes = Counter(
            "nodesync_runtime_changes",
            "Runtime sync cycles that found a pod sandbox or container changed, by what "
            "started the cycle: a task event, a (re)subscription, or the period.",
            labelnames=["trigger"],
            registry=registry,
        )
        for topic in topics:
            self._events.labels(topic=topic)
        for trigger in triggers:
            self._changes.labels(trigger=trigger)

    def set_up(self, up: bool) -> None:
        self._up.set(1 if up else 0)

    def event(self, topic: str) -> None:
        self._events.labels(topic=topic).inc()

    def changed(self, trigger: str) -> None:
        self._changes.labels(trigger=trigger).inc()
