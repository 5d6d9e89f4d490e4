"""The benchmark harness' own parts that a wrong result would hide in a figure: children run
this tree's code, readiness waits fail with the child's log, percentiles and the token
bucket's bound."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from bench.harness.processes import TREE, Children, child_env, python_child, run_main
from bench.harness.rates import write_rates
from bench.harness.readiness import wait_http, wait_port
from bench.harness.samplers import CounterSample, cpu_seconds, peak_rss_bytes, rss_bytes
from bench.harness.stats import percentile, summary_ms
from nodesync_sim.real.process import ChildProcess, ChildProcessFailed, free_port
from tests.support.wait import until


def test_a_child_imports_this_trees_code_from_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "which.log"
    # From another directory and without a PYTHONPATH of the caller's: neither the working
    # directory nor an installed copy may decide which code runs.
    monkeypatch.delenv("PYTHONPATH", raising=False)
    child = ChildProcess(
        [sys.executable, "-c", "import exporter, nodesync_sim, bench; print(exporter.__file__)"],
        log_path=log,
        cwd=tmp_path,
        env=child_env(),
    )
    with Children() as children:
        children.start(child)
        assert child.wait(30) == 0, child.log_tail()
    assert Path(log.read_text().strip()).parents[1] == TREE


async def test_waits_end_when_the_child_answers(tmp_path: Path) -> None:
    port = free_port()
    with Children() as children:
        server = children.start(
            python_child(
                "http.server", "--bind", "127.0.0.1", str(port), "--directory", str(tmp_path),
                log=tmp_path / "http.log",
            )
        )  # fmt: skip
        await wait_port(server, port, within=30)
        await wait_http(server, f"http://127.0.0.1:{port}/", within=30)
        assert server.pid is not None
        assert os.getsid(server.pid) == os.getsid(0)  # the benchmark's session, its autogroup
        assert 0 < rss_bytes(server.pid) <= peak_rss_bytes(server.pid)
        assert cpu_seconds(server.pid) > 0
    assert not server.running  # stopped by its PID at the end


async def test_a_wait_fails_with_the_log_when_the_child_exits(tmp_path: Path) -> None:
    with Children() as children:
        child = children.start(
            python_child("this_module_does_not_exist", log=tmp_path / "gone.log")
        )
        with pytest.raises(ChildProcessFailed, match=r"exited[\s\S]*No module named"):
            await wait_port(child, free_port(), within=30)


#: A benchmark's main coroutine in miniature: it says it started, waits, and cleans up.
_MAIN = """
import asyncio, pathlib, sys
from bench.harness.processes import run_main
marks = pathlib.Path(sys.argv[1])
async def main():
    try:
        (marks / "started").touch()
        await asyncio.sleep(3600)
    finally:
        await asyncio.sleep(0)  # a cleanup that awaits, as the benchmarks' do
        (marks / "cleaned").touch()
run_main(main())
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_runs_the_benchmarks_cleanups(tmp_path: Path, signum: int) -> None:
    child = ChildProcess(
        [sys.executable, "-c", _MAIN, str(tmp_path)],
        log_path=tmp_path / "main.log",
        env=child_env(),
    )
    with Children() as children:
        children.start(child)
        until(lambda: (tmp_path / "started").exists(), timeout=30, what="the main to start")
        assert child.pid is not None
        os.kill(child.pid, signum)
        assert child.wait(30) == 128 + signum, child.log_tail()
    assert (tmp_path / "cleaned").exists(), child.log_tail()
    assert "Traceback" not in (tmp_path / "main.log").read_text()


def test_run_main_returns_what_the_main_returns() -> None:
    async def main() -> int:
        return 7

    assert run_main(main()) == 7


def test_percentiles_and_summaries() -> None:
    samples = [i / 1000 for i in range(1, 101)]  # 1..100 ms
    assert percentile(samples, 0.5) == pytest.approx(0.0505, abs=0.001)
    assert percentile(samples, 0.99) == 0.099
    assert percentile([0.2], 0.9) == 0.2
    summary = summary_ms(samples)
    assert summary["count"] == 100
    assert summary["max_ms"] == pytest.approx(100)
    assert summary_ms([]) == {"count": 0}


def _bucket_writes(qps: float, burst: int, seconds: int, extra: int) -> list[CounterSample]:
    """Samples every 0.25 s of a writer that spends its burst at once, then writes at ``qps``
    (``extra`` more writes in the second second, above what the bucket allows)."""
    samples = [CounterSample(0.0, 0.01, 0)]
    written = 0
    for k in range(1, 4 * seconds + 1):
        t = k / 4
        written = burst + int(qps * t) + (extra if t >= 2 else 0)
        samples.append(CounterSample(t, t + 0.01, written))
    return samples


def test_the_token_bucket_bound_is_checked() -> None:
    within = write_rates(_bucket_writes(20, 20, 30, 0), qps=20, burst=20)
    assert within["token_bucket_bound_violations"] == 0
    assert within["closest_to_bound_writes"] <= 0
    assert within["max_in_one_second"] >= 20
    assert within["average_per_second"] == pytest.approx(20 + 20 / 30, rel=0.05)
    over = write_rates(_bucket_writes(20, 20, 30, 5), qps=20, burst=20)
    assert over["token_bucket_bound_violations"] > 0
    assert over["closest_to_bound_writes"] > 0
    assert write_rates([CounterSample(0, 0.1, 3), CounterSample(1, 1.1, 3)], 20, 20) == {"total": 0}


async def test_a_served_stand_in_answers_and_ends_on_sigterm(tmp_path: Path) -> None:
    """bench.harness.serving, through the kubelet stand-in: it answers once it said it listens,
    and SIGTERM ends it cleanly (exit code 0)."""
    port = free_port()
    with Children() as children:
        kubelet = children.start(
            python_child("bench.kubelet_healthz", "--port", str(port), log=tmp_path / "k.log")
        )
        await wait_http(kubelet, f"http://127.0.0.1:{port}/healthz", within=30)
        assert kubelet.pid is not None
        os.kill(kubelet.pid, signal.SIGTERM)
        assert kubelet.wait(30) == 0, kubelet.log_tail()
        assert "listening" in (tmp_path / "k.log").read_text()
