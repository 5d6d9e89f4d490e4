"""What a process uses, read once or sampled while a benchmark runs, and the API server's
request counters over time.

Memory is read from /proc through psutil: the resident set now, and its peak (VmHWM, the
kernel's high-water mark, which a sampler could miss). CPU is user + system seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
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


def thread_cpu_ns(pid: int) -> dict[str, int]:
    """The CPU time (ns, /proc/<pid>/task/*/schedstat: exact, not in clock ticks) each thread
    of process ``pid`` used so far, summed by thread name."""
    spent: dict[str, int] = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/comm") as comm:
                name = comm.read().strip()
            with open(f"/proc/{pid}/task/{task}/schedstat") as schedstat:
                ns = int(schedstat.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):  # the thread ended meanwhile
            continue
        spent[name] = spent.get(name, 0) + ns
    return spent


async def cpu_over(pid: int, seconds: float) -> dict[str, object]:
    """The CPU process ``pid`` uses over the next ``seconds``: user + system seconds (clock
    ticks, every thread), and the seconds by thread name (schedstat, of the threads alive at
    both ends)."""
    before, threads_before = cpu_seconds(pid), thread_cpu_ns(pid)
    await asyncio.sleep(seconds)
    total, threads_after = cpu_seconds(pid) - before, thread_cpu_ns(pid)
    by_thread = {
        name: (ns - threads_before.get(name, 0)) / 1e9 for name, ns in threads_after.items()
    }
    return {
        "window_s": seconds,
        "cpu_s": total,
        "percent_of_a_core": total / seconds * 100,
        "by_thread_s": dict(sorted(by_thread.items(), key=lambda item: -item[1])),
        "threads_s": sum(by_thread.values()),
    }


def _mapping_name(path: str) -> str:
    """What a mapping of /proc/<pid>/smaps maps: a file's name, ``[heap]`` (the main malloc
    arena), ``[stack]``, or ``[anonymous]`` (other malloc arenas, thread stacks, mmap'd
    blocks: what glibc and the extensions' allocators take from the kernel)."""
    if not path:
        return "[anonymous]"
    return path if path.startswith("[") else path.rsplit("/", 1)[-1]


def memory_map(pid: int, top: int = 12) -> dict[str, object]:
    """Where the resident set of process ``pid`` is (/proc/<pid>/smaps): anonymous and
    file-backed KiB, the threads, the anonymous mappings (and how many hold at least 1 MiB),
    and the ``top`` names (files, ``[heap]``, ``[anonymous]``) holding the most."""
    by_name: dict[str, list[int]] = {}  # name -> [rss KiB, anonymous KiB]
    anonymous_sizes: list[int] = []
    name = ""
    with open(f"/proc/{pid}/smaps") as smaps:
        for line in smaps:
            field, _, rest = line.partition(" ")
            if not field.endswith(":"):  # a mapping's header: range perms offset dev inode path
                parts = line.split(maxsplit=5)
                name = _mapping_name(parts[5].strip() if len(parts) > 5 else "")
                by_name.setdefault(name, [0, 0])
            elif field == "Rss:":
                kib = int(rest.split()[0])
                by_name[name][0] += kib
                if name == "[anonymous]":
                    anonymous_sizes.append(kib)
            elif field == "Anonymous:":
                by_name[name][1] += int(rest.split()[0])
    with open(f"/proc/{pid}/status") as status:
        threads = next(int(line.split()[1]) for line in status if line.startswith("Threads:"))
    ordered = sorted(by_name.items(), key=lambda item: -item[1][0])
    return {
        "rss_kib": sum(v[0] for v in by_name.values()),
        "anonymous_kib": sum(v[1] for v in by_name.values()),
        "file_kib": sum(v[0] - v[1] for v in by_name.values()),
        "threads": threads,
        "anonymous_mappings": len(anonymous_sizes),
        "anonymous_mappings_of_1_mib_or_more": sum(1 for kib in anonymous_sizes if kib >= 1024),
        "top": [
            {"mapping": n, "rss_kib": rss, "anonymous_kib": anon}
            for n, (rss, anon) in ordered[:top]
        ],
    }
