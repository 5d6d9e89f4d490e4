"""A controller killed in the middle of a rollback: another one, with a journal of its own, finishes
it from the NodeRollback, each effect made once, and the record matches the cluster.

The honest version runs the executor in a subprocess (this module is its entry point) and kills
it with SIGKILL while it waits for a node's runtime cleanup; a second one, on another journal
file (as after a failover), finishes the work. The precise version stops an executor right after
each kind of write and before its outcome was recorded (the worst moment), and starts a fresh
one on a fresh journal. Writes and Events are counted by the test API server; the node agents'
side of the cleanup is played by ``executor_harness.Agent`` through the API server's store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from exporter.controller.cluster import ClusterWatch
from exporter.controller.executor import REFUSAL_REASONS
from exporter.controller.journal import Journal
from exporter.controller.rollbacks import RollbackWatch
from exporter.controller.wiring import build_executor
from exporter.kube.api import KubeAPI
from exporter.kube.config import kubeconfig_configuration
from exporter.kube.eviction import Evictions
from exporter.kube.noderollbacks import RollbackWrites, object_json
from exporter.kube.writer import KubeWriter, WriteResult
from exporter.metrics.rollback import RollbackMetrics
from exporter.model.alerts import Alert
from exporter.model.decision import decide, new_rollback
from exporter.model.guards import GuardState
from exporter.model.kube import Taint
from exporter.model.outcomes import OUTCOMES
from exporter.model.rollback import CLEANUP_REQUEST_ANNOTATION, Phase, StepState
from exporter.settings.declare import changed
from tests.controller.executor_harness import (
    FAST,
    Bench,
    alert,
    bench,
    nodes_patched,
    payload,
    running,
    step_states,
)
from tests.support.wait import until_async

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = changed(FAST, max_rollback_fraction=1.0, cleanup_timeout=60)
STEP_EVENTS = {
    "NodesyncRollback",
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
    watch = RollbackWatch(api)
    watching = asyncio.create_task(watch.run())
    journal = await Journal.open(journal_path)
    executor = build_executor(
        journal,
        KubeWriter(api),
        RollbackWrites(api),
        watch,
        cluster,
        SETTINGS,
        RollbackMetrics(REFUSAL_REASONS, OUTCOMES),
        poll_interval=0.05,
        step_poll_interval=0.02,
    )
    print("executor running", flush=True)
    try:
        await executor.run()
    finally:
        watching.cancel()


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


async def _deliver_to(journal_path: Path, *alerts: Alert) -> None:
    """What Alertmanager delivers to one controller (its own journal)."""
    journal = await Journal.open(str(journal_path))
    try:
        await journal.record(payload(*alerts), received_at=time.time())
    finally:
        await journal.close()


async def test_sigkill_mid_rollback_another_controller_finishes_it(
    b: Bench, tmp_path: Path
) -> None:
    b.add_node("new-1")
    b.add_node("new-2")
    b.add_pod("app-1", "new-1")
    b.add_pod("app-2", "new-2")
    await b.wait_cluster(2)
    kubeconfig = b.server.write_kubeconfig(tmp_path / "kubeconfig")
    log = tmp_path / "executor.log"
    first_journal, second_journal = tmp_path / "first.db", tmp_path / "second.db"
    b.agent.hold = True  # the cleanups wait: the first controller dies in the middle of them
    await _deliver_to(first_journal, alert("new-1"), alert("new-2"))

    with executor_process(kubeconfig, first_journal, log) as first:

        async def cleaning() -> bool:
            """Both cleanups asked for and their waits recorded."""
            assert first.poll() is None, log.read_text()
            asked = all(
                CLEANUP_REQUEST_ANNOTATION in (b.node(n)["metadata"].get("annotations") or {})
                for n in ("new-1", "new-2")
            )
            waiting = [r for r in b.rollbacks() if r.status.phase is Phase.WAITING]
            return asked and len(waiting) == 2

        await until_async(
            cleaning, timeout=30, what="the first controller to wait for both cleanups"
        )
        os.kill(first.pid, signal.SIGKILL)
        assert first.wait(timeout=10) == -signal.SIGKILL
    for rollback in b.rollbacks():
        assert rollback.status.phase is Phase.WAITING
        assert step_states(rollback)[:3] == [
            ("cordon", "done"),
            ("taint", "done"),
            ("drain", "done"),
        ]
        assert step_states(rollback)[3] == ("cleanup_runtime", "running")
    assert (nodes_patched(b.server), b.server.counters.count("create", "pods/eviction")) == (6, 2)

    # Another controller, its journal empty, takes over; Alertmanager sends it the group again.
    b.agent.hold = False
    await _deliver_to(second_journal, alert("new-1"), alert("new-2"))
    with executor_process(kubeconfig, second_journal, log) as second:

        async def finished() -> bool:
            assert second.poll() is None, log.read_text()
            return len(b.rollbacks(Phase.SUCCEEDED)) == 2

        await until_async(
            finished, timeout=30, what="the second controller to finish both rollbacks"
        )

    assert len(b.rollbacks()) == 2  # the re-sent alerts joined, nothing new was decided
    # no effect repeated: three node patches and one eviction per node, one Event per step
    assert nodes_patched(b.server) == 6
    assert b.server.counters.count("create", "pods/eviction") == 2
    assert events_by_node(b) == {
        (node, reason): 1 for node in ("new-1", "new-2") for reason in STEP_EVENTS
    }
    assert sorted(b.agent.answered) == sorted((r.spec.node, r.uid) for r in b.rollbacks())


class _EvictsThenHangs(Evictions):
    """The evictions of a :class:`StopsAfter` writer: stopped after the drain's eviction."""

    def __init__(self, writer: StopsAfter) -> None:
        super().__init__(writer._channel, writer.reads)
        self._writer = writer

    async def evict(self, namespace: str, name: str, uid: str = "", **kw: Any) -> Any:
        result = await super().evict(namespace, name, uid, **kw)
        if self._writer.write == "drain":
            await self._writer._then_hang()
        return result


class StopsAfter(KubeWriter):
    """Makes one kind of write, then never returns: the executor is stopped right after an
    effect and before its outcome was recorded."""

    def __init__(self, api: KubeAPI, write: str) -> None:
        super().__init__(api)
        self.write = write
        self.done = asyncio.Event()
        self.evictions = _EvictsThenHangs(self)

    async def _then_hang(self) -> None:
        self.done.set()
        await asyncio.Event().wait()

    async def cordon(self, node: str) -> WriteResult:
        result = await super().cordon(node)
        if self.write == "cordon":
            await self._then_hang()
        return result

    async def add_taint(self, node: str, taint: Taint) -> WriteResult:
        result = await super().add_taint(node, taint)
        if self.write == "taint":
            await self._then_hang()
        return result

    async def annotate_node(self, node: str, annotations: Mapping[str, str | None]) -> Any:
        result = await super().annotate_node(node, annotations)
        if self.write == "cleanup_runtime":
            await self._then_hang()
        return result

    async def delete_node(self, name: str, uid: str = "") -> WriteResult:
        result = await super().delete_node(name, uid)
        if self.write == "delete_node":
            await self._then_hang()
        return result


@pytest.mark.parametrize("write", ["cordon", "taint", "drain", "cleanup_runtime", "delete_node"])
async def test_stopped_between_an_effect_and_its_record_the_record_ends_true(
    b: Bench, tmp_path: Path, write: str
) -> None:
    b.add_node("new-1")
    b.add_pod("app", "new-1")
    await b.wait_cluster(1)
    await b.deliver(alert("new-1"))
    settings = changed(FAST, delete_nodes=True)
    writer = StopsAfter(b.api, write)
    first = b.executor(settings, writer=writer)
    async with running(first):
        await asyncio.wait_for(writer.done.wait(), 15)
    [stopped] = b.rollbacks()
    index = [s.kind.value for s in stopped.status.steps].index(write)
    assert stopped.status.steps[index].state is StepState.RUNNING  # the intent, no outcome

    await b.journal.close()  # a fresh controller: another journal, the same cluster
    b.journal = await Journal.open(str(tmp_path / "other-journal.db"))
    await b.deliver(alert("new-1"))  # Alertmanager sends it the alert again
    second = b.executor(settings)
    await b.settled(second)
    [rollback] = b.rollbacks()
    assert rollback.status.phase is Phase.SUCCEEDED
    assert [s for _, s in step_states(rollback)] == ["done"] * 6
    assert rollback.status.steps[0].made_change  # the cordon is this rollback's, crash or not
    assert rollback.status.steps[1].made_change
    assert b.store.try_get("nodes", "new-1") is None
    assert nodes_patched(b.server) == 3  # cordon, taint, cleanup request: each once
    assert b.server.counters.count("create", "pods/eviction") == 1
    assert b.server.counters.count("delete", "nodes") == 1
    reasons = Counter(e["reason"] for e in b.events())
    assert reasons == dict.fromkeys([*STEP_EVENTS, "NodesyncDeleteNode"], 1)


async def test_a_failover_keeps_the_blast_radius(b: Bench, tmp_path: Path) -> None:
    """The budget is the NodeRollbacks in the cluster: a controller with an empty journal that
    takes over in the middle of a wave counts what the one before it decided."""
    for i in range(20):
        b.add_node(f"new-{i:02}", age=300 - i)
    await b.wait_cluster(20)
    first = b.executor(changed(FAST, max_rollback_fraction=0.1))
    await b.deliver(alert("new-00"), alert("new-01"))
    await b.settled(first)
    await b.journal.close()
    b.journal = await Journal.open(str(tmp_path / "other-journal.db"))
    second = b.executor(changed(FAST, max_rollback_fraction=0.1))
    await b.deliver(*(alert(f"new-{i:02}") for i in range(2, 6)))
    await b.settled(second)
    assert len(b.rollbacks(Phase.SUCCEEDED)) == 2  # 10 % of 20 nodes, across both controllers
    assert Counter(d.reason for d in await b.decisions("refused")) == {"blast_radius_fraction": 4}


async def test_a_rollback_whose_decider_died_right_after_creating_it_gets_its_event(
    b: Bench,
) -> None:
    """The decider died between the create and the first status (and the decision's Event):
    the next leader writes the status and records NodesyncRollback, once."""
    b.add_node("new-1")
    await b.wait_cluster(1)
    view, policy, now = b.cluster.view(), FAST.policy, time.time()
    decision = decide(alert("new-1"), view, GuardState(), policy, now)
    assert decision.plan is not None
    body = object_json(new_rollback(decision.plan, view, GuardState(), policy, now))
    del body["status"]  # as the create left it
    b.store.create("noderollbacks", body)
    await b.deliver(alert("new-1"))  # Alertmanager sends it to the next leader
    await b.settled(b.executor())
    [rollback] = b.rollbacks()
    assert rollback.status.phase is Phase.SUCCEEDED
    assert Counter(b.event_reasons("new-1"))["NodesyncRollback"] == 1
