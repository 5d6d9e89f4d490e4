"""Why nothing happened: after each pass the leader says which guard holds each firing action
alert that has no rollback running (``nodesync_alert_held``, a status line in its log), from
what it refused, holds back or decided in a dry run; an alert that resolves is held no more."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from exporter.model.holds import Hold
from tests.controller.executor_harness import Bench, alert, bench, settings
from tests.support.wait import until_async


@pytest.fixture
async def b(tmp_path: Path) -> AsyncIterator[Bench]:
    async with bench(tmp_path) as made:
        yield made


def _table(held: tuple[Hold, ...] | None) -> list[tuple[str, str, str, str]]:
    assert held is not None
    return [(h.alertname, h.node, h.reason, h.guard) for h in held]


async def test_refused_alerts_are_held_until_they_resolve(
    b: Bench, caplog: pytest.LogCaptureFixture
) -> None:
    b.add_node("cp-1", labels={"node-role.kubernetes.io/control-plane": ""})
    b.add_node("prot-1", labels={"nodesync.io/protected": "true"})
    b.add_node("old-1", age=3 * 86_400, ready="True", lease_age=600)
    b.add_node("new-1")
    await b.wait_cluster(4)
    executor = b.executor()
    caplog.set_level(logging.INFO, logger="exporter.controller.intake")
    await b.deliver(
        alert("cp-1"),
        alert("prot-1"),
        alert("old-1"),
        alert("new-1"),  # rolled back: never held
        alert("new-1", "none", fingerprint="report-only"),  # no action: never held
    )
    await b.settled(executor)
    expected = [
        ("NodesyncNewNodeNotReady", "cp-1", "exemption", "control_plane"),
        ("NodesyncNewNodeNotReady", "old-1", "window", "scale_out_window"),
        ("NodesyncNewNodeNotReady", "prot-1", "exemption", "protected"),
    ]
    assert _table(executor.intake.held) == expected
    # The metrics show the leader's holds; a replica that does not lead shows none.
    assert executor.status().held is None
    executor.lead.leading = True
    assert executor.status().held == tuple((a, n, r) for a, n, r, _ in expected)
    lines = [
        r.getMessage() for r in caplog.records if r.getMessage().startswith("an alert is held")
    ]
    assert len(lines) == 3  # once each, however many passes ran
    assert "an alert is held: NodesyncNewNodeNotReady on prot-1: held by exemption (protected): " \
        "node prot-1 is labelled nodesync.io/protected=true; released when the label is " \
        "removed; its next episode is then acted on" in lines  # fmt: skip

    await b.deliver(alert("prot-1", status="resolved"))
    await b.settled(executor)
    assert [h.node for h in executor.intake.held] == ["cp-1", "old-1"]


async def test_a_dry_run_holds_what_it_would_do(b: Bench) -> None:
    b.add_node("new-1")
    b.add_node("new-2")
    await b.wait_cluster(2)
    executor = b.executor(settings(dry_run=True))  # a wave of 2: its cap is 1
    await b.deliver(alert("new-1", fingerprint="first"), alert("new-2", fingerprint="second"))
    await b.settled(executor)
    assert _table(executor.intake.held) == [
        ("NodesyncNewNodeNotReady", "new-1", "dry_run", "dry_run"),
        ("NodesyncNewNodeNotReady", "new-2", "budget", "blast_radius_fraction"),
    ]


ZONE = "topology.kubernetes.io/zone"


async def test_the_leader_shows_the_cohorts_of_its_last_pass(tmp_path: Path) -> None:
    """The cohorts are computed once per pass: the leader's metrics show them as of its last
    pass (a replica that does not lead computes them at each scrape)."""
    async with bench(tmp_path, cohort_keys=(ZONE,)) as b:
        for i in range(6):  # NotReady for 9.5 minutes, a failed join each
            b.add_node(f"bad-{i}", age=600, labels={ZONE: "bad"})
        for i in range(4):
            b.add_node(f"good-{i}", age=600, ready="True", labels={ZONE: "good"})
        await b.wait_cluster(10)
        executor = b.executor()
        executor.lead.leading = True
        await executor.run_once()

        def failing() -> dict[str, int]:
            return {c.value: c.failing.get("not_ready", 0) for c in executor.status().cohorts}

        assert failing() == {"bad": 6, "good": 0}
        obj = b.node("bad-0")  # recovers
        obj["status"]["conditions"][0]["status"] = "True"
        b.store.replace("nodes", obj, subresource="status")

        async def seen() -> bool:
            view = b.cluster.view().node("bad-0")
            return view is not None and view.health.ready_since is None

        await until_async(seen, timeout=15.0, what="the watch to see bad-0 Ready")
        assert failing() == {"bad": 6, "good": 0}  # as of the last pass
        executor.lead.leading = False
        assert failing() == {"bad": 5, "good": 0}  # computed now
        executor.lead.leading = True
        await executor.run_once()
        assert failing() == {"bad": 5, "good": 0}
