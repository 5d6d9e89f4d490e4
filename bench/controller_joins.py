"""Nodes that join while the controller watches, for ``bench.controller_sync --joining N``: the
waves' join histograms measured at scale.

The benchmark registers its nodes before the controller starts. A controller observes a join
stage in its wave's histogram (``nodesync_wave_join_stage_duration_seconds``) only when it sees
the stage reached after it started (exporter.model.joins: a controller that starts again does
not observe again what the one before it did), so nodes registered before it have their join
stages as node series and no histogram. With ``--joining N``, N more Nodes and their Leases
are registered, Ready, once the controller is synced, as a scale-out would add them, with a
workload pod each that kubelet reports Running, and the benchmark waits until each stage they
reach (``lease``, ``ready``, ``network_ready``, ``gates_cleared``, ``pod_running``: every
object the join SLIs read) shows in the histograms.

They are registered in a later second than the one the controller was synced in: the API
server's times have whole seconds, so a stage reached in the second the controller started
watching reads as before that, and is not observed.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence

import aiohttp

from bench.harness.apiserver import SimAPIServer
from bench.harness.exposition import samples
from bench.harness.objects import (
    lease_body,
    lease_path,
    registered_node,
    running_status,
    workload_pod,
)
from bench.harness.pacing import bounded
from exporter.kube.convert import timestamp
from exporter.model.rfc3339 import format_micro_time, format_time

HISTOGRAM = "nodesync_wave_join_stage_duration_seconds"
#: The stages a Ready node with a running workload pod reaches.
STAGES = ("lease", "ready", "network_ready", "gates_cleared", "pod_running")


async def register(api: SimAPIServer, names: Sequence[str], first_index: int) -> dict[str, float]:
    """Nodes (Ready, registered now), their Leases and a running workload pod on each; the
    renew timestamps written."""
    now = time.time()
    nodes = await bounded(
        [
            api.create("/api/v1/nodes", registered_node(n, first_index + i, now))
            for i, n in enumerate(names)
        ],
        32,
    )
    written = {}
    for node in nodes:
        name = node["metadata"]["name"]
        renew = format_micro_time(time.time())
        await api.create(lease_path(), lease_body(node, renew))
        value = timestamp(renew)
        assert value is not None, renew
        written[name] = value
    for name in written:
        pod = f"web-{name}"
        await api.create("/api/v1/namespaces/default/pods", workload_pod(pod, name))
        await api.merge_patch(
            f"/api/v1/namespaces/default/pods/{pod}/status",
            running_status(format_time(time.time())),
        )
    return written


def _observed(body: bytes) -> dict[str, float]:
    """Nodes observed per stage (the histograms' counts, summed over the waves)."""
    found = dict.fromkeys(STAGES, 0.0)
    for labels, value in samples(body, f"{HISTOGRAM}_count").items():
        stage = dict(labels).get("stage", "")
        if stage in found:
            found[stage] += value
    return found


async def join(
    api: SimAPIServer,
    http: aiohttp.ClientSession,
    base: str,
    names: Sequence[str],
    first_index: int,
    within: float = 60,
) -> tuple[dict[str, float], dict[str, object]]:
    """Register ``names`` (the controller is synced: it started watching before now) in the
    next second, and wait until every stage of each shows in the histograms; the renew
    timestamps written, and what /metrics showed then."""
    await asyncio.sleep(math.floor(time.time()) + 1 - time.time())
    started = time.monotonic()
    written = await register(api, names, first_index)
    deadline = started + within
    while True:
        async with http.get(f"{base}/metrics") as response:
            body = await response.read()
        observed = _observed(body)
        if all(v >= len(names) for v in observed.values()):
            break
        if time.monotonic() > deadline:
            shown = [ln for ln in body.splitlines() if b"join-" in ln or b"joins_total" in ln]
            raise AssertionError(
                f"join stages observed: {observed} of {len(names)} nodes each; {shown[:12]}"
            )
        await asyncio.sleep(0.2)
    series = sum(1 for ln in body.splitlines() if ln.startswith(HISTOGRAM.encode()))
    return written, {
        "nodes": len(names),
        "observed_s": time.monotonic() - started,
        "observed_by_stage": observed,
        "histogram_series": series,
    }
