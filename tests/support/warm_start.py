"""``python -m tests.support.warm_start ARGV_FILE``: ``python -m exporter ARGS...``, started ahead.

The interpreter starts and imports the controller's modules (about 4 s of a busy core, mostly
the Kubernetes client), prints :data:`WARM`, then waits for SIGUSR1. On the signal it reads its
arguments from ``ARGV_FILE`` (a JSON list) and runs ``exporter``'s ``__main__`` exactly as
``python -m exporter ARGS...`` does. Until then it has opened no port, no file, no connection:
tests keep a few of these ready (tests/support/controller_process.py), so that starting a controller
costs the controller's own start, not Python's imports.

A process whose parent is gone (the test run was killed) exits by itself.
"""

from __future__ import annotations

import signal

# Held from the start (a SIGUSR1 during the imports would end the process), taken below.
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})

import json  # noqa: E402
import os  # noqa: E402
import runpy  # noqa: E402
import sys  # noqa: E402

import exporter.cli  # noqa: E402 - imported ahead: that is the point
import exporter.controller.executor  # noqa: E402
import exporter.controller.webhook  # noqa: E402
import exporter.kube.api  # noqa: E402, F401

WARM = "warm: waiting for SIGUSR1"
#: How often the waiting process checks that its parent is still there.
LIFELINE = 1.0


def wait_for_the_signal() -> None:
    parent = os.getppid()
    print(WARM, flush=True)
    while signal.sigtimedwait({signal.SIGUSR1}, LIFELINE) is None:
        if os.getppid() != parent:
            sys.exit(0)  # orphaned: nobody will ever start it
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})


if __name__ == "__main__":
    argv_file = sys.argv[1]
    wait_for_the_signal()
    with open(argv_file) as f:
        args = json.load(f)
    sys.argv = ["exporter", *args]
    runpy.run_module("exporter", run_name="__main__", alter_sys=True)
