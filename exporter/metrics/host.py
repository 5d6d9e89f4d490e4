"""Metric families for the host: memory, kubelet's filesystems, pids and local pressure."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client.core import GaugeMetricFamily, Metric

from exporter.model.host import HostSnapshot


def host_families(host: HostSnapshot | None, pressure: Mapping[str, bool]) -> list[Metric]:
    """Families for one scrape; none when the host could not be read."""
    if host is None:
        return []

    def gauge(name: str, doc: str, value: float) -> Metric:
        family = GaugeMetricFamily(name, doc)
        family.add_metric([], value)
        return family

    families: list[Metric] = [
        gauge(
            "nodesync_host_memory_available_bytes",
            "Memory available on the host (kubelet's memory.available signal source).",
            float(host.memory_available_bytes),
        ),
        gauge(
            "nodesync_host_memory_total_bytes",
            "Total memory of the host.",
            float(host.memory_total_bytes),
        ),
    ]

    fs_specs = [
        ("nodesync_host_filesystem_available_bytes", "Bytes available", "available_bytes"),
        ("nodesync_host_filesystem_size_bytes", "Size in bytes", "size_bytes"),
        ("nodesync_host_filesystem_inodes_free", "Free inodes", "inodes_free"),
        ("nodesync_host_filesystem_inodes", "Total inodes", "inodes_total"),
    ]
    filesystems = sorted(host.filesystems, key=lambda f: f.role)
    for name, what, attr in fs_specs:
        family = GaugeMetricFamily(
            name,
            f"{what} of the filesystem kubelet calls fs (nodefs: kubelet's root dir, "
            "imagefs: the runtime's root dir).",
            labels=["fs"],
        )
        for fs in filesystems:
            family.add_metric([fs.role], float(getattr(fs, attr)))
        families.append(family)

    families.append(
        gauge("nodesync_host_pids", "Processes and threads in use on the host.", host.pids_in_use)
    )
    families.append(gauge("nodesync_host_pids_limit", "The host's pid_max.", float(host.pid_max)))

    flags = GaugeMetricFamily(
        "nodesync_host_pressure",
        "1 when the resource is below its eviction threshold (kubelet's defaults), else 0.",
        labels=["resource"],
    )
    for resource in sorted(pressure):
        flags.add_metric([resource], 1.0 if pressure[resource] else 0.0)
    families.append(flags)
    return families
