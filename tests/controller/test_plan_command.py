"""``nodesync plan`` against the test API server with the real client: the plan per alert and the
budget, as text and as JSON, from a file or stdin, and never a write."""

from __future__ import annotations

import io
import json
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import pytest

from exporter.commandline import parse_settings
from exporter.controller.plan_command import run
from exporter.controller.settings import PlanSettings
from nodesync_sim.fake.apiserver import APIServer, write_kubeconfig
from tests.controller.alert_builders import alert, body
from tests.controller.executor_harness import STARTED, lease_object, node_object, pod_object

DAY = 86_400.0


@pytest.fixture
async def server() -> AsyncIterator[APIServer]:
    async with APIServer() as srv:
        yield srv


def add_node(server: APIServer, name: str, *, age: float = 120, ready: str = "False") -> None:
    """Created ``age`` seconds ago (by the server's clock), NotReady for the last minute unless
    ``ready``, its Lease renewed 3 s ago."""
    now = time.time()
    with server.store.creation_time("nodes", "", name, now - age):
        server.store.create("nodes", node_object(name, ready=ready, since=now - min(age, 60)))
    server.store.create("leases", lease_object(name, now - 3), namespace="kube-node-lease")


def parse(argv: list[str], environ: Mapping[str, str] | None = None) -> PlanSettings:
    return parse_settings(PlanSettings, argv, environ or {}, prog="nodesync plan")


def payload_file(tmp_path: Path, nodes: list[str]) -> Path:
    alerts = [alert(f"{i + 1:016x}", node=n, starts_at=STARTED) for i, n in enumerate(nodes)]
    path = tmp_path / "payload.json"
    path.write_text(json.dumps(body(*alerts)))
    return path


async def test_thirty_alerts_in_text(
    server: APIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(100):
        add_node(server, f"new-{i:03}")
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    payload = payload_file(tmp_path, [f"new-{i:03}" for i in range(30)])
    args = parse(["--payload", str(payload), "--kubeconfig", str(kubeconfig)])
    assert await run(args) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "30 alerts: 10 planned, 0 would join a rollback, 0 would escalate one, 20 refused, "
        "0 would wait. Nothing was changed."
    )
    assert out.count("rollback_node (wave ") == 10
    assert out.count("refused: blast_radius_fraction") == 20
    # The same status lines the controller logs, for the alerts a guard holds back.
    held = out.split("Held (no rollback running):\n")[1].split("\n\n")[0].splitlines()
    assert len(held) == 20
    assert held[0].startswith(
        "  NodesyncNodeJoinFailed on new-010: held by budget (blast_radius_fraction): 10 of 10 "
        "node rollbacks of wave "
    )
    assert held[0].endswith(
        "(--guard.max-rollback-fraction 0.1 of 100 nodes); released when "
        "--guard.max-rollback-fraction is raised or a NodeRollback of the wave is deleted; its "
        "next episode is then acted on"
    )
    assert "  1. cordon new-000\n  2. taint new-000\n  3. drain new-000\n" in out
    assert "delete_node" not in out
    assert "Budget: 10 of 10 node rollbacks within 3600 s (0 left)" in out
    assert ": 10 of 10 (0.1 of 100 nodes), 0 left" in out
    assert "API writes: up to 80 for these steps and their Events" in out  # 10 x (3 + 5)
    assert "Correlated failure: 0 of 0 established nodes failing: not paused" in out
    assert server.counters.writes() == 0
    # Nodes, their Leases and the NodeRollbacks (the budget they use), once each; and the pods
    # of each of the 10 nodes a plan drains.
    assert server.counters.count(verb="list") == 3 + 10


async def test_json_from_stdin(
    server: APIServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    add_node(server, "new-1")
    add_node(server, "cp-1")
    server.store.patch(
        "nodes", "cp-1", {"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}}
    )
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    text = payload_file(tmp_path, ["new-1", "cp-1", "nowhere"]).read_text()
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    environ = {
        "NODESYNC_ROLLBACK_DELETE_NODES": "true",
        "NODESYNC_GUARD_MAX_ROLLBACK_FRACTION": "1",
    }
    args = parse(["--kubeconfig", str(kubeconfig), "--output", "json"], environ)
    assert await run(args) == 0
    report = json.loads(capsys.readouterr().out)
    decisions = [(a["node"], a["decision"], a.get("reason")) for a in report["alerts"]]
    assert decisions == [
        ("new-1", "plan", None),
        ("cp-1", "refused", "control_plane"),
        ("nowhere", "refused", "unknown_node"),
    ]
    assert [s["kind"] for s in report["alerts"][0]["steps"]] == [
        "cordon",
        "taint",
        "drain",
        "cleanup_runtime",
        "verify",
        "delete_node",
    ]
    assert report["delete_nodes"] is True
    assert report["api_writes"] == 4 + 6  # cordon, taint, cleanup, delete; six Events
    assert report["budget"]["absolute"] == {
        "limit": 10,
        "used": 1,
        "remaining": 9,
        "window_seconds": 3600.0,
    }
    [wave] = report["budget"]["waves"]
    assert (wave["size"], wave["limit"], wave["used"]) == (2, 2, 1)
    # The control-plane node's alert is held; the unknown node's is the planner's refusal.
    [held] = report["held"]
    assert (held["node"], held["reason"], held["guard"]) == ("cp-1", "exemption", "control_plane")
    assert held["line"] == (
        "NodesyncNodeJoinFailed on cp-1: held by exemption (control_plane): node cp-1 is a "
        "control-plane node; released when never: nodesync does not roll a control-plane "
        "node back"
    )
    assert server.counters.writes() == 0


async def test_old_nodes_failing_make_every_plan_wait(
    server: APIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(4):
        add_node(server, f"old-{i}", age=3 * DAY)  # NotReady for the last minute
    add_node(server, "old-ok", age=3 * DAY, ready="True")
    add_node(server, "new-1")
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    payload = payload_file(tmp_path, ["new-1"])
    assert await run(parse(["--payload", str(payload), "--kubeconfig", str(kubeconfig)])) == 0
    out = capsys.readouterr().out
    assert "would wait: correlated_failure" in out
    assert "4 of 5 established nodes failing: PAUSED" in out
    assert (
        "  NodesyncNodeJoinFailed on new-1: held by pause (correlated_failure): 4 of 5 "
        "established nodes failing (pauses at --guard.correlated-failure-fraction 0.3 and "
        "--guard.correlated-failure-min-nodes 2); released when fewer established nodes fail: "
        "the alert is decided again at the next pass\n"
    ) in out


@pytest.mark.parametrize(
    ("content", "message"),
    [("{", "malformed JSON"), ('{"version": "3"}', "version"), (None, "No such file")],
)
async def test_a_bad_payload_is_reported(
    server: APIServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: str | None,
    message: str,
) -> None:
    path = tmp_path / "payload.json"
    if content is not None:
        path.write_text(content)
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    assert await run(parse(["--payload", str(path), "--kubeconfig", str(kubeconfig)])) == 2
    err = capsys.readouterr().err
    assert "cannot read the payload" in err
    assert message in err
    assert server.counters.count() == 0


async def test_an_unreachable_api_server_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:9", "token")
    payload = payload_file(tmp_path, ["new-1"])
    assert await run(parse(["--payload", str(payload), "--kubeconfig", str(kubeconfig)])) == 1
    assert "cannot read the cluster" in capsys.readouterr().err


def pods_on(server: APIServer, node: str) -> None:
    """What ``kubectl drain`` sorts: a ReplicaSet's pod, a DaemonSet's, a mirror pod, a bare
    pod, a pod with an emptyDir volume, and a finished one."""
    web = pod_object("web", node)
    daemon = pod_object("proxy", node, owner="DaemonSet")
    mirror = pod_object("etcd", node, owner="Node")
    mirror["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "x"}
    bare = pod_object("bare", node)
    bare["metadata"]["ownerReferences"] = []
    scratch = pod_object("scratch", node)
    scratch["spec"]["volumes"] = [{"name": "tmp", "emptyDir": {}}]
    done = pod_object("job", node, owner="Job")
    done["status"]["phase"] = "Succeeded"
    for pod in (web, daemon, mirror, bare, scratch, done):
        server.store.create("pods", pod, namespace="default")
    server.store.create("pods", pod_object("elsewhere", "other-node"), namespace="default")


def drain_one_node(server: APIServer, tmp_path: Path) -> list[str]:
    """A failing new node with the pods of :func:`pods_on`, and the arguments to plan for an
    alert about it."""
    add_node(server, "new-1")
    pods_on(server, "new-1")
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    payload = payload_file(tmp_path, ["new-1"])
    return ["--payload", str(payload), "--kubeconfig", str(kubeconfig)]


async def test_the_drain_lists_the_pods_it_would_evict_and_leave(
    server: APIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await run(parse(drain_one_node(server, tmp_path))) == 0
    out = capsys.readouterr().out
    assert (
        "  3. drain new-1\n"
        "       evict default/bare\n"
        "       leave default/etcd: mirror pod\n"
        "       leave default/job: finished\n"
        "       leave default/proxy: DaemonSet-managed\n"
        "       evict default/scratch\n"
        "       evict default/web\n"
        "  4. "
    ) in out
    assert "and 3 evictions of the pods listed" in out
    assert server.counters.writes() == 0


async def test_plan_follows_the_drain_policy_flags_in_json(
    server: APIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = drain_one_node(server, tmp_path)
    argv += ["--output", "json", "--no-drain.force", "--drain.delete-emptydir-data=false"]
    assert await run(parse(argv)) == 0
    report = json.loads(capsys.readouterr().out)
    (drain,) = [s for s in report["alerts"][0]["steps"] if s["kind"] == "drain"]
    assert [(p["name"], p["evict"], p["reason"]) for p in drain["pods"]] == [
        ("bare", False, "not managed by a controller (--drain.force)"),
        ("etcd", False, "mirror pod"),
        ("job", False, "finished"),
        ("proxy", False, "DaemonSet-managed"),
        ("scratch", False, "uses emptyDir (--drain.delete-emptydir-data)"),
        ("web", True, None),
    ]
