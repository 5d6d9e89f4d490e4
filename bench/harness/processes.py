"""The benchmarks' child processes, started the one way the project starts children
(:class:`nodesync_sim.real.process.ChildProcess`: a session of its own, output to a log file,
stopped by its PID with SIGTERM, then SIGKILL).

A child runs this tree's code whatever the working directory or the installed package: it is
started with the benchmark's own interpreter (``sys.executable -m ...``) and with the root of
this tree first on ``PYTHONPATH``, so ``nodesync controller`` measures the code beside the
benchmark, not another checkout an editable install points at.

A child stays in the benchmark's session (``new_session=False``), as the benchmarks' children
always did when their figures were taken. The session is the scheduler's autogroup on Linux:
in a session of its own, a child gets its own share of the CPU, and on a machine with other
work the figures move (an agent's scrape at 110 pods took 2.5 times as long in a session of
its own, alternating with one in the benchmark's). A Ctrl-C reaches the children too; the
benchmark stops them by their PID all the same.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import sys
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import Any, TypeVar

from nodesync_sim.real.process import ChildProcess

#: The directory holding ``bench``, ``exporter`` and ``nodesync_sim``.
TREE = Path(__file__).resolve().parents[2]

#: The signals that stop a benchmark as Ctrl-C does: its cleanups run.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)

T = TypeVar("T")


def run_main(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``, with SIGTERM and SIGHUP cancelling ``main`` as Ctrl-C does, so that
    its ``finally`` blocks stop the processes it started and remove its files (by default such a
    signal ends the interpreter at once and leaves them behind). Stopped by one, the process
    exits with 128 + its number."""
    stopped_by: list[int] = []

    async def guarded() -> T:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for signum in STOP_SIGNALS:
            loop.add_signal_handler(signum, _stop, task, signum, stopped_by)
        return await main

    try:
        return asyncio.run(guarded())
    except asyncio.CancelledError:
        if stopped_by:
            raise SystemExit(128 + stopped_by[0]) from None
        raise


def _stop(task: asyncio.Task[Any], signum: int, stopped_by: list[int]) -> None:
    stopped_by.append(signum)
    task.cancel()


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process' environment with ``extra`` on top, and this tree first on PYTHONPATH."""
    env = {**os.environ, **(extra or {})}
    paths = [str(TREE), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


def python_child(
    module: str,
    *args: str,
    log: Path,
    env: Mapping[str, str] | None = None,
    stdin_pipe: bool = False,
    name: str = "",
) -> ChildProcess:
    """``python -m MODULE ARGS`` as a child (not started yet), its output going to ``log``."""
    return ChildProcess(
        [sys.executable, "-m", module, *args],
        log_path=log,
        env=child_env(env),
        name=name or module,
        stdin_pipe=stdin_pipe,
        new_session=False,
    )


def nodesync_child(
    *args: str, log: Path, env: Mapping[str, str] | None = None, name: str = ""
) -> ChildProcess:
    """``nodesync ARGS`` as a child (not started yet), named after its command."""
    command = itertools.takewhile(lambda arg: not arg.startswith("-"), args)
    return python_child(
        "exporter", *args, log=log, env=env, name=name or " ".join(["nodesync", *command])
    )


def start_nodesync(*args: str, log: Path, env: Mapping[str, str] | None = None) -> ChildProcess:
    """Start ``nodesync ARGS``; the caller stops it (``stop()``, safe to repeat)."""
    child = nodesync_child(*args, log=log, env=env)
    child.start()
    return child


class Children:
    """The children one run started, stopped together at its end, the last started first (the
    clients before the servers they talk to). Use as a context manager."""

    def __init__(self) -> None:
        self._started: list[ChildProcess] = []

    def start(self, child: ChildProcess) -> ChildProcess:
        child.start()
        self._started.append(child)
        return child

    def stop_all(self) -> None:
        while self._started:
            self._started.pop().stop()

    def __enter__(self) -> Children:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop_all()
