"""The simulated nodes' agent metrics: made by the agent's own code from each node's pods and
runtime, served on one port with a node label on every series, while the node exists."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric

from exporter.metrics.collector import SnapshotCollector
from nodesync_sim.fake.scaleout.agentview import join_rendered, render_node, with_node_label
from tests.metrics.exposition import labels, series
from tests.metrics.promtool import check_metrics
from tests.sim.fake.scaleout.support import doc, scrape, simulating
from tests.support.wait import until_async

WAVE = {
    "name": "w",
    "count": 4,
    "pods_per_node": 1,
    "daemonset_pods_per_node": 1,
    "faults": [
        {"kind": "crash_loop", "nodes": ["w-001"]},
        {"kind": "oom_loop", "nodes": ["w-002"]},
        {"kind": "pods_pending", "nodes": ["w-003"]},
    ],
}


def _value(text: str, name: str, **kv: str) -> float | None:
    return series(text, name).get(labels(**kv))


LOOP = {"container": "app", "namespace": "default"}


def _faults_show(text: str) -> bool:
    crash = _value(text, "nodesync_container_crash_loop", node="w-001", pod="app-w-001-0", **LOOP)
    oom = _value(text, "nodesync_container_oom_loop", node="w-002", pod="app-w-002-0", **LOOP)
    missing = _value(text, "nodesync_drift_pods", kind="missing_sandbox", node="w-003")
    return crash is not None and oom is not None and (missing or 0) >= 1


@pytest.mark.prometheus
async def test_each_node_has_the_agent_series_its_pods_and_faults_make() -> None:
    async with simulating(doc(waves=[WAVE])) as env:
        port = await env.sim.serve_metrics()

        async def faults_show() -> str | None:
            text = await scrape(port)
            return text if _faults_show(text) else None

        text = await until_async(faults_show, timeout=15, what="loops and drift in the metrics")
        check_metrics(text)
        nodes = {dict(key)["node"] for key in series(text, "nodesync_cri_up")}
        assert nodes == {"w-000", "w-001", "w-002", "w-003"}
        for name in ("w-000", "w-001", "w-002"):
            assert (
                _value(text, "nodesync_pods", node=name, phase="Running", source="apiserver") == 2
            )
        assert _value(text, "nodesync_pods", node="w-003", phase="Pending", source="apiserver") == 2
        assert _value(text, "nodesync_pods", node="w-000", phase="Running", source="runtime") == 2
        crash = {"node": "w-001", "pod": "app-w-001-0", **LOOP}
        assert _value(text, "nodesync_pod_container_waiting", reason="CrashLoopBackOff", **crash)
        oom = {"node": "w-002", "pod": "app-w-002-0", **LOOP}
        last = _value(text, "nodesync_pod_container_last_terminated", reason="OOMKilled", **oom)
        assert last is not None
        for name in nodes:
            assert _value(text, "nodesync_source_up", node=name, source="apiserver") == 1
            assert _value(text, "nodesync_kubelet_healthy", node=name) == 1
        # No CRI calls are made: no CRI request series.
        assert "nodesync_cri_request_duration_seconds_count" not in text

        # A deleted node's agent goes with it.
        env.server.store.delete("nodes", "w-000")

        async def gone() -> bool:
            after = await scrape(port)
            return not [k for k in series(after, "nodesync_cri_up") if dict(k)["node"] == "w-000"]

        await until_async(gone, timeout=15, what="the deleted node's series to go")


def test_families_of_several_nodes_merge_into_one_per_name_with_the_node_label() -> None:
    up_a = GaugeMetricFamily("nodesync_cri_up", "up")
    up_a.add_metric([], 1.0)
    up_b = GaugeMetricFamily("nodesync_cri_up", "up")
    up_b.add_metric([], 0.0)
    total = CounterMetricFamily("nodesync_container_terminations", "t", labels=["reason"])
    total.add_metric(["Error"], 3.0)
    merged = with_node_label({"a": [up_a, total], "b": [up_b]})
    assert [m.name for m in merged] == ["nodesync_cri_up", "nodesync_container_terminations"]
    assert [(s.labels, s.value) for s in merged[0].samples] == [
        ({"node": "a"}, 1.0),
        ({"node": "b"}, 0.0),
    ]
    [sample] = merged[1].samples
    assert (sample.name, sample.labels) == (
        "nodesync_container_terminations_total",
        {"reason": "Error", "node": "a"},
    )


@pytest.mark.parametrize(
    "accept", ["", "application/openmetrics-text; version=1.0.0; charset=utf-8"]
)
def test_rendering_each_node_alone_and_joining_gives_the_exposition_of_all_of_them(
    accept: str,
) -> None:
    """What a scrape serves (each agent rendered once per sync, joined at the scrape) is byte
    for byte the exposition of every node's families rendered together (a counter's
    ``_created`` series included, a family of its own in the text format)."""

    def node_families(up: float, terminations: float | None) -> list[Metric]:
        cri = GaugeMetricFamily("nodesync_cri_up", "up")
        cri.add_metric([], up)
        out: list[Metric] = [cri]
        if terminations is not None:
            total = CounterMetricFamily("nodesync_container_terminations", "t", labels=["reason"])
            total.add_metric(["Error"], terminations, created=1_700_000_000.0)
            out.append(total)
        return out

    per_node = {
        "a": node_families(1.0, 3.0),
        "b": node_families(0.0, None),
        "c": node_families(1.0, 1.0),
    }
    encode, _ = choose_encoder(accept)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: with_node_label(per_node)))
    together = encode(registry)
    joined = join_rendered(
        [render_node(node, families, encode) for node, families in per_node.items()],
        eof=together.endswith(b"# EOF\n"),
    )
    assert joined == together
