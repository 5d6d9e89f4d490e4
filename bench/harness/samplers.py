"""What a process uses, read once or sampled while a benchmark runs, and the API server's
request counters over time.

Memory is read from /proc through psutil: the resident set now, and its peak (VmHWM, the
kernel's high-water mark, which a sampler could miss). CPU is user + system seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
import psutil

from bench.harness.apiserver import APIError, Counts, SimAPIServer
from exporter.tasks import wait_set


def rss_bytes(pid: int) -> int:
    """The resident set of process ``pid`` now."""
    return int(psutil.Process(pid).memory_info().rss)


def peak_rss_bytes(pid: int) -> int:
    """The peak resident set of process ``pid`` so far (VmHWM; its RSS where there is none)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return rss_bytes(pid)


def cpu_seconds(pid: int) -> float:
    """The CPU time process ``pid`` used so far, user and system."""
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds``, or less when ``stop`` is set meanwhile."""
    await wait_set(stop, seconds)


async def sample_rss(
    pid: int, samples: list[tuple[float, int]], stop: asyncio.Event, period: float = 1.0
) -> None:
    """Append (monotonic time, RSS) of process ``pid`` every ``period`` until ``stop``."""
    process = psutil.Process(pid)
    while not stop.is_set():
        with contextlib.suppress(psutil.Error):
            samples.append((time.monotonic(), process.memory_info().rss))
        await _pause(stop, period)


@dataclass(frozen=True)
class CounterSample:
    """One read of the server's counters: they were taken somewhere between ``sent`` and
    ``received`` (monotonic), and ``writes`` of the requests counted were of interest."""

    sent: float
    received: float
    writes: int


async def sample_counters(
    api: SimAPIServer,
    count: Callable[[Counts], int],
    samples: list[CounterSample],
    stop: asyncio.Event,
    period: float,
) -> None:
    """Read the API server's counters every ``period`` seconds until ``stop``; ``count``
    picks the writes of interest out of each snapshot. A read that fails is skipped."""
    while not stop.is_set():
        sent = time.monotonic()
        try:
            counts: Counts | None = await api.counters()
        except (aiohttp.ClientError, APIError, TimeoutError):
            counts = None
        received = time.monotonic()
        if counts is not None:
            samples.append(CounterSample(sent, received, count(counts)))
        await _pause(stop, max(0.0, period - (received - sent)))
