"""Instruments the API server boundary updates as it works: requests, watches, informers.

:class:`KubeRequestMetrics` is the observer exporter.kube's API wrapper and informers report to
(it matches their observer protocol structurally; this module imports no I/O library).
"""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram

#: client-go's buckets for rest_client_request_duration_seconds.
KUBE_REQUEST_BUCKETS: Final = (
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0
)  # fmt: skip

WATCH: Final = "watch"


def _succeeded(code: str) -> bool:
    return len(code) == 3 and code.startswith("2")


class KubeRequestMetrics:
    """Counts and times API requests, and counts what informers do.

    Labels: ``resource`` is the plural (nodes, leases, pods ...), ``verb`` the Kubernetes verb
    (get, list, watch, create, patch, delete ...), ``code`` the HTTP status, ``unreachable``
    (no answer: refused, reset, timeout) or ``invalid_response`` (a 2xx body that is not JSON),
    ``type`` a watch event type (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self._duration = Histogram(
            "nodesync_kube_request_duration_seconds",
            "Duration of API server requests other than watches, successful or not.",
            labelnames=["resource", "verb"],
            buckets=KUBE_REQUEST_BUCKETS,
            registry=registry,
        )
        self._errors = Counter(
            "nodesync_kube_request_errors_total",
            "API server requests that failed, by HTTP status code or 'unreachable'.",
            labelnames=["resource", "verb", "code"],
            registry=registry,
        )
        self._watches = Counter(
            "nodesync_kube_watches_total",
            "Watch streams the API server opened.",
            labelnames=["resource"],
            registry=registry,
        )
        self._relists = Counter(
            "nodesync_informer_relists_total",
            "Lists informers made again because their resourceVersion expired (410 Gone).",
            labelnames=["resource"],
            registry=registry,
        )
        self._events = Counter(
            "nodesync_informer_watch_events_total",
            "Watch events informers received.",
            labelnames=["resource", "type"],
            registry=registry,
        )
        self._skipped = Counter(
            "nodesync_informer_skipped_objects_total",
            "Objects informers skipped because they could not be converted.",
            labelnames=["resource"],
            registry=registry,
        )
        self._leader_errors = Counter(
            "nodesync_leader_election_errors_total",
            "Leader-election attempts that failed for another reason than a lost race, by HTTP "
            "status code, 'unreachable' or 'timeout'.",
            labelnames=["code"],
            registry=registry,
        )

    def observe_request(self, resource: str, verb: str, duration_seconds: float, code: str) -> None:
        ok = _succeeded(code)
        if verb == WATCH:
            if ok:
                self._watches.labels(resource=resource).inc()
        else:
            self._duration.labels(resource=resource, verb=verb).observe(duration_seconds)
        if not ok:
            self._errors.labels(resource=resource, verb=verb, code=code).inc()

    def observe_watch_event(self, resource: str, event_type: str) -> None:
        self._events.labels(resource=resource, type=event_type).inc()

    def observe_relist(self, resource: str) -> None:
        self._relists.labels(resource=resource).inc()

    def observe_skipped_object(self, resource: str) -> None:
        self._skipped.labels(resource=resource).inc()

    def observe_leader_election_error(self, code: str) -> None:
        self._leader_errors.labels(code=code).inc()
