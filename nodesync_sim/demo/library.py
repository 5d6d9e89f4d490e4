"""The scenario library's run: each scenario of scenarios/ through the local chain, and what
nodesync decided per node against what the scenario expects (its ``expect`` key).

A node's decision, as the API server saw it (the controller's writes and the Node's history):

- ``delete``: the controller deleted the Node;
- ``rollback``: the controller cordoned it (its NodeRollback) and did not delete it;
- ``cleanup``: the controller asked the node's agent for a cleanup without cordoning it;
- ``evict``: the controller evicted a pod of the node without touching the node;
- ``none``: the controller wrote nothing about the node.

Precision is the share of the decisions taken (every one but ``none``) that the scenario
expects; recall the share of the expected decisions that were taken (1.0 when there is nothing
to take, or nothing taken). The time from fault to first step is, for each expected action
taken, from the node's first fault starting (the simulator's timeline) to the controller's
first write about it (a write to the Node, or an eviction of its pod); a scenario may bound it
from above (``within_seconds``) and from below (``not_before_seconds``: a hold the rollback
must wait out).

A scenario may also state how many of each alert's episodes end how (``expect.episodes``, the
controller's ``nodesync_alert_episodes_total``); in a dry run, where nothing may be written,
the decisions scored are the ones nodesync would have taken for the episodes that outlasted
``dry_run_clear_within`` (nodesync_sim.demo.episodes).

Every scenario also checks the controller's API writes against its token bucket
(``--apiserver.qps``, ``--apiserver.burst``), as the API server received them: no stretch of
the run has more writes than a full bucket and its refill allow, give or take
``BUCKET_SLACK`` and the writes refilled in ``ARRIVAL_LAG_SECONDS`` (a write is seen when it
arrives, a little after it took its token).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from exporter.model.rollback import CLEANUP_REQUEST_ANNOTATION
from nodesync_sim.demo.chain import CONTROLLER_USER, Chain
from nodesync_sim.demo.episodes import (
    dry_run_decisions,
    dry_run_writes,
    episode_story,
    wait_for_episodes,
)
from nodesync_sim.fake.scaleout import timeline
from nodesync_sim.fake.scaleout.scenario import Expectation, Scenario, ScenarioError
from nodesync_sim.fake.scaleout.scenario_file import load

log = logging.getLogger(__name__)

#: Writes a stretch may be over the bucket's bound as the server sees them: the time from taking
#: a token to the request's arrival varies by a few milliseconds...
BUCKET_SLACK = 1.0
#: ...and on a busy machine by up to this many seconds: the controller and the simulated API
#: server share one event loop, which a loaded core can hold back for a few hundred milliseconds,
#: and writes that took their tokens apart can then arrive together. A stretch may be over the
#: bound by the writes the bucket refills in that time too (2.5 at the default 5 qps); a writer
#: that bypasses the limiter is over it by tens.
ARRIVAL_LAG_SECONDS = 0.5
#: The controller's writes its rate limiter does not cover (leader election's Lease).
UNLIMITED_RESOURCES = frozenset({"leases"})

PAUSED = "max_over_time(cluster:nodesync_actions_paused:bool[{seconds}s])"
FIRED = 'max_over_time(ALERTS{{alertname="{alert}",alertstate="firing"}}[{seconds}s])'


@dataclass(frozen=True, slots=True)
class Outcome:
    name: str
    expected: frozenset[tuple[str, str]]
    observed: frozenset[tuple[str, str]]
    first_step: dict[str, float] = field(default_factory=dict)  # node -> fault to first step
    problems: tuple[str, ...] = ()  # a pause or a deadline the scenario expects, missed

    @property
    def right(self) -> frozenset[tuple[str, str]]:
        return self.expected & self.observed

    @property
    def precision(self) -> float:
        return len(self.right) / len(self.observed) if self.observed else 1.0

    @property
    def recall(self) -> float:
        return len(self.right) / len(self.expected) if self.expected else 1.0

    @property
    def passed(self) -> bool:
        return self.precision == 1.0 and self.recall == 1.0 and not self.problems


def decisions(chain: Chain) -> dict[str, str]:
    """Every node's decision but ``none``, from the controller's writes and the Nodes'
    history."""
    writes = chain.audit.by(CONTROLLER_USER)
    pod_node = {pod.name: plan.name for plan in chain.sim.layout.nodes for pod in plan.pods}
    out: dict[str, str] = {}
    for plan in chain.sim.layout.nodes:
        name = plan.name
        states = chain.node_history.states.get(name, [])
        deleted = any(
            e.verb == "delete" and e.resource == "nodes" and e.name == name for e in writes
        )
        cordoned = any(bool((obj.get("spec") or {}).get("unschedulable")) for _, _, obj in states)
        asked = any(
            CLEANUP_REQUEST_ANNOTATION in ((obj.get("metadata") or {}).get("annotations") or {})
            for _, _, obj in states
        )
        evicted = any(e.subresource == "eviction" and pod_node.get(e.name) == name for e in writes)
        node_writes = any(e.resource == "nodes" and e.name == name for e in writes)
        if deleted:
            out[name] = "delete"
        elif cordoned and node_writes:
            out[name] = "rollback"
        elif asked and node_writes:
            out[name] = "cleanup"
        elif evicted:
            out[name] = "evict"
    return out


def first_steps(chain: Chain, nodes: Iterable[str]) -> dict[str, float]:
    """Seconds from each node's first fault (or the waves' start) to the controller's first
    write about it."""
    writes = chain.audit.by(CONTROLLER_USER)
    pod_node = {pod.name: plan.name for plan in chain.sim.layout.nodes for pod in plan.pods}
    started = chain.sim.clock.started_at or 0.0
    out: dict[str, float] = {}
    for node in nodes:
        fault = chain.sim.timeline.first(node, timeline.FAULT_STARTED)
        since = fault.at if fault is not None else started
        about = [
            e.at
            for e in writes
            if (e.resource == "nodes" and e.name == node)
            or (e.subresource == "eviction" and pod_node.get(e.name) == node)
        ]
        if about:
            out[node] = min(about) - since
    return out


def bucket_excess(
    times: Iterable[float], qps: float, burst: int, refills: Iterable[float] = ()
) -> float:
    """How many writes, at most, a stretch of ``times`` had beyond what a token bucket of
    ``qps`` and ``burst`` allows; 0.0 when it never went past it. The bucket starts full, and
    full again at each of ``refills`` (a controller process started again)."""
    tokens, last, worst = float(burst), None, 0.0
    pending = sorted(refills)
    for at in sorted(times):
        while pending and pending[0] <= at:
            tokens, last = float(burst), pending.pop(0)
        if last is not None:
            tokens = min(float(burst), tokens + (at - last) * qps)
        last = at
        tokens -= 1.0
        worst = max(worst, -tokens)
    return worst


def write_budget_problems(chain: Chain) -> list[str]:
    """The controller's writes past its token bucket, as a problem line (none: within it)."""
    settings = chain.executor_settings
    times = [e.at for e in chain.audit.by(CONTROLLER_USER) if e.resource not in UNLIMITED_RESOURCES]
    refills = [back for _, back, _ in chain.controller_restarts]
    excess = bucket_excess(times, settings.api_qps, settings.api_burst, refills)
    if excess <= BUCKET_SLACK + settings.api_qps * ARRIVAL_LAG_SECONDS:
        return []
    return [
        f"the controller's {len(times)} writes went {excess:.1f} past its token bucket "
        f"(qps {settings.api_qps:g}, burst {settings.api_burst})"
    ]


def staged_problems(chain: Chain) -> list[str]:
    """What the scenario stages that did not happen, so that it tests nothing: a controller
    restart that never came, a PodDisruptionBudget relaxed later that never refused an
    eviction (each refusal is a further eviction request of the same pod)."""
    scenario = chain.scenario
    problems = []
    if scenario.controller_restart is not None and not chain.controller_restarts:
        problems.append(
            f"the controller was never restarted (no rollback reached "
            f"{scenario.controller_restart.after_step.value})"
        )
    writes = chain.audit.by(CONTROLLER_USER)
    for pdb in scenario.pdbs:
        if pdb.relax_at_seconds is None:
            continue
        pods = [
            e.name
            for e in writes
            if e.subresource == "eviction" and e.name.startswith(f"{pdb.app}-")
        ]
        if len(pods) <= len(set(pods)):
            problems.append(f"PodDisruptionBudget {pdb.name} never refused an eviction")
    return problems


def timing_problems(expect: Expectation, steps: Mapping[str, float]) -> list[str]:
    """The first steps (node -> seconds after its fault) later than ``within_seconds`` or
    earlier than ``not_before_seconds``, as problem lines."""
    problems = []
    for node, seconds in sorted(steps.items()):
        if expect.within_seconds is not None and seconds > expect.within_seconds:
            problems.append(
                f"{node}: first step {seconds:.1f} s after its fault (at most "
                f"{expect.within_seconds:g} s expected)"
            )
        if expect.not_before_seconds is not None and seconds < expect.not_before_seconds:
            problems.append(
                f"{node}: first step {seconds:.1f} s after its fault (not before "
                f"{expect.not_before_seconds:g} s expected)"
            )
    return problems


async def run_scenario(scenario: Scenario) -> Outcome:
    """Run one scenario through the local chain for its ``expect.run_seconds``."""
    expect = scenario.expect
    if expect is None:
        raise ScenarioError(f"{scenario.name}: no 'expect' key: nothing to score")
    async with Chain(scenario) as chain:
        chain.start_waves()
        await asyncio.sleep(expect.run_seconds)  # the scenario's length: all of it is watched
        taken = decisions(chain)
        problems = []
        if expect.episodes:
            missed = await wait_for_episodes(chain, expect.episodes)
            if missed:
                missed += await episode_story(chain, expect.episodes)
            problems += missed
        if chain.executor_settings.dry_run:
            problems += dry_run_writes(chain, UNLIMITED_RESOURCES)
            taken = await dry_run_decisions(chain)
        expected = frozenset((n, d) for n, d in expect.decisions.items() if d != "none")
        observed = frozenset(taken.items())
        steps = first_steps(chain, [n for n, _ in expected & observed])
        problems += timing_problems(expect, steps)
        if expect.pause is not None:
            result = await chain.prom.query_async(
                PAUSED.format(seconds=int(expect.run_seconds + 30))
            )
            paused = any(float(r["value"][1]) > 0 for r in result)
            if paused != expect.pause:
                problems.append(
                    "rollbacks were paused" if paused else "rollbacks were never paused"
                )
        problems += staged_problems(chain)
        problems += write_budget_problems(chain)
        for alert in expect.alerts:
            fired = await chain.prom.query_async(
                FIRED.format(alert=alert, seconds=int(expect.run_seconds + 30))
            )
            if not fired:
                problems.append(f"{alert} never fired")
    return Outcome(scenario.name, expected, observed, steps, tuple(problems))


def _range(values: Sequence[float]) -> str:
    if not values:
        return "-"
    low, high = min(values), max(values)
    return f"{low:.1f} s" if high - low < 0.05 else f"{low:.1f}-{high:.1f} s"


def report(outcome: Outcome) -> str:
    wrong = sorted(outcome.observed - outcome.expected)
    missed = sorted(outcome.expected - outcome.observed)
    line = (
        f"{outcome.name}: precision {outcome.precision:.2f} recall {outcome.recall:.2f} "
        f"({len(outcome.right)} of {len(outcome.expected)} expected actions, "
        f"{len(wrong)} unexpected); fault to first step {_range(list(outcome.first_step.values()))}"
    )
    details = [f"unexpected {d} of {n}" for n, d in wrong]
    details += [f"missed {d} of {n}" for n, d in missed]
    details += list(outcome.problems)
    return line + "".join(f"\n  {d}" for d in details)


def total(outcomes: Sequence[Outcome]) -> str:
    expected = sum(len(o.expected) for o in outcomes)
    observed = sum(len(o.observed) for o in outcomes)
    right = sum(len(o.right) for o in outcomes)
    precision = right / observed if observed else 1.0
    recall = right / expected if expected else 1.0
    steps = [s for o in outcomes for s in o.first_step.values()]
    passed = sum(o.passed for o in outcomes)
    return (
        f"total: {passed} of {len(outcomes)} scenarios as expected; precision {precision:.2f} "
        f"recall {recall:.2f} ({right} of {expected} expected actions, {observed - right} "
        f"unexpected); fault to first step {_range(steps)}"
    )


def library(directory: Path, only: Sequence[str]) -> list[Scenario]:
    """The scenarios of ``directory`` that have an ``expect`` key, by name; ``only`` names
    some of them (an unknown name is an error)."""
    found = [load(path) for path in sorted(directory.glob("*.json"))]
    scored = {s.name: s for s in found if s.expect is not None}
    unknown = [name for name in only if name not in scored]
    if unknown:
        raise ScenarioError(
            f"--only: no scenario named {unknown[0]!r} in {directory} "
            f"(known: {', '.join(sorted(scored))})"
        )
    return [scored[name] for name in only] if only else list(scored.values())


async def run(args: argparse.Namespace, out: TextIO) -> int:
    only = [name.strip() for name in args.only.split(",") if name.strip()]
    try:
        scenarios = library(Path(args.scenarios_dir), only)
    except ScenarioError as exc:
        log.error("cannot run the scenario library: %s", exc)
        return 2
    if not scenarios:
        log.error("no scenario with an 'expect' key in %s", args.scenarios_dir)
        return 2
    outcomes = []
    for scenario in scenarios:
        outcome = await run_scenario(scenario)
        outcomes.append(outcome)
        print(report(outcome), file=out, flush=True)
    print(total(outcomes), file=out, flush=True)
    return 0 if all(o.passed for o in outcomes) else 1
