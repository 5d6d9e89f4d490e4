"""exporter.tasks: a time slice hands the loop back once used up, and only then."""

from __future__ import annotations

import asyncio

from exporter.tasks import TimeSlice


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
    turn = TimeSlice(budget=0.05)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while not await _race(turn):  # busy until the budget is used up
        assert loop.time() < deadline, "the slice never ran out"
    assert not await _race(turn)  # a new slice began with that pause
