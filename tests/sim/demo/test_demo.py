"""``nodesync demo`` (the README's first command) as a person runs it: start it, watch the
summary and the NodeRollbacks until the hook has rolled the failed node back, look at the nodes
with kubectl, stop it with Ctrl-C, a hangup or with its output gone, and nothing is left."""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

from tests.support.wait import until

pytestmark = [pytest.mark.containerd, pytest.mark.prometheus, pytest.mark.timeout(180)]

ROLLED_BACK = re.compile(r"actions: .*delete_node 1.*evict_pod 1")
WAVE_JOINS = re.compile(r"^the wave joins now")
CLEAN = "stopped; nothing left running or mounted."


#: Each demo's stderr (by PID): a file, not a pipe nobody reads while the test waits for a
#: line of its stdout (a full pipe would block the demo).
_STDERR: dict[int, IO[bytes]] = {}


def _start_demo(*extra: str, stdout: int = subprocess.PIPE) -> subprocess.Popen[str]:
    stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed by _stderr, once it has exited)
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "demo", "--log.level", "warning", *extra],
        stdout=stdout,
        stderr=stderr,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    _STDERR[proc.pid] = stderr
    return proc


def _stderr(proc: subprocess.Popen[str]) -> str:
    stderr = _STDERR.pop(proc.pid, None)
    if stderr is None:
        return ""
    with stderr:
        stderr.seek(0)
        return stderr.read().decode(errors="replace")


#: What was read of each demo's output (by PID) and not returned yet: a chunk holds more than
#: the line looked for.
_UNREAD: dict[int, str] = {}


def _read_until(proc: subprocess.Popen[str], pattern: re.Pattern[str], within: float) -> str:
    """The output so far, once a line matches ``pattern``; fails after ``within`` seconds.
    Reads the pipe itself (not through the file object, whose buffer select cannot see)."""
    assert proc.stdout is not None
    descriptor = proc.stdout.fileno()
    seen = ""
    pending = _UNREAD.pop(proc.pid, "")
    deadline = time.monotonic() + within
    while True:
        while "\n" in pending:
            line, pending = pending.split("\n", 1)
            seen += line + "\n"
            if pattern.search(line):
                _UNREAD[proc.pid] = pending
                return seen
        if time.monotonic() >= deadline:
            raise AssertionError(f"no line matched {pattern.pattern!r}:\n{seen}{pending}")
        ready, _, _ = select.select([descriptor], [], [], 0.5)
        if ready:
            chunk = os.read(descriptor, 65536)
            if not chunk:
                raise AssertionError(f"no line matched {pattern.pattern!r}:\n{seen}{pending}")
            pending += chunk.decode()
        else:
            assert proc.poll() is None, seen + pending


def _read_until_all(
    proc: subprocess.Popen[str], patterns: list[re.Pattern[str]], within: float
) -> str:
    """The output so far, once each of ``patterns`` has matched a line, in whatever order;
    fails after ``within`` seconds."""
    deadline = time.monotonic() + within
    seen = ""
    left = list(patterns)
    while left:
        either = re.compile("|".join(f"(?:{p.pattern})" for p in left))
        seen += _read_until(proc, either, deadline - time.monotonic())
        last = seen.splitlines()[-1]
        left = [p for p in left if not p.search(last)]
    return seen


def _finish(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[str, str]:
    """Its output once it has exited (what was not read yet); a demo still running after
    ``timeout`` (a test failed before stopping it) gets SIGTERM, so that it still removes
    what it started."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return _UNREAD.pop(proc.pid, "") + (out or ""), (err or "") + _stderr(proc)


def _stop(proc: subprocess.Popen[str]) -> None:
    """In a test's ``finally``: a demo the test did not stop gets SIGTERM and is waited for
    (it removes what it started); killed only when it does not exit."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    _stderr(proc)


# -------------------------------------------------------------------- what the demo started


@dataclass(frozen=True)
class Started:
    """What a running demo started, as seen from outside: its directories (from the
    addresses it prints) and every process of it (started from it, or naming one of its
    directories, e.g. the containerd shims that containerd reparents, and their children)."""

    directories: tuple[Path, ...]
    processes: frozenset[tuple[int, str]]  # (pid, start time): a PID may be reused later
    commands: tuple[str, ...]


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time) of a process, None when it is gone (or a zombie: it has
    exited, and its parent, init for a reparented shim, has not reaped it yet)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    if fields[0] == "Z":
        return None
    return int(fields[1]), fields[19]


def _processes() -> Iterator[tuple[int, int, str, str]]:
    """(pid, parent pid, start time, command line) of every process."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        stat = _stat(pid)
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if stat is not None:
            yield pid, stat[0], stat[1], cmdline


def _alive(pid: int, start: str) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[1] == start


def _directories(shown: str) -> tuple[Path, ...]:
    """The chain's work directory (the kubeconfig's) and containerd's (its socket's)."""
    kubeconfig = re.search(r"^\s+kubeconfig\s+(\S+)$", shown, re.M)
    containerd = re.search(r"^\s+containerd\s+unix://(\S+)$", shown, re.M)
    assert kubeconfig, shown
    assert containerd, shown
    return Path(kubeconfig.group(1)).parent, Path(containerd.group(1)).parent


def started_by(demo_pid: int, directories: tuple[Path, ...]) -> Started:
    assert all(d.is_dir() for d in directories), directories
    table = list(_processes())
    roots = {demo_pid} | {
        pid for pid, _, _, cmd in table if any(str(d) in cmd for d in directories)
    }
    found = set(roots)
    while True:  # and their descendants
        more = {pid for pid, ppid, _, _ in table if ppid in found} - found
        if not more:
            break
        found |= more
    starts = {pid: start for pid, _, start, _ in table}
    processes = frozenset((pid, starts[pid]) for pid in found - {demo_pid})
    commands = tuple(cmd for pid, _, _, cmd in table if pid in found - {demo_pid})
    return Started(directories, processes, commands)


def _containerd_directory(demo_pid: int, within: float) -> Path:
    """The directory of the containerd the demo started, once it runs (its config file's)."""

    def started() -> Path | None:
        for _, ppid, _, cmd in _processes():
            # By name or by path: the launcher may name the binary of a chosen release.
            found = re.match(r"(?:\S*/)?containerd --config (\S+)/config\.toml", cmd)
            if ppid == demo_pid and found:
                return Path(found.group(1))
        return None

    # Polling /proc: no event tells when a process starts.
    return until(started, timeout=within, what="the demo to start its containerd")


def _mounts_under(directories: tuple[Path, ...]) -> list[str]:
    points = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    return [p for p in points if any(p.startswith(f"{d}/") or p == str(d) for d in directories)]


def _cgroups(directories: tuple[Path, ...]) -> list[Path]:
    """The pods' cgroups (containerd's cgroup root is named after its directory)."""
    names = {f"nodesync-{d.name}" for d in directories}
    hierarchies = [Path("/sys/fs/cgroup"), *Path("/sys/fs/cgroup").iterdir()]
    return [h / n for h in hierarchies for n in names if (h / n).exists()]


def assert_nothing_left(started: Started) -> None:
    assert [p for p in started.processes if _alive(*p)] == []
    naming = [
        cmd for _, _, _, cmd in _processes() if any(str(d) in cmd for d in started.directories)
    ]
    assert naming == []
    assert _mounts_under(started.directories) == []
    assert [d for d in started.directories if d.exists()] == []
    assert _cgroups(started.directories) == []


# -------------------------------------------------------------------- the tests


def test_demo_rolls_the_failed_node_back_and_stops_cleanly_on_ctrl_c() -> None:
    proc = _start_demo()
    try:
        shown = _read_until(proc, re.compile(r"^\s+prometheus\s+http://127\.0\.0\.1:\d+"), 90)
        assert "alertmanager" in shown
        # The actions done, and the NodeRollbacks as kubectl lists them: the node rollback
        # finished. In either order: the controller counts a step once the API server has its
        # status, and a summary can read the NodeRollbacks after that but the counts before.
        shown += _read_until_all(
            proc, [ROLLED_BACK, re.compile(r"real-1\s+rollback_node\s+Succeeded")], 120
        )
        assert re.search(r"NAME\s+NODE\s+ACTION\s+PHASE\s+STEP", shown), shown
        assert re.search(r"\s+evict_pod\s+Succeeded", shown), shown
        # The alerts that caused the rollback fired and were seen by a person.
        assert "NodesyncNewNodeNotReady(real-1)" in shown
        assert "NodesyncNewNodePodCrashLooping" in shown
        started = started_by(proc.pid, _directories(shown))
        kubeconfig = str(started.directories[0] / "kubeconfig")
        rollbacks = _kubectl(kubeconfig, "get", "noderollbacks", "-o", "wide")
        assert rollbacks.returncode == 0, rollbacks.stderr
        assert re.search(r"^NAME\s+NODE\s+ACTION\s+PHASE\s+STEP\s+REASON", rollbacks.stdout)
        assert re.search(r"\sreal-1\s+rollback_node\s+Succeeded\s", rollbacks.stdout), rollbacks
        proc.send_signal(signal.SIGINT)
        rest, err = _finish(proc)
    finally:
        _stop(proc)
    assert proc.returncode == 128 + signal.SIGINT, rest + err
    assert CLEAN in rest
    assert "Traceback" not in err, err
    assert_nothing_left(started)


def _kubectl(kubeconfig: str, *args: str) -> subprocess.CompletedProcess[str]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is needed"
    return subprocess.run(
        [kubectl, "--kubeconfig", kubeconfig, "--request-timeout", "20s", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("stop_signal", [signal.SIGHUP, signal.SIGTERM], ids=lambda s: s.name)
def test_kubectl_sees_the_demo_nodes_and_a_stop_signal_removes_everything(
    stop_signal: signal.Signals,
) -> None:
    """SIGHUP: the terminal went away; SIGTERM: kill, or a service manager."""
    proc = _start_demo()
    try:
        shown = _read_until(proc, WAVE_JOINS, 90)
        started = started_by(proc.pid, _directories(shown))
        for binary in ("containerd ", "containerd-shim-runc-v2", "prometheus", "alertmanager"):
            assert any(binary in cmd for cmd in started.commands), started.commands
        command = re.search(r"kubectl --kubeconfig (\S+) get nodes$", shown, re.M)
        assert command, shown
        kubeconfig = command.group(1)
        config = json.loads(Path(kubeconfig).read_text())
        assert config["clusters"][0]["cluster"]["server"].startswith("https://127.0.0.1:")
        assert config["clusters"][0]["cluster"]["certificate-authority-data"]
        # kubectl verifies the server against the kubeconfig's CA and sends the token.
        nodes = _kubectl(kubeconfig, "get", "nodes")
        assert nodes.returncode == 0, nodes.stderr
        lines = nodes.stdout.splitlines()
        assert re.match(r"NAME\s+STATUS\s+ROLES\s+AGE\s+VERSION$", lines[0]), nodes.stdout
        names = {line.split()[0] for line in lines[1:]}
        old_nodes = {f"old-00{i}" for i in range(4)}  # there from the start, Ready
        assert old_nodes <= names, nodes.stdout
        assert all(" Ready " in line for line in lines if line.split()[0] in old_nodes)
        old = "old-000"
        described = _kubectl(kubeconfig, "describe", "node", old)
        assert described.returncode == 0, described.stderr
        assert re.search(rf"^Name:\s+{old}$", described.stdout, re.M), described.stdout
        assert "Non-terminated Pods:" in described.stdout
        proc.send_signal(stop_signal)
        rest, err = _finish(proc)
    finally:
        _stop(proc)
    assert proc.returncode == 128 + stop_signal, rest + err
    assert CLEAN in rest
    assert "Traceback" not in err, err
    assert_nothing_left(started)


def test_ctrl_c_while_it_starts_stops_what_was_started() -> None:
    """Ctrl-C once containerd runs, long before the chain is up: the start is cancelled and
    what was started is removed."""
    proc = _start_demo()
    try:
        shown = _read_until(proc, re.compile(r"^starting the chain"), 30)
        containerd = _containerd_directory(proc.pid, within=60)
        started = started_by(proc.pid, (containerd,))
        proc.send_signal(signal.SIGINT)
        rest, err = _finish(proc)
    finally:
        _stop(proc)
    assert proc.returncode == 128 + signal.SIGINT, shown + rest + err
    assert "the wave joins now" not in rest
    assert CLEAN in rest
    assert "Traceback" not in err, err
    assert_nothing_left(started)


def test_ctrl_c_with_the_output_gone_still_removes_everything() -> None:
    """As ``nodesync demo | tee log`` with Ctrl-C: tee dies first, the demo's next line meets
    a closed pipe."""
    read_end, write_end = os.pipe()
    proc = _start_demo(stdout=write_end)
    os.close(write_end)
    try:
        shown = ""
        deadline = time.monotonic() + 90
        while not re.search(WAVE_JOINS.pattern, shown, re.M):
            assert time.monotonic() < deadline, shown
            ready, _, _ = select.select([read_end], [], [], 0.5)
            if ready:
                chunk = os.read(read_end, 65536)
                assert chunk, shown
                shown += chunk.decode()
        started = started_by(proc.pid, _directories(shown))
        os.close(read_end)  # the reader is gone
        read_end = -1
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
        err = _stderr(proc)
    finally:
        _stop(proc)
        if read_end >= 0:
            os.close(read_end)
    assert proc.returncode == 128 + signal.SIGINT, err
    assert "Traceback" not in err, err
    assert "BrokenPipeError" not in err, err
    assert_nothing_left(started)


def test_a_closed_output_stops_the_demo_and_removes_everything() -> None:
    """As ``nodesync demo | head``: once nobody reads, the demo stops by itself (exit 1),
    without a traceback."""
    # The first ten lines: up to the kubeconfig's, after the chain has started.
    proc = subprocess.Popen(
        f"{sys.executable} -m exporter demo --log.level warning | head -n 10;"
        " exit ${PIPESTATUS[0]}",
        shell=True,
        executable="/bin/bash",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    shown, err = _finish(proc, timeout=120)
    assert proc.returncode == 1, shown + err
    assert "Traceback" not in err, err
    assert "BrokenPipeError" not in err, err
    assert_nothing_left(Started(_directories(shown), frozenset(), ()))


def test_the_demo_refuses_to_run_as_another_user_than_root() -> None:
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is needed"
    # As nobody, keeping only the right to read files (the interpreter may be under a home
    # only root can read): no mounts, no cgroups.
    done = subprocess.run(
        [
            setpriv,
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=+dac_read_search",
            "--ambient-caps=+dac_read_search",
            sys.executable,
            "-m",
            "exporter",
            "demo",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert done.returncode != 0
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "needs root" in lines[0], lines
    assert "containerd" in lines[0], lines
