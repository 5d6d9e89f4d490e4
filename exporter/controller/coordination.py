"""What the parts of the controller share instead of calling into each other: when the
executor's next pass runs (``Schedule``), whether this replica executes now (``Lead``), and
whether the correlated-failure guard pauses rollbacks (``Pause``).

exporter.controller.wiring builds one of each and gives it to the parts that need it: the
webhook trips the schedule after a delivery that brought new alerts, the driver tells it when a
waiting rollback is due again, the executor waits on it; the executor publishes whether it
leads (the webhook of a follower refuses deliveries) and the guard as of its last pass (the step
runner holds rollbacks while it pauses). None of them knows the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import Container

from exporter.tasks import wait_set


class Schedule:
    """When the executor's next pass runs: at once after a trip (a delivery with new or
    resolved alerts, a driven rollback that stopped), else when the earliest waiting rollback
    is due, else after the poll interval. Times are the event loop's."""

    def __init__(self) -> None:
        self._tripped = asyncio.Event()
        self._not_before: dict[str, float] = {}  # rollback -> loop time of its next try

    def trip(self) -> None:
        """Run a pass now (or as soon as the running one ends)."""
        self._tripped.set()

    @property
    def tripped(self) -> bool:
        return self._tripped.is_set()

    def clear(self) -> None:
        """A pass starts: what tripped the schedule until now is seen by it."""
        self._tripped.clear()

    async def wait(self, seconds: float) -> bool:
        """Wait at most ``seconds`` for a trip; whether it came."""
        return await wait_set(self._tripped, seconds)

    def retry_in(self, rollback: str, seconds: float) -> None:
        """Rollback ``rollback`` waits: drive it again in ``seconds``, not before."""
        self._not_before[rollback] = asyncio.get_running_loop().time() + seconds

    def due(self, rollback: str) -> bool:
        """Whether ``rollback`` may be driven now."""
        return self._not_before.get(rollback, 0.0) <= asyncio.get_running_loop().time()

    def forget(self, rollback: str) -> None:
        """``rollback`` is driven now: whatever it waited for is over."""
        self._not_before.pop(rollback, None)

    def next_due(self, poll_interval: float, driven: Container[str]) -> float:
        """Seconds until the earliest waiting rollback not being ``driven`` is due, the poll
        interval at most."""
        now = asyncio.get_running_loop().time()
        due = [t - now for name, t in self._not_before.items() if name not in driven]
        return max(0.0, min([poll_interval, *due]))


class Lead:
    """Whether this replica executes rollbacks now, as the executor publishes it. ``elected``:
    it runs leader election (without it the replica always executes and is never a follower)."""

    def __init__(self, *, elected: bool = False) -> None:
        self.elected = elected
        self.leading = False

    @property
    def follower(self) -> bool:
        """True on a replica that runs leader election and does not lead now."""
        return self.elected and not self.leading


class Pause:
    """The correlated-failure guard as of the executor's last pass: while ``paused``, no
    node rollback starts a step."""

    def __init__(self) -> None:
        self.paused = False
