"""ChildProcess: a child fed through a stdin pipe, waiting for it to exit by itself, stopping it
by its PID (SIGTERM, then SIGKILL) with its pipe closed, and the session it runs in."""

from __future__ import annotations

import gc
import os
import signal
import socket
import sys
import warnings
from pathlib import Path

import pytest

from nodesync_sim.real.forward import start_relay
from nodesync_sim.real.process import ChildProcess, ChildProcessFailed, port_free

#: Copies stdin to stdout (the log) line by line; exits 3 at end of file.
ECHO = "import sys\nfor line in sys.stdin:\n    print('got', line.strip(), flush=True)\nsys.exit(3)"
#: Ignores SIGTERM: only SIGKILL ends it.
STUBBORN = (
    "import signal, sys, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\ntime.sleep(60)"
)


def test_a_child_fed_through_its_stdin_exits_at_end_of_file(tmp_path: Path) -> None:
    child = ChildProcess(
        [sys.executable, "-c", ECHO], log_path=tmp_path / "echo.log", stdin_pipe=True
    )
    assert child.wait(0.1) is None  # not started
    child.start()
    try:
        assert child.stdin is not None
        child.stdin.write(b"one\ntwo\n")
        child.stdin.flush()
        child.wait_until(lambda: "got two" in child.log_tail(), timeout=10, what="echoing")
        assert child.wait(0.05) is None  # still reading
        child.close_stdin()
        child.close_stdin()  # twice is fine
        assert child.stdin is None
        assert child.wait(10) == 3
        assert child.log_tail().splitlines() == ["got one", "got two"]
    finally:
        child.stop()


def test_stop_closes_the_pipe_and_ends_the_child(tmp_path: Path) -> None:
    child = ChildProcess(
        [sys.executable, "-c", ECHO], log_path=tmp_path / "echo.log", stdin_pipe=True
    )
    child.start()
    pid = child.pid
    child.stop()
    assert pid is not None
    assert not child.running
    assert child.stdin is None
    assert child.returncode in (3, -signal.SIGTERM)  # end of file first, or SIGTERM first
    child.stop()  # twice is fine


def test_without_a_pipe_stdin_is_dev_null(tmp_path: Path) -> None:
    child = ChildProcess([sys.executable, "-c", ECHO], log_path=tmp_path / "echo.log")
    child.start()
    try:
        assert child.stdin is None
        assert child.wait(10) == 3  # end of file at once
    finally:
        child.stop()


def test_a_child_that_ignores_sigterm_is_killed(tmp_path: Path) -> None:
    child = ChildProcess([sys.executable, "-c", STUBBORN], log_path=tmp_path / "stubborn.log")
    child.start()
    child.wait_until(lambda: "ready" in child.log_tail(), timeout=10, what="ready")
    child.stop(timeout=0.2)
    assert child.returncode == -signal.SIGKILL


def test_waiting_for_a_child_that_exits_reports_its_log(tmp_path: Path) -> None:
    child = ChildProcess(
        [sys.executable, "-c", "print('bye'); raise SystemExit(2)"], log_path=tmp_path / "x.log"
    )
    child.start()
    with pytest.raises(ChildProcessFailed, match=r"exited \(code 2\)[\s\S]*bye"):
        child.wait_until(lambda: False, timeout=10)
    child.stop()


@pytest.mark.parametrize("new_session", [True, False])
def test_a_child_runs_in_a_session_of_its_own_or_in_ours(tmp_path: Path, new_session: bool) -> None:
    child = ChildProcess(
        [sys.executable, "-c", STUBBORN], log_path=tmp_path / "s.log", new_session=new_session
    )
    child.start()
    try:
        assert child.pid is not None
        assert (os.getsid(child.pid) == child.pid) is new_session
        assert (os.getsid(child.pid) == os.getsid(0)) is not new_session
    finally:
        child.stop(timeout=0.2)


def test_port_free_says_whether_an_address_can_be_bound() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert not port_free("127.0.0.1", port)
    assert port_free("127.0.0.1", port)


def test_a_relay_that_cannot_listen_fails_and_leaves_no_open_pipe(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        relay = f"/proc/self/ns/net,127.0.0.1:{port}=/proc/self/ns/net,127.0.0.1:1"
        with pytest.raises(ChildProcessFailed, match="Address already in use"):
            start_relay([relay], tmp_path / "relay.log")
    # The failed child's stdin pipe was closed, not left to the garbage collector (which would
    # raise a ResourceWarning in whichever test runs next).
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        gc.collect()
