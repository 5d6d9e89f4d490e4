"""A synthetic node with something in every series, for rendering all agent families at once."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from exporter.agent.sync import TRIGGERS
from exporter.metrics.cleanup import CleanupTotals, cleanup_families
from exporter.metrics.collector import SnapshotCollector
from exporter.metrics.cri_events import EventMetrics
from exporter.metrics.cri_requests import CRIRequestMetrics, SyncMetrics
from exporter.metrics.drift import drift_families
from exporter.metrics.host import host_families
from exporter.metrics.http import CLIENT_ERROR_REASONS, ClientErrorMetrics
from exporter.metrics.kubelet import kubelet_families
from exporter.metrics.pod_problems import pod_problem_families
from exporter.metrics.pods import pods_family
from exporter.metrics.runtime import runtime_families
from exporter.metrics.selfmetrics import (
    SourceStatus,
    build_info_family,
    register_process_metrics,
    self_families,
    start_family,
)
from exporter.model.drift import compute_drift
from exporter.model.host import FilesystemStat, HostSnapshot, KubeletSnapshot
from exporter.model.kube import ContainerStatusInfo, PodInfo
from exporter.model.phase import phase_counts
from exporter.model.pod_problems import api_phase_counts, pod_problems
from exporter.model.pressure import pressure
from exporter.model.runtime import (
    ContainerStats,
    FilesystemUsage,
    RuntimeCondition,
    RuntimeSnapshot,
    RuntimeStats,
    RuntimeVersion,
    SandboxState,
)
from exporter.model.runtime_events import TOPIC_LABELS
from exporter.model.terminations import TerminationTracker
from tests.model.builders import created, exited, oom, running, sandbox, unknown

NOW = 1_700_000_000.0
GI = 1024**3


def rich_runtime() -> RuntimeSnapshot:
    return RuntimeSnapshot(
        taken_at=NOW,
        version=RuntimeVersion("containerd", "1.6.20", "v1"),
        conditions=(
            RuntimeCondition("RuntimeReady", True),
            RuntimeCondition("NetworkReady", False, reason="NetworkPluginNotReady"),
        ),
        sandboxes=(
            sandbox("u-run", name="web", created_at=NOW - 500),
            sandbox("u-oom", name="hog", namespace="batch", created_at=NOW - 500),
            sandbox("u-wait", name="slow", created_at=NOW - 10),
            sandbox("u-lost", name="lost", state=SandboxState.NOTREADY, created_at=NOW - 900),
            sandbox("u-done", name="job", state=SandboxState.NOTREADY, created_at=NOW - 900),
        ),
        containers=(
            running(uid="u-run", pod="web"),
            oom("hog", 0, finished_at=NOW - 120, uid="u-oom", pod="hog", namespace="batch"),
            oom("hog", 1, finished_at=NOW - 60, uid="u-oom", pod="hog", namespace="batch"),
            exited(
                "hog",
                2,
                exit_code=1,
                finished_at=NOW - 30,
                uid="u-oom",
                pod="hog",
                namespace="batch",
            ),
            created("hog", 3, uid="u-oom", pod="hog", namespace="batch"),
            created(uid="u-wait", pod="slow"),
            unknown(uid="u-lost", pod="lost"),
            exited(uid="u-done", pod="job", finished_at=NOW - 800),
        ),
        image_filesystems=(
            FilesystemUsage(
                "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs",
                NOW,
                used_bytes=3 * GI,
                inodes_used=40_000,
            ),
        ),
    )


def rich_stats() -> RuntimeStats:
    """The containers' resource usage, read 20 s before :func:`rich_runtime`'s state."""
    return RuntimeStats(
        taken_at=NOW - 20,
        containers=(
            ContainerStats(
                "c1", NOW - 20, memory_working_set_bytes=200_000_000, writable_layer_bytes=4096
            ),
            ContainerStats("c2", NOW - 20, memory_working_set_bytes=50_000_000),
        ),
    )


def rich_host() -> HostSnapshot:
    return HostSnapshot(
        taken_at=NOW,
        memory_total_bytes=8 * GI,
        memory_available_bytes=50 * 1024 * 1024,
        filesystems=(
            FilesystemStat("nodefs", "/var/lib/kubelet", 100 * GI, 40 * GI, 6_000_000, 5_000_000),
            FilesystemStat("imagefs", "/var/lib/containerd", 50 * GI, 5 * GI, 3_000_000, 2_900_000),
        ),
        pids_in_use=812,
        pid_max=4_194_304,
    )


def rich_kubelet() -> KubeletSnapshot:
    return KubeletSnapshot(
        taken_at=NOW, healthy=True, pod_uids=frozenset({"u-run", "u-oom"}), pod_dir_readable=True
    )


def rich_api_pods() -> list[PodInfo]:
    """The API server's pods for the node of :func:`rich_runtime`: a crash-looping pod, a pod
    Pending for minutes, a finished job, and a pod the runtime has no sandbox for."""

    def api_pod(uid: str, name: str, phase: str, **kw: Any) -> PodInfo:
        fields: dict[str, Any] = {"namespace": "default", "created_at": NOW - 600} | kw
        return PodInfo(uid=uid, name=name, node_name="node-1", phase=phase, **fields)

    return [
        api_pod("u-run", "web", "Running"),
        api_pod(
            "u-oom",
            "hog",
            "Running",
            namespace="batch",
            containers=(
                ContainerStatusInfo(
                    "hog",
                    "waiting",
                    restart_count=3,
                    waiting_reason="CrashLoopBackOff",
                    last_terminated_reason="OOMKilled",
                    last_terminated_exit_code=137,
                ),
            ),
        ),
        api_pod(
            "u-wait",
            "slow",
            "Pending",
            scheduled_at=NOW - 300,
            containers=(ContainerStatusInfo("app", "waiting", waiting_reason="ImagePullBackOff"),),
        ),
        api_pod("u-done", "job", "Succeeded"),
        api_pod("u-gone", "ghost", "Running"),
    ]


def rich_agent_exposition() -> str:
    """Every agent family from this module's snapshots, instruments included, as one scrape."""
    snap = rich_runtime()
    tracker = TerminationTracker()
    tracker.observe(snap.containers, NOW)
    host = rich_host()
    families = [
        *runtime_families(snap, tracker.totals(), tracker.loops(NOW), rich_stats()),
        pods_family(phase_counts(snap, ()), api_phase_counts(rich_api_pods())),
        *host_families(host, pressure(host)),
        *kubelet_families(rich_kubelet()),
        *pod_problem_families(pod_problems(rich_api_pods(), NOW)),
        *drift_families(
            compute_drift(
                rich_api_pods(),
                snap,
                rich_kubelet().pod_uids | {"u-stray"},
                NOW,
                first_seen={"u-stray": NOW - 3600},
            )
        ),
        *self_families(
            {
                "runtime": SourceStatus(up=True, last_success_timestamp=NOW),
                "host": SourceStatus(up=True, last_success_timestamp=NOW),
                "kubelet": SourceStatus(up=False, last_success_timestamp=None),
            }
        ),
        build_info_family("0.1.0"),
        start_family(NOW - 600),
        *cleanup_families(
            CleanupTotals(
                done=3,
                failed=1,
                removed_sandboxes=4,
                removed_containers=1,
                last_finished_at=NOW - 30,
            )
        ),
    ]
    registry = CollectorRegistry()
    cri = CRIRequestMetrics(registry)
    cri.observe("list_podsandbox", 0.004, "OK")
    cri.observe("container_status", 2.0, "DEADLINE_EXCEEDED")
    SyncMetrics(registry).observe(0.3)
    events = EventMetrics(registry, TOPIC_LABELS, TRIGGERS)
    events.set_up(True)
    events.event("exit")
    events.changed("event")
    listener = ClientErrorMetrics(registry)
    for reason in CLIENT_ERROR_REASONS:
        listener.observe(reason)
    listener.in_flight.set(1)
    register_process_metrics(registry)
    registry.register(SnapshotCollector(lambda: families))
    return generate_latest(registry).decode()
