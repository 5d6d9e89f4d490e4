"""What task events told of a container's end, over listings that do not show it yet."""

from __future__ import annotations

import dataclasses

from exporter.model.runtime import Container, ContainerState, RuntimeSnapshot
from exporter.model.runtime_events import (
    SHOWN_WITHIN_SECONDS,
    TOPIC_EXIT,
    TOPIC_OOM,
    TOPIC_START,
    TaskEvent,
)
from exporter.model.told_exits import ToldExits

NOW = 1_700_000_000.0
SUBSCRIBED = NOW - 100  # the subscription held then; the containers below were created after


def _running(cid: str = "c1", created_at: float = NOW - 50) -> Container:
    return Container(
        id=cid, pod_sandbox_id="s1", name=cid, attempt=0, state=ContainerState.RUNNING,
        created_at=created_at,
    )  # fmt: skip


def _listing(*containers: Container, taken_at: float = NOW) -> RuntimeSnapshot:
    return RuntimeSnapshot(taken_at, None, (), (), containers)


def _exit(cid: str = "c1", status: int = 1, at: float = NOW + 1, process: str = "") -> TaskEvent:
    return TaskEvent(TOPIC_EXIT, cid, at + 0.01, process or cid, exit_status=status, exited_at=at)


def _oom(cid: str = "c1", at: float = NOW + 0.5) -> TaskEvent:
    return TaskEvent(TOPIC_OOM, cid, at)


def _told(*events: TaskEvent, since: float | None = SUBSCRIBED) -> ToldExits:
    told = ToldExits()
    told.subscribed(since)
    for event in events:
        told.tell(event, NOW + 1)
    return told


def test_nothing_told_publishes_the_listing_itself() -> None:
    listing = _listing(_running())
    assert ToldExits().apply(listing, NOW) is listing


def test_an_exit_is_published_over_a_listing_that_still_shows_it_running() -> None:
    told = _told(_exit(status=1, at=NOW + 1))
    listing = _listing(_running(), _running("c2"))
    [c1, c2] = told.apply(listing, NOW + 1).containers
    assert (c1.state, c1.exit_code, c1.finished_at, c1.reason, c1.settled) == (
        ContainerState.EXITED, 1, NOW + 1, "Error", True,
    )  # fmt: skip
    assert c2 is listing.containers[1]  # what was not told stays as listed
    assert told.pending


def test_exit_status_0_completed_and_an_oom_of_the_container_makes_it_oomkilled() -> None:
    [completed] = _told(_exit(status=0)).apply(_listing(_running()), NOW + 1).containers
    assert (completed.reason, completed.settled) == ("Completed", True)
    # A child the OOM killer chose: the container goes on, then exits 0; the CRI says
    # OOMKilled, and so does what was told.
    [child] = _told(_oom(), _exit(status=0)).apply(_listing(_running()), NOW + 1).containers
    assert (child.reason, child.exit_code, child.settled) == ("OOMKilled", 0, True)


def test_a_sigkill_waits_for_its_oom_event_and_settles_with_it() -> None:
    told = _told(_exit(status=137))
    listing = _listing(_running())
    [killed] = told.apply(listing, NOW + 1).containers
    assert (killed.reason, killed.settled) == ("Error", False)  # its OOM event may follow
    told.tell(_oom(at=NOW + 1.02), NOW + 1.02)
    [oom] = told.apply(listing, NOW + 1.02).containers
    assert (oom.reason, oom.exit_code, oom.settled) == ("OOMKilled", 137, True)


def test_an_oom_event_the_runtime_has_not_taken_in_yet_settles_its_exited_record() -> None:
    recorded = dataclasses.replace(
        _running(), state=ContainerState.EXITED, exit_code=137, reason="Error", settled=False
    )
    told = _told(_oom(at=NOW + 1.02))
    [oom] = told.apply(_listing(recorded), NOW + 1.1).containers
    assert (oom.reason, oom.settled) == ("OOMKilled", True)
    # The runtime's record says it too: nothing told is left.
    shown = dataclasses.replace(recorded, reason="OOMKilled", settled=True)
    listing = _listing(shown, taken_at=NOW + 1.2)
    assert told.apply(listing, NOW + 1.2) is listing
    assert not told.pending


def test_an_oom_may_have_been_missed_for_a_container_older_than_the_subscription() -> None:
    old = _running(created_at=SUBSCRIBED - 1)
    [exited] = _told(_exit(status=0)).apply(_listing(old), NOW + 1).containers
    assert (exited.state, exited.reason, exited.settled) == (
        ContainerState.EXITED, "Completed", False,
    )  # fmt: skip
    # Not subscribed now (an exit told by the last event before it ended): the same.
    [unsure] = _told(_exit(status=0), since=None).apply(_listing(_running()), NOW + 1).containers
    assert unsure.settled is False


def test_the_runtimes_record_stands_once_a_listing_shows_the_exit() -> None:
    told = _told(_exit(status=2))
    recorded = dataclasses.replace(
        _running(), state=ContainerState.EXITED, exit_code=2, reason="Error",
        started_at=NOW - 49, finished_at=NOW + 1,
    )  # fmt: skip
    listing = _listing(recorded)
    assert told.apply(listing, NOW + 1.1) is listing
    assert not told.pending
    # A later listing that shows it running again (it cannot) would stand too: nothing is left.
    stale = _listing(_running())
    assert told.apply(stale, NOW + 1.2) is stale


def test_a_removed_container_ends_what_was_told_only_in_a_listing_taken_after_the_event() -> None:
    told = _told(_exit(), _oom("c2"))
    older = _listing(_running("c3"), taken_at=NOW)  # read before the events came
    assert told.apply(older, NOW + 1.1) is older
    assert told.pending
    newer = _listing(_running("c3"), taken_at=NOW + 2)
    assert told.apply(newer, NOW + 2) is newer
    assert not told.pending


def test_an_exit_the_listing_never_shows_is_dropped_after_its_time() -> None:
    told = _told(_exit())
    listing = _listing(_running())
    assert told.apply(listing, NOW + SHOWN_WITHIN_SECONDS).containers[0].state is (
        ContainerState.EXITED
    )
    assert told.apply(listing, NOW + 1 + SHOWN_WITHIN_SECONDS + 0.1) is listing
    assert not told.pending


def test_starts_execs_and_exits_without_a_status_tell_nothing() -> None:
    told = ToldExits()
    told.subscribed(SUBSCRIBED)
    assert not told.tell(TaskEvent(TOPIC_START, "c1", NOW), NOW)
    assert not told.tell(_exit(process="exec-1"), NOW)
    assert not told.tell(TaskEvent(TOPIC_EXIT, "c1", NOW, "c1"), NOW)
    listing = _listing(_running())
    assert told.apply(listing, NOW + 1) is listing
    assert not told.pending
