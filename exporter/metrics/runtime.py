"""Metric families for what the container runtime (CRI) reports."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from exporter.model.runtime import ContainerState, RuntimeSnapshot, RuntimeStats, SandboxState
from exporter.model.terminations import REASONS, LoopState


def runtime_families(
    snapshot: RuntimeSnapshot | None,
    terminations: Mapping[str, int],
    loops: Sequence[LoopState],
    stats: RuntimeStats | None = None,
) -> list[Metric]:
    """Families for one scrape. ``snapshot`` is None when the runtime could not be asked: then
    only ``nodesync_cri_up`` (0), the termination counters and the loops are exported;
    everything read from the runtime itself is absent, the containers' resource usage too.
    ``stats`` is the last resource usage read (on the stats period), None when there is none
    (stats off, not read yet, or the last read failed): then its families are absent. Pod
    phases are in :mod:`exporter.metrics.pods`, shared with the API server's view."""
    up = GaugeMetricFamily(
        "nodesync_cri_up", "1 if the last sync could read the container runtime over CRI, else 0."
    )
    up.add_metric([], 1.0 if snapshot is not None else 0.0)
    families: list[Metric] = [up, _terminations(terminations), *_loops(loops)]
    if snapshot is not None:
        families.extend(_snapshot_families(snapshot))
        if stats is not None:
            families.extend(_stats_families(stats))
    return families


def _terminations(terminations: Mapping[str, int]) -> Metric:
    family = CounterMetricFamily(
        "nodesync_container_terminations",
        "Container terminations observed by the agent since it started, by bucketed reason.",
        labels=["reason"],
    )
    for reason in REASONS:
        family.add_metric([reason], float(terminations.get(reason, 0)))
    return family


def _loops(loops: Sequence[LoopState]) -> list[Metric]:
    labels = ["namespace", "pod", "container"]
    oom = GaugeMetricFamily(
        "nodesync_container_oom_loop",
        "Containers in an OOM loop: OOMKilled terminations within the loop window "
        "(series exists only while the loop lasts).",
        labels=labels,
    )
    crash = GaugeMetricFamily(
        "nodesync_container_crash_loop",
        "Containers in a crash loop: non-zero terminations within the loop window "
        "(series exists only while the loop lasts).",
        labels=labels,
    )
    by_kind = {"oom_loop": oom, "crash_loop": crash}
    for loop in loops:
        by_kind[loop.kind].add_metric(
            [loop.namespace, loop.pod, loop.container], float(loop.terminations)
        )
    return [oom, crash]


def _snapshot_families(snapshot: RuntimeSnapshot) -> list[Metric]:
    families: list[Metric] = []

    if snapshot.version is not None:
        info = GaugeMetricFamily(
            "nodesync_cri_runtime_info",
            "Name and version of the container runtime; always 1.",
            labels=["runtime_name", "runtime_version", "runtime_api_version"],
        )
        v = snapshot.version
        info.add_metric([v.runtime_name, v.runtime_version, v.runtime_api_version], 1.0)
        families.append(info)

    conditions = GaugeMetricFamily(
        "nodesync_cri_runtime_condition",
        "Runtime conditions reported by CRI Status (1 true, 0 false).",
        labels=["condition"],
    )
    for cond in sorted(snapshot.conditions, key=lambda c: c.type):
        conditions.add_metric([cond.type], 1.0 if cond.status else 0.0)
    families.append(conditions)

    sandboxes = GaugeMetricFamily(
        "nodesync_pod_sandboxes",
        "Pod sandboxes the runtime holds, per state.",
        labels=["state"],
    )
    for sandbox_state in SandboxState:
        n = sum(1 for s in snapshot.sandboxes if s.state is sandbox_state)
        sandboxes.add_metric([sandbox_state.value], float(n))
    families.append(sandboxes)

    containers = GaugeMetricFamily(
        "nodesync_containers",
        "Containers the runtime holds (every attempt, including exited ones kept for logs), "
        "per state.",
        labels=["state"],
    )
    for container_state in ContainerState:
        n = sum(1 for c in snapshot.containers if c.state is container_state)
        containers.add_metric([container_state.value], float(n))
    families.append(containers)

    used = GaugeMetricFamily(
        "nodesync_cri_image_filesystem_used_bytes",
        "Bytes used by images on the runtime's image filesystem (CRI ImageFsInfo).",
        labels=["mountpoint"],
    )
    inodes = GaugeMetricFamily(
        "nodesync_cri_image_filesystem_inodes_used",
        "Inodes used by images on the runtime's image filesystem (CRI ImageFsInfo).",
        labels=["mountpoint"],
    )
    for fs in sorted(snapshot.image_filesystems, key=lambda f: f.mountpoint):
        if fs.used_bytes is not None:
            used.add_metric([fs.mountpoint], float(fs.used_bytes))
        if fs.inodes_used is not None:
            inodes.add_metric([fs.mountpoint], float(fs.inodes_used))
    families.extend([used, inodes])
    return families


def _stats_families(stats: RuntimeStats) -> list[Metric]:
    working_set = GaugeMetricFamily(
        "nodesync_runtime_memory_working_set_bytes",
        "Sum of the memory working set of all containers the runtime reports stats for "
        "(as of nodesync_runtime_stats_timestamp_seconds).",
    )
    working_set.add_metric(
        [], float(sum(s.memory_working_set_bytes or 0 for s in stats.containers))
    )
    writable = GaugeMetricFamily(
        "nodesync_runtime_writable_layer_bytes",
        "Sum of the writable layer size of all containers the runtime reports stats for "
        "(as of nodesync_runtime_stats_timestamp_seconds).",
    )
    writable.add_metric([], float(sum(s.writable_layer_bytes or 0 for s in stats.containers)))
    taken = GaugeMetricFamily(
        "nodesync_runtime_stats_timestamp_seconds",
        "Unix time the containers' resource usage exported was read (CRI ListContainerStats, "
        "every --stats.period).",
    )
    taken.add_metric([], stats.taken_at)
    return [working_set, writable, taken]
