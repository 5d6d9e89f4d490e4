"""Instruments the agent updates as it works: CRI call latency and errors, sync duration."""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram


def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    """Prometheus' ExponentialBuckets (client_golang)."""
    return tuple(start * factor**i for i in range(count))


#: kubelet's buckets for its runtime operation durations: ExponentialBuckets(0.005, 2.5, 14).
CRI_BUCKETS: Final = exponential_buckets(0.005, 2.5, 14)

#: One sync cycle reads the runtime's state, each call with a deadline of a few seconds.
SYNC_BUCKETS: Final = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

GRPC_OK: Final = "OK"


class CRIRequestMetrics:
    """The CRI client's observer: one call per CRI request, successful or not.

    ``operation_type`` is kubelet's name for the call (list_podsandbox, list_containers,
    container_status, ...); ``grpc_code`` is the gRPC status code name (OK, DEADLINE_EXCEEDED,
    UNAVAILABLE, ...). Every call is timed; only non-OK calls count as errors.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self._duration = Histogram(
            "nodesync_cri_request_duration_seconds",
            "Duration of CRI requests, successful or not.",
            labelnames=["operation_type"],
            buckets=CRI_BUCKETS,
            registry=registry,
        )
        self._errors = Counter(
            "nodesync_cri_request_errors_total",
            "CRI requests that ended with a gRPC status other than OK.",
            labelnames=["operation_type", "grpc_code"],
            registry=registry,
        )

    def observe(self, operation_type: str, duration_seconds: float, grpc_code: str) -> None:
        self._duration.labels(operation_type=operation_type).observe(duration_seconds)
        if grpc_code != GRPC_OK:
            self._errors.labels(operation_type=operation_type, grpc_code=grpc_code).inc()


class SyncMetrics:
    """Duration of the agent's sync cycles."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._duration = Histogram(
            "nodesync_sync_duration_seconds",
            "Duration of one agent sync cycle: reading the runtime's state and publishing it "
            "(host and kubelet probes and container stats on schedules of their own).",
            buckets=SYNC_BUCKETS,
            registry=registry,
        )

    def observe(self, seconds: float) -> None:
        self._duration.observe(seconds)
