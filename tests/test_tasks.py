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
