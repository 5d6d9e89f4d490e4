"""What the simulator stages beyond a node's kubelet: node labels and taints, orphan sandboxes in
a simulated runtime, PodDisruptionBudgets that are relaxed on time, a frozen simulated runtime,
simulated agents that answer the cleanup handshake (and one that does not), and pods that turn
not ready on a node the node lifecycle controller marks Unknown."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from exporter.kube.api import KubeAPI
from exporter.kube.writer import KubeWriter
from exporter.model.rollback import CLEANUP_REQUEST_ANNOTATION, CLEANUP_STATUS_ANNOTATION
from exporter.model.runtime import SandboxState
from nodesync_sim.fake.scaleout.scenario import ScenarioError
from nodesync_sim.fake.scaleout.scenario_file import parse
from tests.metrics.exposition import labels, series
from tests.sim.fake.scaleout.support import Env, doc, scrape, simulating
from tests.support.wait import until_async


def _cleanup_status(env: Env, node: str) -> dict[str, Any] | None:
    raw = (env.node(node)["metadata"].get("annotations") or {}).get(CLEANUP_STATUS_ANNOTATION)
    return json.loads(raw) if raw else None


def _answered(env: Env, node: str, request: str) -> dict[str, Any] | None:
    status = _cleanup_status(env, node)
    if status is None or status["id"] != request or status["state"] == "running":
        return None
    return status


async def _request_cleanup(env: Env, node: str, request: str) -> None:
    async with KubeAPI(env.server.aio_configuration()) as api:
        await KubeWriter(api).annotate_node(node, {CLEANUP_REQUEST_ANNOTATION: request})


def _pod_ready(env: Env, name: str) -> str | None:
    pod = env.pod(name)
    if pod is None:
        return None
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == "Ready"), None)


async def test_marks_give_nodes_labels_taints_and_orphan_sandboxes() -> None:
    wave = {
        "name": "w",
        "count": 3,
        "pods_per_node": 1,
        "marks": [
            {"nodes": ["w-001"], "labels": {"nodesync.io/protected": "true"}},
            {
                "nodes": ["w-002"],
                "taints": [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}],
                "orphan_sandboxes": 2,
            },
        ],
    }
    async with simulating(doc(waves=[wave])) as env:
        await until_async(
            lambda: env.server.store.try_get("nodes", "w-002"), timeout=10.0, what="registration"
        )
        assert env.node("w-001")["metadata"]["labels"]["nodesync.io/protected"] == "true"
        assert "nodesync.io/protected" not in env.node("w-000")["metadata"]["labels"]
        assert env.node("w-002")["spec"]["taints"] == [
            {"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}
        ]
        assert "taints" not in env.node("w-000")["spec"]
        runtime = env.sim.runtimes["w-002"]

        def leftovers() -> dict[str, SandboxState]:
            sandboxes = runtime.snapshot(0).sandboxes
            return {s.name: s.state for s in sandboxes if s.name.startswith("left")}

        # The kubelet's housekeeping stops them, as kubelet 1.20 stops a running pod it does not
        # want (tests/realcluster/test_orphan_sandbox.py); nothing removes them.
        stopped = dict.fromkeys(("leftover-0", "leftover-1"), SandboxState.NOTREADY)
        await until_async(lambda: leftovers() == stopped, timeout=10.0, what="orphans stopped")
        port = await env.sim.serve_metrics()
        # The agent's own drift sees them, once older than the drift grace.
        text = await until_async(
            lambda: _orphans(port, "w-002"), timeout=15, what="orphan sandbox drift on w-002"
        )
        assert text == 2
        assert leftovers() == stopped


async def _orphans(port: int, node: str) -> float | None:
    text = await scrape(port)
    value = series(text, "nodesync_drift_pods").get(labels(kind="orphan_sandbox", node=node))
    return value if value else None


async def test_a_cleanup_request_is_answered_done_and_removes_the_orphans() -> None:
    wave = {
        "name": "w",
        "count": 2,
        "pods_per_node": 1,
        "marks": [{"nodes": ["w-001"], "orphan_sandboxes": 1}],
    }
    async with simulating(doc(waves=[wave])) as env:
        port = await env.sim.serve_metrics()
        await until_async(lambda: _orphans(port, "w-001"), timeout=15, what="orphan drift")
        # The desired pod runs before the cleanup is asked for: the orphan's drift grace can
        # run out before the kubelet has started it (bound once the node is Ready).
        await until_async(
            lambda: _pod_ready(env, "app-w-001-0") == "True",
            timeout=10.0,
            what="the app pod running",
        )
        await _request_cleanup(env, "w-001", "req-1")
        status = await until_async(
            lambda: _answered(env, "w-001", "req-1"), timeout=15, what="the answer"
        )
        assert status["state"] == "done"
        assert status["removedSandboxes"] == 1
        names = {s.name for s in env.sim.runtimes["w-001"].snapshot(0).sandboxes}
        assert names == {"app-w-001-0"}  # the desired pod's sandbox stays


async def test_a_frozen_runtime_reports_cri_down_and_answers_unavailable_then_recovers() -> None:
    wave = {
        "name": "w",
        "count": 2,
        "pods_per_node": 1,
        "faults": [
            {"kind": "cri_timeouts", "nodes": ["w-001"], "at_seconds": 1.5, "for_seconds": 6}
        ],
    }
    async with simulating(doc(waves=[wave])) as env:
        port = await env.sim.serve_metrics()

        async def cri_up(node: str, want: float) -> bool:
            text = await scrape(port)
            return series(text, "nodesync_cri_up").get(labels(node=node)) == want

        await until_async(lambda: cri_up("w-001", 1.0), timeout=10.0, what="the runtime read")
        await until_async(lambda: cri_up("w-001", 0.0), timeout=10, what="the runtime frozen")
        assert await cri_up("w-000", 1.0)
        await _request_cleanup(env, "w-001", "req-frozen")
        status = await until_async(
            lambda: _answered(env, "w-001", "req-frozen"), timeout=10, what="answer"
        )
        assert status["state"] == "unavailable"
        assert "DEADLINE_EXCEEDED" in status["error"]
        await until_async(lambda: cri_up("w-001", 1.0), timeout=15, what="the runtime back")


async def test_an_agent_down_serves_nothing_and_answers_no_cleanup() -> None:
    wave = {
        "name": "w",
        "count": 2,
        "faults": [{"kind": "agent_down", "nodes": ["w-001"], "at_seconds": 0}],
    }
    async with simulating(doc(waves=[wave])) as env:
        port = await env.sim.serve_metrics()
        await until_async(
            lambda: env.server.store.try_get("nodes", "w-001"), timeout=10.0, what="registration"
        )

        async def served(node: str) -> bool:
            text = await scrape(port)
            return labels(node=node) in series(text, "nodesync_cri_up")

        await until_async(lambda: served("w-000"), timeout=10.0, what="w-000's agent")
        await _request_cleanup(env, "w-000", "req-a")
        await _request_cleanup(env, "w-001", "req-b")
        await until_async(
            lambda: _answered(env, "w-000", "req-a"), timeout=10.0, what="w-000's answer"
        )
        # w-000's agent answered within a few periods; w-001's never does.
        for _ in range(5):
            await env.sim.metrics.sync_once()
        assert _cleanup_status(env, "w-001") is None
        assert not await served("w-001")


async def test_a_pdb_refuses_evictions_until_it_is_relaxed() -> None:
    wave = {"name": "w", "count": 1, "pods_per_node": 2}
    pdbs = [
        {"name": "keep-all", "app": "app-w-000", "min_available": "100%", "relax_at_seconds": 4}
    ]
    async with simulating(doc(waves=[wave], pdbs=pdbs)) as env:
        assert env.server.store.get("poddisruptionbudgets", "keep-all", namespace="default")
        await until_async(
            lambda: _pod_ready(env, "app-w-000-0") == "True",
            timeout=10.0,
            what="the app pod running",
        )
        await until_async(
            lambda: _pod_ready(env, "app-w-000-1") == "True",
            timeout=10.0,
            what="the app pod running",
        )
        async with KubeAPI(env.server.aio_configuration()) as api:
            writer = KubeWriter(api, eviction_backoff_initial=0.1, eviction_backoff_max=0.2)
            blocked = await writer.evictions.evict("default", "app-w-000-0", timeout=1.0)
            assert blocked.outcome == "blocked"
            assert env.pod("app-w-000-0")["metadata"].get("deletionTimestamp") is None
            evicted = await writer.evictions.evict("default", "app-w-000-0", timeout=20.0)
            assert evicted.outcome == "evicted"
        relaxed = env.sim.timeline.first("keep-all", "pdb_relaxed")
        assert relaxed is not None
        assert env.sim.clock.t(relaxed.at) >= 4


async def test_pods_on_a_silent_node_turn_not_ready_and_back() -> None:
    wave = {
        "name": "w",
        "count": 2,
        "pods_per_node": 1,
        "faults": [{"kind": "lease_stops", "nodes": ["w-001"], "at_seconds": 2, "for_seconds": 4}],
    }
    async with simulating(doc(waves=[wave])) as env:
        await until_async(
            lambda: _pod_ready(env, "app-w-001-0") == "True", timeout=10.0, what="the pod ready"
        )
        await until_async(
            lambda: env.ready("w-001")["status"] == "Unknown", timeout=10, what="w-001 Unknown"
        )
        await until_async(
            lambda: _pod_ready(env, "app-w-001-0") == "False", timeout=10.0, what="pod not ready"
        )
        assert _pod_ready(env, "app-w-000-0") == "True"
        await until_async(
            lambda: env.ready("w-001")["status"] == "True", timeout=10, what="w-001 back"
        )
        await until_async(
            lambda: _pod_ready(env, "app-w-001-0") == "True", timeout=10.0, what="pod ready again"
        )


@pytest.mark.parametrize(
    ("more", "message"),
    [
        (
            {"waves": [{"name": "w", "count": 1, "marks": [{"labels": {"a": "b"}}]}]},
            "$.waves[0].marks[0]: give exactly one of 'share'",
        ),
        (
            {
                "waves": [
                    {
                        "name": "w",
                        "count": 1,
                        "marks": [
                            {"nodes": ["w-000"], "taints": [{"key": "k", "effect": "Never"}]}
                        ],
                    }
                ]
            },
            "$.waves[0].marks[0].taints[0].effect: invalid enum value 'Never'",
        ),
        (
            {
                "waves": [
                    {
                        "name": "w",
                        "count": 1,
                        "marks": [{"nodes": ["w-000"], "labels": {"a b": "c"}}],
                    }
                ]
            },
            "$.waves[0].marks[0].labels: a key: expected `str` matching regex",
        ),
        (
            {
                "waves": [{"name": "w", "count": 1}],
                "pdbs": [{"name": "p", "app": "app-w-000", "min_available": 1}],
            },
            "$.pdbs[0].app: no app pods labelled app='app-w-000'",
        ),
        (
            {
                "waves": [{"name": "w", "count": 1, "pods_per_node": 1}],
                "pdbs": [{"name": "p", "app": "app-w-000"}],
            },
            "$.pdbs[0]: give exactly one of 'min_available' or 'max_unavailable'",
        ),
        (
            {
                "waves": [{"name": "w", "count": 1, "pods_per_node": 1}],
                "pdbs": [{"name": "p", "app": "app-w-000", "max_unavailable": "150%"}],
            },
            "$.pdbs[0].max_unavailable: expected `str` matching regex '^(100|[1-9]?[0-9])%$'",
        ),
        (
            {"waves": [{"name": "w", "count": 1}], "expect": {"decisions": {"w-001": "rollback"}}},
            "$.expect.decisions.w-001: no node 'w-001' in this scenario",
        ),
        (
            {"waves": [{"name": "w", "count": 1}], "expect": {"decisions": {"w-000": "reboot"}}},
            "$.expect.decisions[...]: invalid enum value 'reboot'",
        ),
        (
            {
                "waves": [{"name": "w", "count": 1}],
                "real_node": {"name": "r", "wave": "w", "faults": [{"kind": "agent_down"}]},
            },
            "$.real_node.faults[0].kind: agent_down is for simulated nodes only",
        ),
        (
            {"waves": [{"name": "w", "count": 1}], "controller_restart": {"after_step": "reboot"}},
            "$.controller_restart.after_step: invalid enum value 'reboot'",
        ),
        (
            {"waves": [{"name": "w", "count": 1}], "scrape_failures": {"share": 2}},
            "$.scrape_failures.share: expected `float` <= 1.0",
        ),
    ],
)
def test_staging_keys_are_checked(more: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse({"name": "t", **more}, "x.json")
    assert str(caught.value).startswith(f"x.json: {message}")


async def test_memory_pressure_shows_in_the_node_and_its_agent() -> None:
    wave = {"name": "w", "count": 2, "faults": [{"kind": "memory_pressure", "nodes": ["w-001"]}]}
    async with simulating(doc(waves=[wave])) as env:
        port = await env.sim.serve_metrics()

        def memory(node: str) -> str | None:
            found = env.server.store.try_get("nodes", node)
            if found is None:
                return None
            conditions = found["status"]["conditions"]
            return next(c["status"] for c in conditions if c["type"] == "MemoryPressure")

        await until_async(
            lambda: memory("w-001") == "True", timeout=10.0, what="MemoryPressure on w-001"
        )
        assert memory("w-000") == "False"

        async def pressure(node: str) -> float | None:
            text = await scrape(port)
            return series(text, "nodesync_host_pressure").get(labels(node=node, resource="memory"))

        await until_async(
            lambda: _is(pressure("w-001"), 1.0), timeout=10.0, what="the agent's memory pressure"
        )
        assert await pressure("w-000") == 0.0


async def _is(value: Any, want: float) -> bool:
    return bool(await value == want)


async def test_scrape_failures_fail_every_other_scrape_while_they_last() -> None:
    document = doc(
        waves=[{"name": "w", "count": 1}],
        scrape_failures={"share": 0.5, "at_seconds": 0, "for_seconds": 3},
    )
    async with simulating(document) as env:
        port = await env.sim.serve_metrics()
        async with aiohttp.ClientSession() as session:

            async def status() -> int:
                async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
                    return response.status

            seen = [await status() for _ in range(6)]
            assert sorted(seen) == [200, 200, 200, 503, 503, 503]
            assert seen[0] != seen[1]
            started = env.sim.clock.started_at
            assert started is not None
            await until_async(lambda: env.sim.clock.t() > 3, timeout=10.0, what="the failures' end")
            assert [await status() for _ in range(3)] == [200, 200, 200]
