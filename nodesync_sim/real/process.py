"""Child processes of the local stand-ins, the tests and the benchmarks, started and stopped the
same way everywhere.

A :class:`ChildProcess` runs in a session of its own (a Ctrl-C meant for the caller does not
reach it first; ``new_session=False`` keeps it in the caller's, as the benchmarks do), writes
stdout and stderr to a log file, and is stopped by its PID: SIGTERM, then SIGKILL after a
deadline. Stopping is safe to repeat. Errors carry the log's tail. Its
stdin is /dev/null, or a pipe the caller writes to (``stdin_pipe=True``: a child fed line by
line, such as the storm benchmark's Alertmanager).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

#: How long a process gets to exit after SIGTERM before it is killed.
STOP_TIMEOUT = 10.0


class ChildProcessFailed(RuntimeError):
    """A child process could not be started, or exited before it was ready."""


#: Well-known ports of services a machine may run for real (Prometheus, Alertmanager and its
#: cluster port, a kube-apiserver, etcd): never handed out.
RESERVED_PORTS = frozenset({9090, 9093, 9094, 6443, 2379, 2380})


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now, never a reserved one (another process may take
    it before the caller binds it: callers that can, retry on "address already in use")."""
    while True:
        with socket.socket() as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if port not in RESERVED_PORTS:
            return port


def port_free(host: str, port: int) -> bool:
    """Whether ``host:port`` can be bound right now (nothing listens there)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def log_tail(path: Path | None, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file ("" when it cannot be read)."""
    if path is None:
        return ""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class ChildProcess:
    """``argv`` as a child process; :meth:`start` it, then :meth:`stop` it."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        log_path: Path,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        name: str = "",
        stdin_pipe: bool = False,
        new_session: bool = True,
    ) -> None:
        self.argv = list(argv)
        self.log_path = log_path
        self.name = name or Path(self.argv[0]).name
        self._cwd = cwd
        self._env = dict(env) if env is not None else None
        self._stdin_pipe = stdin_pipe
        self._new_session = new_session
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The process id while it runs, else None."""
        return self._proc.pid if self.running and self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc is not None else None

    @property
    def stdin(self) -> IO[bytes] | None:
        """The pipe to the process' stdin (started with ``stdin_pipe=True``), until closed."""
        if self._proc is None or self._proc.stdin is None or self._proc.stdin.closed:
            return None
        return self._proc.stdin

    def close_stdin(self) -> None:
        """Close the pipe to stdin (the child reads end of file). Safe to repeat."""
        if self._proc is not None and self._proc.stdin is not None:
            with contextlib.suppress(OSError):  # the child may have gone: a broken pipe
                self._proc.stdin.close()

    def log_tail(self, lines: int = 30) -> str:
        return log_tail(self.log_path, lines)

    def start(self) -> None:
        if self.running:
            raise ChildProcessFailed(f"{self.name} is already running")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            try:
                self._proc = subprocess.Popen(
                    self.argv,
                    cwd=self._cwd,
                    env=self._env,
                    stdin=subprocess.PIPE if self._stdin_pipe else subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=self._new_session,
                )
            except OSError as exc:
                raise ChildProcessFailed(f"cannot start {self.name}: {exc}") from exc

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the process, if it runs."""
        if self._proc is not None and self._proc.poll() is None:
            os.kill(self._proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL, and wait until it is gone."""
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()

    def wait(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` seconds for the process to exit by itself; its exit code, or
        None while it still runs (or was never started)."""
        if self._proc is None:
            return None
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self._proc.wait(timeout)
        return None

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Close stdin's pipe, then SIGTERM; SIGKILL when it has not exited within ``timeout``.
        Safe to repeat."""
        proc = self._proc
        if proc is None:
            return
        self.close_stdin()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
        proc.wait()

    def wait_until(
        self,
        ready: Callable[[], bool],
        *,
        timeout: float,
        what: str = "ready",
        interval: float = 0.05,
    ) -> None:
        """Poll ``ready()`` until it is true. Raises ChildProcessFailed with the log's tail when
        the process exits first or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while True:
            if not self.running:
                raise ChildProcessFailed(
                    f"{self.name} exited (code {self.returncode}) before it was {what}:\n"
                    + self.log_tail()
                )
            if ready():
                return
            if time.monotonic() >= deadline:
                raise ChildProcessFailed(
                    f"{self.name} was not {what} within {timeout:g} s:\n" + self.log_tail()
                )
            time.sleep(interval)
