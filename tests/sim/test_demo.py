"""``nodesync demo`` (the README's first command) as a person runs it: start it, watch the
summary and the NodeRollbacks until the hook has rolled the failed node back, press Ctrl-C, and
nothing is left."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.containerd, pytest.mark.prometheus, pytest.mark.timeout(180)]

ROLLED_BACK = re.compile(r"actions: .*delete_node 1.*evict_pod 1")


def _read_until(proc: subprocess.Popen[str], pattern: re.Pattern[str], within: float) -> str:
    """The output so far, once a line matches ``pattern``; fails after ``within`` seconds."""
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if not ready:
            assert proc.poll() is None, "".join(seen)
            continue
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if pattern.search(line):
            return "".join(seen)
    raise AssertionError(f"no line matched {pattern.pattern!r}:\n{''.join(seen)}")


def test_demo_rolls_the_failed_node_back_and_stops_cleanly_on_ctrl_c() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "demo", "--log.level", "warning"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        shown = _read_until(proc, re.compile(r"^\s+prometheus\s+http://127\.0\.0\.1:\d+"), 90)
        assert "alertmanager" in shown
        shown += _read_until(proc, ROLLED_BACK, 90)
        # The NodeRollbacks, as kubectl lists them: the node rollback finished.
        shown += _read_until(proc, re.compile(r"real-1\s+rollback_node\s+Succeeded"), 30)
        assert re.search(r"NAME\s+NODE\s+ACTION\s+PHASE\s+STEP", shown), shown
        assert re.search(r"\s+evict_pod\s+Succeeded", shown), shown
        # The alerts that caused the rollback fired and were seen by a person.
        assert "NodesyncNewNodeNotReady(real-1)" in shown
        assert "NodesyncNewNodePodCrashLooping" in shown
        kubeconfig = re.search(r"kubeconfig\s+(\S+)", shown)
        assert kubeconfig is not None, shown
        workdir = Path(kubeconfig.group(1)).parent
        assert workdir.is_dir()
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, rest
    assert "stopped; nothing left running or mounted." in rest
    assert not workdir.exists(), f"{workdir} left behind"
