"""Property: whatever the poll timing and garbage collection, each attempt is counted once,
with the reason of its final record (a record not settled yet is never counted)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.model.runtime import Container
from exporter.model.terminations import REASONS, TerminationTracker
from tests.model.builders import exited, oom, running

REASON_EXITS = {"OOMKilled": 137, "Error": 1, "Completed": 0}


Poll = tuple[int, bool, frozenset[int], bool]


@st.composite
def timelines(draw: st.DrawFn) -> tuple[list[str], list[Poll]]:
    """Reasons of each attempt, and polls as (current attempt, current exited?, kept records,
    current record not settled yet?)."""
    reasons = draw(st.lists(st.sampled_from(sorted(REASON_EXITS)), min_size=1, max_size=12))
    polls: list[Poll] = []
    collected: set[int] = set()
    shown_final: set[int] = set()
    position = 0
    for _ in range(draw(st.integers(1, 8))):
        position = draw(st.integers(position, len(reasons) * 2 - 1))
        current, current_exited = divmod(position, 2)
        collected |= draw(st.sets(st.integers(0, max(current - 1, 0)))) & set(range(current))
        kept = frozenset(range(current)) - collected
        # Settling until first shown settled (the reader keeps a final record), never after.
        settling = bool(current_exited) and current not in shown_final and draw(st.booleans())
        if current_exited and not settling:
            shown_final.add(current)
        shown_final |= kept
        polls.append((current, bool(current_exited), kept, settling))
    return reasons, polls


def listing(
    reasons: list[str], current: int, current_exited: bool, kept: frozenset[int], settling: bool
) -> list[Container]:
    """The listing of one poll; a current record still settling says 137 and Error, as
    containerd's does before it handled the OOM event (whatever the attempt's reason)."""

    def record(attempt: int) -> Container:
        reason = reasons[attempt]
        finished = 1000.0 + attempt
        if reason == "OOMKilled":
            return oom(attempt=attempt, finished_at=finished)
        return exited(attempt=attempt, exit_code=REASON_EXITS[reason], finished_at=finished)

    containers = [record(a) for a in sorted(kept)]
    if not current_exited:
        containers.append(running(attempt=current))
    elif settling:
        finished = 1000.0 + current
        containers.append(
            exited(attempt=current, exit_code=137, finished_at=finished, settled=False)
        )
    else:
        containers.append(record(current))
    return containers


@settings(max_examples=300, deadline=None, database=None)
@given(timelines())
def test_each_attempt_counted_once(timeline: tuple[list[str], list[Poll]]) -> None:
    reasons, polls = timeline
    tracker = TerminationTracker()
    seen_exited: set[int] = set()
    for step, poll in enumerate(polls):
        containers = listing(reasons, *poll)
        tracker.observe(containers, 2000.0 + step)
        tracker.observe(containers, 2000.5 + step)  # the same listing again changes nothing
        seen_exited |= {c.attempt for c in containers if c.exit_code is not None and c.settled}
    last, last_exited, _, last_settling = polls[-1]
    terminated = last + 1 if last_exited and not last_settling else last
    totals = tracker.totals()
    assert set(totals) == set(REASONS)
    assert sum(totals.values()) == terminated
    recorded = [a for a in range(terminated) if a in seen_exited]
    for reason in REASON_EXITS:
        assert totals[reason] == sum(1 for a in recorded if reasons[a] == reason)
    assert totals["unknown"] == terminated - len(recorded)
    assert totals["other"] == 0


@settings(max_examples=200, deadline=None, database=None)
@given(timelines(), st.lists(st.floats(0.5, 400.0), min_size=1, max_size=6))
def test_the_same_listing_again_is_observed_as_a_copy_of_it_would_be(
    timeline: tuple[list[str], list[Poll]], gaps: list[float]
) -> None:
    """The agent's reader hands back the previous tuple when nothing changed; the tracker's
    shortcut for it must see exactly what a fresh copy of the listing shows, as time passes
    the loop window (a short one, so terminations and sandboxes age out)."""
    reasons, polls = timeline
    listings = [tuple(listing(reasons, *poll)) for poll in polls]
    observed_alike(listings, gaps)


def observed_alike(listings: list[tuple[Container, ...]], gaps: list[float]) -> None:
    """Each listing observed again after each gap, as the same tuple by one tracker and as a
    fresh copy by another (a short loop window, so terminations and sandboxes age out): both
    must tell the same at every step."""
    shortcut = TerminationTracker(loop_window_seconds=300.0)
    copies = TerminationTracker(loop_window_seconds=300.0)
    now = 1012.0  # the attempts finished at 1000 + attempt: in the window at first
    for same in listings:
        for gap in gaps:
            now += gap
            shortcut.observe(same, now)
            copies.observe(list(same), now)
            assert shortcut.totals() == copies.totals()
            assert shortcut.loops(now) == copies.loops(now)
            assert shortcut.tracked_containers() == copies.tracked_containers()


@st.composite
def node_listings(draw: st.DrawFn) -> list[tuple[Container, ...]]:
    """Listings of up to four pods over time: pods leave and come back, sandboxes are
    recreated, containers run, exit (OOM, error, completed, killed and not settled yet) and
    restart."""
    listings: list[tuple[Container, ...]] = []
    attempts = dict.fromkeys(range(4), 0)
    for _ in range(draw(st.integers(1, 6))):
        containers: list[Container] = []
        for pod in sorted(draw(st.sets(st.integers(0, 3)))):
            uid = f"uid-{pod}"
            sandbox_id = f"sb-{pod}-{draw(st.integers(0, 1))}"
            attempts[pod] += draw(st.integers(0, 2))
            kind = draw(st.sampled_from(("running", "oom", "error", "completed", "killed")))
            kw = {"uid": uid, "sandbox_id": sandbox_id, "pod": f"web-{pod}"}
            for attempt in range(max(0, attempts[pod] - 2), attempts[pod]):
                containers.append(oom(attempt=attempt, finished_at=1000.0 + attempt, **kw))
            last = attempts[pod]
            if kind == "running":
                containers.append(running(attempt=last, **kw))
            elif kind == "oom":
                containers.append(oom(attempt=last, finished_at=1000.0 + last, **kw))
            elif kind == "killed":
                killed = exited(
                    attempt=last, exit_code=137, finished_at=1000.0, settled=False, **kw
                )
                containers.append(killed)
            else:
                code = 1 if kind == "error" else 0
                containers.append(exited(attempt=last, exit_code=code, finished_at=1000.0, **kw))
        listings.append(tuple(containers))
    return listings


@settings(max_examples=200, deadline=None, database=None)
@given(node_listings(), st.lists(st.floats(0.5, 400.0), min_size=1, max_size=5))
def test_the_same_listing_again_is_observed_as_a_copy_of_it_would_be_on_a_node(
    listings: list[tuple[Container, ...]], gaps: list[float]
) -> None:
    """As above, for several pods whose sandboxes come and go: what only time changes (pods no
    longer listed forgotten, terminations and sandboxes leaving the window) is the same."""
    observed_alike(listings, gaps)
