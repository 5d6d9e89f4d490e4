"""exporter.tasks: a time slice hands the loop back once used up, and only then; waiting for
an event with a timeout, and a cancel that lands as it is set."""

from __future__ import annotations

import asyncio

from exporter.tasks import TimeSlice, wait_set


async def _race(turn: TimeSlice) -> bool:
    """Whether a task started just before ``turn.pause()`` ran during it."""
    ran: list[bool] = []

    async def other() -> None:
        ran.append(True)

    task = asyncio.create_task(other())
    await turn.pause()
    during = bool(ran)
    await task
    return during


async def test_a_used_up_slice_lets_other_tasks_run() -> None:
    assert await _race(TimeSlice(budget=0.0))


async def test_a_fresh_slice_keeps_the_loop() -> None:
    assert not await _race(TimeSlice(budget=3600.0))


async def test_the_slice_starts_again_after_a_pause() -> None:
    now = [0.0]
    turn = TimeSlice(budget=1.0, clock=lambda: now[0])
    now[0] = 0.9
    assert not await _race(turn)
    now[0] = 1.0  # used up
    assert await _race(turn)
    now[0] = 1.5  # half of the new slice
    assert not await _race(turn)
    now[0] = 2.0
    assert await _race(turn)


async def test_wait_set_says_whether_the_event_was_set_in_time() -> None:
    event = asyncio.Event()
    assert not await wait_set(event, 0.01)
    asyncio.get_running_loop().call_soon(event.set)
    assert await wait_set(event, 5.0)
    assert await wait_set(event, 0.0)  # already set: at once


async def test_a_cancel_that_lands_as_the_event_is_set_cancels_the_waiter() -> None:
    """A schedule waits on its wake-up event in a loop; cancelling it (a shutdown) must end it
    also in the instant the event is set. asyncio.wait_for(event.wait(), ...) in Python 3.11
    returns instead, and such a loop runs on for ever."""
    event = asyncio.Event()

    async def schedule() -> None:
        while True:
            await wait_set(event, 3600.0)
            event.clear()

    for i in range(40):
        task = asyncio.create_task(schedule())
        for _ in range(3):  # into its wait
            await asyncio.sleep(0)
        event.set()
        for _ in range(i % 8):  # land the cancel at each step of the wake-up, in turn
            await asyncio.sleep(0)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=5.0)
        if not done:  # so that the test ends
            task.cancel()
            await asyncio.wait({task}, timeout=5.0)
        assert done, f"cancel {i} was lost: the schedule ran on"
        assert task.cancelled()
