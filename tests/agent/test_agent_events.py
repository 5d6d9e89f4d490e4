"""The agent driven by containerd's task events; the event stream itself on each release.

The sync period is a minute here, so that only the events can explain a change that shows in
/metrics within seconds; the periodic relist never runs during a test.
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from typing import Any

import pytest

from exporter.agent.sync import TRIGGERS
from exporter.cri.client import CRIClient
from exporter.model.runtime import ContainerState
from nodesync_sim.real.containerd import LocalContainerd
from nodesync_sim.real.runtime_pods import ContainerSpec, run_mixed_pod, run_pod
from tests.agent.conftest import Scrape
from tests.metrics.exposition import labels, series
from tests.support.wait import until_async

#: On the machine's containerd; the tests of each release's event stream run on every release
#: too. The storm tests the agent's counting, the same whatever the release sends it.
pytestmark = [pytest.mark.containerd, pytest.mark.timeout(180)]

SYNC_PERIOD = 60.0
SHOWN_WITHIN = 10.0
"""How soon a change must show: far less than the period, lenient for a busy machine."""


@pytest.fixture
def agent_options() -> dict[str, Any]:
    """A sync period longer than any test: what the agent shows comes through the events."""
    return {"sync_period": SYNC_PERIOD, "stats_period": 0.0}


def _value(text: str, name: str, **kv: str) -> float:
    return series(text, name).get(labels(**kv), 0.0)


async def _subscribed(scrape: Scrape) -> str:
    return await until_async(
        scrape,
        accept=lambda t: (
            _value(t, "nodesync_cri_events_up") == 1 and _value(t, "nodesync_cri_up") == 1
        ),
        timeout=SHOWN_WITHIN,
        what="the agent to subscribe to the task events",
    )


def _stoppable(marker: int) -> list[str]:
    """A container's command that runs until SIGTERM, then exits 3 (reason Error). The shell
    is the container's PID 1, which ignores a signal it has no handler for: hence the trap.
    ``marker`` makes the command line unique on the machine."""
    return ["/bin/sh", "-c", f"trap 'exit 3' TERM; sleep {marker} & wait"]


async def _pid_of(args: list[str]) -> int:
    """The one process running ``args``: once StartContainer returned, runc's init may still
    be about to exec it."""
    found = await until_async(
        lambda: _pids_of(args), timeout=SHOWN_WITHIN, what=f"a process to run {args}"
    )
    assert len(found) == 1, found
    return found[0]


def _pids_of(args: list[str]) -> list[int]:
    """Processes whose command line is exactly ``args``."""
    wanted = "\0".join(args).encode() + b"\0"
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if f.read() == wanted:
                        found.append(int(entry))
            except OSError:
                continue
    return found


def _terminations(text: str, reason: str) -> float:
    return _value(text, "nodesync_container_terminations_total", reason=reason)


def _all_terminations(text: str) -> float:
    return sum(series(text, "nodesync_container_terminations_total").values())


# On every release: the exit and OOM events are the release's own (their topics and fields).
@pytest.mark.containerd_releases
async def test_exit_and_oom_show_through_events_long_before_the_relist(
    containerd: LocalContainerd, scrape: Scrape
) -> None:
    await _subscribed(scrape)
    await run_mixed_pod(containerd.endpoint, name="evented")

    def counted(text: str) -> bool:
        return all(_terminations(text, r) == 1 for r in ("Completed", "Error", "OOMKilled"))

    text = await until_async(
        scrape, accept=counted, timeout=SHOWN_WITHIN, what="the exits and the OOM kill"
    )
    assert _value(text, "nodesync_containers", state="exited") == 3
    assert _value(text, "nodesync_containers", state="running") == 1
    # Only events (and the relist when subscribing) started cycles: the period never came.
    assert _value(text, "nodesync_runtime_changes_total", trigger="event") >= 1
    assert _value(text, "nodesync_runtime_changes_total", trigger="period") == 0
    assert _value(text, "nodesync_cri_events_total", topic="exit") == 3
    # containerd publishes two /tasks/oom for one OOM kill: counted once.
    assert _value(text, "nodesync_cri_events_total", topic="oom") == 1
    assert _value(text, "nodesync_cri_events_total", topic="start") >= 5  # sandbox + 4


# On every release: how a release's event stream ends at a restart and what it holds after.
@pytest.mark.containerd_releases
async def test_a_containerd_restart_while_subscribed_loses_nothing(
    containerd: LocalContainerd, scrape: Scrape
) -> None:
    await _subscribed(scrape)
    marker = _stoppable(800000 + uuid.uuid4().int % 100000)
    await run_pod(
        containerd.endpoint,
        "restart",
        "demo",
        str(uuid.uuid4()),
        [ContainerSpec("victim", marker), ContainerSpec("stays", ["/bin/sleep", "inf"])],
    )
    await until_async(
        scrape,
        accept=lambda t: _value(t, "nodesync_containers", state="running") == 2,
        timeout=SHOWN_WITHIN,
        what="both containers running",
    )

    containerd.stop()
    await until_async(
        scrape,
        accept=lambda t: _value(t, "nodesync_cri_events_up") == 0,
        timeout=SHOWN_WITHIN,
        what="the subscription to end",
    )
    # A container ends while containerd is down: no event will ever say so.
    os.kill(await _pid_of(marker), signal.SIGTERM)
    containerd.restart()

    text = await until_async(
        scrape,
        accept=lambda t: _all_terminations(t) == 1 and _value(t, "nodesync_cri_events_up") == 1,
        timeout=SHOWN_WITHIN + 5,
        what="the relist after resubscribing to count the exit",
    )
    # The relist on resubscribing found it, or (1.6: its shim publishes the exit to the
    # restarted containerd) an event did; never the period.
    changes = {t: _value(text, "nodesync_runtime_changes_total", trigger=t) for t in TRIGGERS}
    assert changes["resubscribe"] + changes["event"] >= 1, changes
    assert changes["period"] == 0, changes
    # The reason is the runtime's: containerd 1.6 keeps the exit (3, Error); 1.7 and 2.x,
    # which learn of it only when recovering the task, report another (counted as other).
    async with CRIClient(containerd.endpoint, timeout=5.0) as client:
        (victim,) = [c for c in await client.list_containers() if c.name == "victim"]
        status = await client.container_status(victim.id)
    assert status.state is ContainerState.EXITED
    reason = status.reason if status.reason in ("Error", "Completed", "OOMKilled") else "other"
    assert _terminations(text, reason) == 1, (status.exit_code, status.reason)

    # Events flow again after the restart.
    await run_pod(
        containerd.endpoint,
        "after",
        "demo",
        str(uuid.uuid4()),
        [ContainerSpec("done", ["/bin/true"])],
    )
    text = await until_async(
        scrape,
        accept=lambda t: _terminations(t, "Completed") == 1,
        timeout=SHOWN_WITHIN,
        what="a new exit",
    )
    assert _all_terminations(text) == 2
    assert _value(text, "nodesync_runtime_changes_total", trigger="period") == 0


STORM_PODS = 11
STORM_CONTAINERS_PER_POD = 10


async def test_110_containers_exiting_at_once_are_each_counted_once(
    containerd: LocalContainerd, scrape: Scrape
) -> None:
    await _subscribed(scrape)
    base = 700000 + uuid.uuid4().int % 50000
    markers = [_stoppable(base + i) for i in range(STORM_PODS * STORM_CONTAINERS_PER_POD)]
    limit = asyncio.Semaphore(4)

    async def pod(n: int) -> None:
        specs = [
            ContainerSpec(f"c{i}", markers[n * STORM_CONTAINERS_PER_POD + i])
            for i in range(STORM_CONTAINERS_PER_POD)
        ]
        async with limit:
            await run_pod(containerd.endpoint, f"storm-{n}", "storm", str(uuid.uuid4()), specs)

    await asyncio.gather(*(pod(n) for n in range(STORM_PODS)))
    total = len(markers)
    await until_async(
        scrape,
        accept=lambda t: _value(t, "nodesync_containers", state="running") == total,
        timeout=SHOWN_WITHIN * 3,
        what="every container running",
    )
    pids = [await _pid_of(m) for m in markers]
    for pid in pids:  # as close to at once as a loop gets: ~1 ms for all of them
        os.kill(pid, signal.SIGTERM)

    # The truth: containerd's CRI plugin works through the exits at its own pace (seconds on a
    # loaded machine); once it lists every container exited, the agent must show it too.
    async with CRIClient(containerd.endpoint, timeout=5.0) as client:

        async def states() -> set[ContainerState]:
            return {c.state for c in await client.list_containers()}

        await until_async(
            states,
            accept=lambda seen: seen == {ContainerState.EXITED},
            timeout=120,
            what="containerd to list every exit",
        )
        listed = await client.list_containers()
        statuses = [await client.container_status(c.id) for c in listed]
    text = await until_async(
        scrape,
        accept=lambda t: _value(t, "nodesync_containers", state="exited") == total,
        timeout=SHOWN_WITHIN,
        what="every exit",
    )
    assert len(statuses) == total
    assert {(s.state, s.exit_code, s.reason) for s in statuses} == {
        (ContainerState.EXITED, 3, "Error")
    }
    # Each exit counted exactly once, and only through events.
    text = await until_async(
        scrape,
        accept=lambda t: _terminations(t, "Error") >= total,
        timeout=SHOWN_WITHIN,
        what="every exit counted",
    )
    assert _terminations(text, "Error") == total
    assert _value(text, "nodesync_runtime_changes_total", trigger="period") == 0
    assert _value(text, "nodesync_cri_events_total", topic="exit") >= total
    # A later event-driven cycle counts none of them again.
    await run_pod(
        containerd.endpoint,
        "later",
        "storm",
        str(uuid.uuid4()),
        [ContainerSpec("x", ["/bin/true"])],
    )
    text = await until_async(
        scrape,
        accept=lambda t: _terminations(t, "Completed") == 1,
        timeout=SHOWN_WITHIN,
        what="a later exit",
    )
    assert _terminations(text, "Error") == total
