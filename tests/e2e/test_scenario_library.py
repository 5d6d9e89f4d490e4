"""A fast subset of the scenario library (scenarios/, see docs/e2e.md) through the local chain:
each scenario's expected decisions are exactly the ones nodesync takes (precision and recall 1),
its first steps within the scenario's deadline, its pause as expected.

The scenarios run at the same time, each through its own chain (its own API server,
Prometheus, Alertmanager, simulator, agent and controller, on ports and with registries of its
own) in a process of its own: a scenario mostly waits for its timeline, so side by side they take
the time of the longest instead of the sum, and each is still watched for all of its
``expect.run_seconds``. A chain's in-process parts (the API server, the simulator, the
controller) run in one event loop, so one process per chain lets them use every core instead
of sharing one thread: six chains in one loop fell behind their timelines on a busy machine.
One test per scenario reads its outcome."""

from __future__ import annotations

import asyncio
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import pytest

from nodesync_sim.demo.library import Outcome, report, run_scenario
from nodesync_sim.real.prometheus import missing_binaries
from tests.e2e.chainrun import scenario

pytestmark = [pytest.mark.prometheus]

#: Quick ones (30 to 40 s each after the chain started) that stage what only the simulator's
#: newer parts can: a control-plane blip's pause, a frozen simulated runtime rolled back to the
#: delete, a PodDisruptionBudget that blocks a drain until it is relaxed (it must have refused
#: at least once), a controller restarted mid-rollback (it must have been), a wave whose
#: failed joins burn the join SLO (its alert must have fired), and a dry run whose alert
#: episodes end half cleared by themselves, half outlasting its clear window (both counted).
FAST = [
    "control-plane-blip.json",
    "frozen-runtime.json",
    "pdb-blocks-then-allows.json",
    "controller-restart.json",
    "join-slo.json",
    "dry-run-precision.json",
]


def _run_one(name: str) -> Outcome:
    """One scenario in a process of its own (run by the pool; a module-level function so that
    a spawned process can import it)."""
    return asyncio.run(run_scenario(scenario(name)))


def _run_all() -> dict[str, Outcome | BaseException]:
    # spawn, not fork: the test process has threads, and a forked child would inherit their locks
    context = multiprocessing.get_context("spawn")
    results: dict[str, Outcome | BaseException] = {}
    with ProcessPoolExecutor(max_workers=len(FAST), mp_context=context) as pool:
        futures = {name: pool.submit(_run_one, name) for name in FAST}
        for name, future in futures.items():
            try:
                results[name] = future.result()
            except Exception as exc:  # the test of that scenario raises it
                results[name] = exc
    return results


@pytest.fixture(scope="module")
def outcomes() -> dict[str, Outcome | BaseException]:
    """Every scenario of FAST, run side by side, each in a process of its own."""
    missing = missing_binaries()
    if missing:
        pytest.fail(f"the local chain needs these, missing: {', '.join(missing)}", pytrace=False)
    return _run_all()


@pytest.mark.timeout(150)
@pytest.mark.parametrize("name", FAST)
def test_a_library_scenario_decides_as_expected(
    outcomes: dict[str, Outcome | BaseException], name: str
) -> None:
    outcome = outcomes[name]
    if isinstance(outcome, BaseException):
        raise outcome
    print(f"[e2e] {report(outcome)}")
    assert outcome.passed, report(outcome)
