"""bench.controller_sync's writers: the objects it creates and the renewals it sends are the
ones it later compares /metrics with, every renewal applied, in the order written; a joining
node's pod is one the controller counts as its first running workload."""

from __future__ import annotations

from pathlib import Path

from bench.controller_joins import register
from bench.controller_sync import (
    end_watch_floor,
    json_lines,
    list_floor,
    populate_nodes,
    renew_leases,
)
from bench.harness.apiserver import SimAPIServer
from bench.harness.objects import lease_path
from exporter.kube.convert import pod_start, timestamp
from tests.support.wait import until_async


async def _renew_times(api: SimAPIServer) -> dict[str, float]:
    listed = await api.call("GET", lease_path())
    found = {}
    for lease in listed["items"]:
        value = timestamp(lease["spec"]["renewTime"])
        assert value is not None
        found[lease["metadata"]["name"]] = value
    return found


async def test_the_renewals_written_are_the_leases_last_renew_times(tmp_path: Path) -> None:
    api = SimAPIServer(tmp_path)
    try:
        await api.start()
        names = [f"node-{i:04d}" for i in range(450)]  # more than one batch of creates
        written = await populate_nodes(api, names, failing=2)
        nodes = await api.call("GET", "/api/v1/nodes")
        assert [n["metadata"]["name"] for n in nodes["items"]] == names
        assert await _renew_times(api) == written

        acked: dict[str, float] = {}
        before = dict(written)
        renewals = await renew_leases(api, names[:50], written, acked, seconds=1.0, rate=400)
        assert (renewals.issued, renewals.ok, renewals.failed) == (400, 400, 0)
        assert sum(renewals.sizes) == 400
        assert len(renewals.sizes) > 1  # sent as due, not all at once
        assert set(acked) == set(names[:50])
        assert all(written[n] > before[n] for n in names[:50])
        assert await _renew_times(api) == written
        counted = await api.counters()
        assert counted[("patch", "leases", 200)] == 400
        assert counted[("create", "nodes", 201)] == 450
    finally:
        await api.close()


async def test_a_joining_node_gets_a_workload_pod_the_controller_counts_as_running(
    tmp_path: Path,
) -> None:
    api = SimAPIServer(tmp_path)
    try:
        await api.start()
        written = await register(api, ["join-0000", "join-0001"], 0)
        assert set(written) == {"join-0000", "join-0001"}
        pods = await api.call(
            "GET", "/api/v1/pods", params={"fieldSelector": "status.phase=Running"}
        )
        starts = sorted(pod_start(p) or ("", None) for p in pods["items"])
        assert [node for node, _ in starts] == ["join-0000", "join-0001"]
        assert all(at is not None for _, at in starts)
    finally:
        await api.close()


async def test_the_list_and_watch_floor_holds_the_lists_and_gets_every_renewal(
    tmp_path: Path,
) -> None:
    api = SimAPIServer(tmp_path)
    watcher = None
    try:
        await api.start()
        names = [f"node-{i:04d}" for i in range(30)]
        written = await populate_nodes(api, names)
        floors, watcher = await list_floor(api, tmp_path, len(names))
        assert floors.list_s > 0
        assert floors.list_peak_rss_bytes > 0
        renewals = await renew_leases(api, names, written, {}, seconds=0.5, rate=200)
        assert renewals.ok == 100
        await until_async(
            lambda: json_lines(tmp_path / "floor-list.log")[-1].get("events") == 100 or None,
            timeout=30,
            what="the floor's count of events",
        )
        end_watch_floor(watcher, floors)
        assert floors.watch_events == 100
        assert floors.watch_peak_rss_bytes >= floors.list_peak_rss_bytes
    finally:
        if watcher is not None:
            watcher.stop()
        await api.close()
