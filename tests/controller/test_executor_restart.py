"""A controller killed in the middle of a rollback resumes after a restart without repeating any
step's effect, and without losing an alert it had accepted.

The honest version runs the executor in a subprocess (this module is its entry point) and kills
it with SIGKILL while it waits for a node's runtime cleanup; a second one then finishes the
work from the same journal file. The precise version stops an executor right after a write and
before the journal recorded it (the worst moment), and starts a fresh one on the same file.
Writes and Events are counted by the test API server; the node agents' side of the cleanup is
played by ``executor_harness.Agent`` through the API server's store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from exporter.controller.cluster import ClusterWatch
from exporter.controller.executor import REFUSAL_REASONS, Executor
from exporter.controller.journal import Journal
from exporter.kube.api import KubeAPI
from exporter.kube.config import kubeconfig_configuration
from exporter.kube.writer import KubeWriter, WriteResult
from exporter.metrics.rollback import RollbackMetrics
from exporter.model.rollback import CLEANUP_REQUEST_ANNOTATION, PlanState
from exporter.settings.declare import changed
from tests.controller.executor_harness import (
    FAST,
    Bench,
    alert,
    bench,
    nodes_patched,
    running,
    step_states,
    until,
)

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = changed(FAST, max_concurrent_rollbacks=1, max_rollback_fraction=1.0, cleanup_timeout=60)
STEP_EVENTS = {
    "NodesyncCordon",
    "NodesyncTaint",
    "NodesyncDrain",
    "NodesyncCleanupRuntime",
    "NodesyncVerify",
}


# ---------------------------------------------------------------- the subprocess


async def _serve(kubeconfig: str, journal_path: str) -> None:
    """Run an executor against the API server in ``kubeconfig`` until killed."""
    api = KubeAPI(await kubeconfig_configuration(kubeconfig))
    cluster = ClusterWatch(api, wave_label=None, wave_gap=120.0)
    cluster.start()
    journal = await Journal.open(journal_path)
    executor = Executor(
        journal,
        KubeWriter(api),
        cluster,
        SETTINGS,
        RollbackMetrics(REFUSAL_REASONS),
        poll_interval=0.05,
        cleanup_poll_interval=0.02,
    )
    print("executor running", flush=True)
    await executor.run()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    asyncio.run(_serve(sys.argv[1], sys.argv[2]))


# ---------------------------------------------------------------- tests


@pytest.fixture
async def b(tmp_path: Path) -> AsyncIterator[Bench]:
    async with bench(tmp_path) as made:
        yield made


@contextlib.contextmanager
def executor_process(
    kubeconfig: Path, journal: Path, log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.controller.test_executor_restart", str(kubeconfig),
             str(journal)],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def events_by_node(b: Bench) -> Counter[tuple[str, str]]:
    return Counter((e["involvedObject"]["name"], e["reason"]) for e in b.events())


async def test_sigkill_mid_rollback_resumes_without_repeating_a_step(
    b: Bench, tmp_path: Path
) -> None:
    b.add_node("new-1")
    b.add_node("new-2")
    b.add_pod("app-1", "new-1")
    b.add_pod("app-2", "new-2")
    await b.wait_cluster(2)
    kubeconfig = b.server.write_kubeconfig(tmp_path / "kubeconfig")
    log = tmp_path / "executor.log"
    b.agent.hold = True  # the cleanup waits: the first controller dies in the middle of it
    await b.deliver(alert("new-1"))

    with executor_process(kubeconfig, b.journal_path, log) as first:

        async def cleaning() -> bool:
            assert first.poll() is None, log.read_text()
            annotations = b.node("new-1")["metadata"].get("annotations") or {}
            return CLEANUP_REQUEST_ANNOTATION in annotations

        await until(cleaning, "the first controller to ask for new-1's cleanup", 30)
        # another alert arrives and is accepted while the first plan runs (it waits: one
        # rollback at a time)
        await b.deliver(alert("new-2"))

        async def deferred() -> bool:
            return any(e["reason"] == "NodesyncWaiting" for e in b.events())

        await until(deferred, "the second alert to be held back", 30)
        os.kill(first.pid, signal.SIGKILL)
        assert first.wait(timeout=10) == -signal.SIGKILL
    [running_plan] = await b.plans(PlanState.RUNNING)
    assert step_states(running_plan)[:3] == [
        ("cordon", "done"),
        ("taint", "done"),
        ("drain", "done"),
    ]
    assert step_states(running_plan)[3] == ("cleanup_runtime", "pending")
    before = (nodes_patched(b.server), b.server.counters.count("create", "pods/eviction"))
    assert before == (3, 1)

    b.agent.hold = False
    with executor_process(kubeconfig, b.journal_path, log) as second:

        async def finished() -> bool:
            assert second.poll() is None, log.read_text()
            done = await b.plans(PlanState.DONE)
            return len(done) == 2

        await until(finished, "both rollbacks to finish after the restart", 30)

    assert sorted(p.node for p in await b.plans(PlanState.DONE)) == ["new-1", "new-2"]
    # no step repeated: three node patches and one eviction per node, one Event per step
    assert nodes_patched(b.server) == 6
    assert b.server.counters.count("create", "pods/eviction") == 2
    events = events_by_node(b)
    assert {k: v for k, v in events.items() if k[1] != "NodesyncWaiting"} == {
        (node, reason): 1 for node in ("new-1", "new-2") for reason in STEP_EVENTS
    }
    assert events[("new-2", "NodesyncWaiting")] == 1
    assert b.agent.answered == [("new-1", "nodesync-plan-1"), ("new-2", "nodesync-plan-2")]


class StopsAfterCordon(KubeWriter):
    """Writes the cordon, then never returns: the executor is stopped right after a write
    and before its journal recorded the step."""

    def __init__(self, api: KubeAPI) -> None:
        super().__init__(api)
        self.cordoned = asyncio.Event()

    async def cordon(self, node: str) -> WriteResult:
        await super().cordon(node)
        self.cordoned.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_stopped_between_a_write_and_the_journal_the_step_is_not_repeated(
    b: Bench,
) -> None:
    b.add_node("new-1")
    await b.wait_cluster(1)
    await b.deliver(alert("new-1"))
    writer = StopsAfterCordon(b.api)
    first = b.executor(writer=writer)
    async with running(first):
        await asyncio.wait_for(writer.cordoned.wait(), 15)
    [plan] = await b.plans(PlanState.RUNNING)
    assert step_states(plan)[0] == ("cordon", "pending")
    assert b.node("new-1")["spec"]["unschedulable"] is True
    assert b.events() == []

    await b.journal.close()  # a fresh executor on the same journal file
    b.journal = await Journal.open(str(b.journal_path))
    second = b.executor()
    await b.settled(second)
    [plan] = await b.plans(PlanState.DONE)
    assert plan.steps[0].detail.startswith("node new-1 is already cordoned")
    assert nodes_patched(b.server) == 3
    assert Counter(e["reason"] for e in b.events()) == dict.fromkeys(STEP_EVENTS, 1)


async def test_a_restart_keeps_the_blast_radius(b: Bench) -> None:
    for i in range(20):
        b.add_node(f"new-{i:02}", age=300 - i)
    await b.wait_cluster(20)
    first = b.executor(changed(FAST, max_rollback_fraction=0.1))
    await b.deliver(alert("new-00"))
    await b.settled(first)
    second = b.executor(changed(FAST, max_rollback_fraction=0.1))  # forgets nothing
    await b.deliver(*(alert(f"new-{i:02}") for i in range(1, 5)))
    await second.restore()
    await b.settled(second)
    assert len(await b.plans(PlanState.DONE)) == 2
    assert Counter(p.reason for p in await b.plans(PlanState.REFUSED)) == {
        "blast_radius_fraction": 3
    }
