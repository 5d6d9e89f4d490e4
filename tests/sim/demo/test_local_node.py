"""``nodesync sim node`` (the README's first command) as a person runs it: start, look, Ctrl-C."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.metrics.exposition import labels, series
from tests.support.wait import until

pytestmark = pytest.mark.containerd


def _scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as response:
            return str(response.read().decode())
    except OSError:
        return None


def test_sim_node_serves_example_pods_and_cleans_up_on_ctrl_c(
    unused_tcp_port: int, tmp_path: Path
) -> None:
    log_path = tmp_path / "sim-node.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "exporter",
                "sim",
                "node",
                "--web.listen-address",
                f"127.0.0.1:{unused_tcp_port}",
                "--sync.period",
                "200ms",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:

        def scraped() -> str | None:
            assert proc.poll() is None, log_path.read_text()
            return _scrape(unused_tcp_port)

        text = until(
            scraped,
            accept=lambda t: (
                t is not None
                and series(t, "nodesync_pods").get(labels(phase="Running", source="runtime")) == 2
            ),
            timeout=60,
            what="two pods running, as the local node's /metrics shows",
            interval=0.1,
            detail=log_path.read_text,
        )
        pods = series(text, "nodesync_pods")
        assert pods[labels(phase="Running", source="runtime")] == 2
        assert pods[labels(phase="Failed", source="runtime")] == 1
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0, log_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = log_path.read_text()
    assert "local containerd stopped and removed" in output
    endpoint = re.search(r"cri_endpoint='unix://([^']+)'", output)
    assert endpoint, output
    state_dir = Path(endpoint.group(1)).parent
    assert not state_dir.exists(), f"{state_dir} left behind"
    assert _scrape(unused_tcp_port) is None
