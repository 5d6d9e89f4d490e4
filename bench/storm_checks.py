"""The storm's checks: what the controller did to each node, against what it should have done.

Each failing node must have one NodeRollback, succeeded, every step (cordon, taint, drain,
cleanup, verify) done at its first attempt in its status, one Event per step, one cordon, one
taint and one cleanup request as the watch saw them, its ReplicaSet pods evicted and its
DaemonSet pod kept.
No healthy node may be written to (its resourceVersion unchanged since it was created), nor
get a NodeRollback, a step Event or an eviction. The server's write counts must equal the
expected ones, with no Event create refused as a duplicate, and stay inside the token bucket.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench.harness.apiserver import JSONObject
from bench.harness.exposition import total
from bench.harness.rates import write_rates
from bench.harness.stats import percentile
from bench.storm_cluster import NodeRecord
from exporter.model.rollback import Action, Phase

if TYPE_CHECKING:
    from bench.storm import Storm

ROLLBACK_STEPS = ("cordon", "taint", "drain", "cleanup_runtime", "verify")
STEP_EVENTS = (
    "NodesyncCordon",
    "NodesyncTaint",
    "NodesyncDrain",
    "NodesyncCleanupRuntime",
    "NodesyncVerify",
)


def ok_latencies(
    rows: Sequence[JSONObject], start: float | None = None, end: float | None = None
) -> list[float]:
    """The latencies of the 200 answers among Alertmanager's rows (sent within start..end)."""
    return [
        r["latency"]
        for r in rows
        if r["status"] == 200
        and (start is None or r["at"] >= start)
        and (end is None or r["at"] <= end)
    ]


def owner_kind(pod: JSONObject) -> str:
    refs = pod["metadata"].get("ownerReferences") or [{}]
    return str(refs[0].get("kind", ""))


@dataclass(frozen=True)
class Checks:
    """The checks' findings (lists cut to their first 10 in the report), and the targets."""

    events_by_node: dict[str, Counter[str]]
    plans_by_node: Counter[str]
    not_once: list[str]
    healthy_modified: list[str]
    healthy_step_events: list[str]
    healthy_plans: list[str]
    healthy_pods_evicted: int
    expected: dict[str, int]
    taken: dict[str, int]
    duplicates: int
    missed: int
    rates: dict[str, Any]
    p99_ms: float
    targets: dict[str, bool]

    def reasons_on(self, nodes: set[str], skip: tuple[str, ...] = ()) -> dict[str, int]:
        """Event reasons on these nodes, how many of each (``skip`` left out)."""
        out: Counter[str] = Counter()
        for node, reasons in self.events_by_node.items():
            if node in nodes:
                out.update({r: c for r, c in reasons.items() if r not in skip})
        return dict(out)


def count(storm: Storm, verb: str, resource: str, code: int | None = None) -> int:
    """Requests the API server counted for this verb and resource (and status code)."""
    return sum(
        n
        for (v, r, c), n in storm.counts.items()
        if v == verb and r == resource and (code is None or c == code)
    )


def healthy_nodes(storm: Storm) -> set[str]:
    failing = set(storm.failing)
    return {n for n in storm.names if n not in failing} | set(storm.old_names)


def _events_by_node(storm: Storm) -> dict[str, Counter[str]]:
    by_node: dict[str, Counter[str]] = defaultdict(Counter)
    for event in storm.events:
        involved = event.get("involvedObject") or {}
        if involved.get("kind") == "Node":
            by_node[involved.get("name", "")][event.get("reason", "")] += 1
    return by_node


def _failing_node_facts(
    storm: Storm, name: str, reasons: Counter[str], plans: int, steps: set[tuple[str, str, int]]
) -> tuple[bool, dict[str, Any]]:
    """Whether one failing node was rolled back exactly once, and the facts that say so."""
    record = storm.watch.records.get(name, NodeRecord())
    pods = [p for p in storm.pods_now if p["spec"].get("nodeName") == name]
    ds = [p for p in pods if owner_kind(p) == "DaemonSet"]
    rs_left = [
        p
        for p in pods
        if owner_kind(p) == "ReplicaSet" and not p["metadata"].get("deletionTimestamp")
    ]
    facts = {
        "plans": plans,
        "plan_state": storm.final_plans.get(name, "none"),
        "cordons": record.cordons,
        "uncordons": record.uncordons,
        "taints_added": record.taints_added,
        "taints_removed": record.taints_removed,
        "cleanup_requests": len(record.requests),
        "step_events": [reasons.get(r, 0) for r in STEP_EVENTS],
        "steps": sorted(steps),
        "replicaset_pods_left": len(rs_left),
        "daemonset_pods_kept": sum(1 for p in ds if not p["metadata"].get("deletionTimestamp")),
        "cordoned_now": (storm.nodes_now.get(name, {}).get("spec") or {}).get("unschedulable"),
    }
    exactly_once = (
        facts["plans"] == 1
        and facts["plan_state"] == Phase.SUCCEEDED.value
        and (record.cordons, record.uncordons, record.taints_added) == (1, 0, 1)
        and (record.taints_removed, len(record.requests)) == (0, 1)
        and facts["step_events"] == [1] * len(STEP_EVENTS)
        and facts["steps"] == sorted((k, "done", 1) for k in ROLLBACK_STEPS)
        and facts["replicaset_pods_left"] == 0
        and facts["daemonset_pods_kept"] == 1
        and facts["cordoned_now"] is True
    )
    return exactly_once, facts


def _not_exactly_once(
    storm: Storm, events_by_node: dict[str, Counter[str]], plans_by_node: Counter[str]
) -> list[str]:
    """The failing nodes not rolled back exactly once, each with its facts."""
    steps_by_node: dict[str, set[tuple[str, str, int]]] = defaultdict(set)
    for rollback in storm.rollbacks:
        for s in rollback.status.steps:
            steps_by_node[rollback.spec.node].add((s.kind.value, s.state.value, s.attempts))
    not_once: list[str] = []
    for name in storm.failing:
        once, facts = _failing_node_facts(
            storm,
            name,
            events_by_node.get(name, Counter()),
            plans_by_node.get(name, 0),
            steps_by_node.get(name, set()),
        )
        if not once:
            not_once.append(f"{name}: {facts}")
    return not_once


def _actions(
    storm: Storm, events_by_node: dict[str, Counter[str]]
) -> tuple[dict[str, int], dict[str, int]]:
    """(expected, taken): each kind of action, from the controller's metrics and the server's
    counts."""

    def done(action: str) -> int:
        return int(total(storm.families, "nodesync_actions_total", action=action, result="done"))

    failing = set(storm.failing)
    n = len(storm.failing)
    expected = {
        "cordon": n,
        "taint": n,
        "drain": n,
        "evictions": 2 * n,
        "cleanup_runtime": n,
        "verify": n,
        "node_patches": 3 * n,
        "step_events": len(STEP_EVENTS) * n,
    }
    taken = {
        "cordon": done("cordon"),
        "taint": done("taint"),
        "drain": done("drain"),
        "evictions": count(storm, "create", "pods/eviction", 201),
        "cleanup_runtime": done("cleanup_runtime"),
        "verify": done("verify"),
        "node_patches": count(storm, "patch", "nodes"),
        "step_events": sum(
            c
            for node, reasons in events_by_node.items()
            if node in failing
            for r, c in reasons.items()
            if r in STEP_EVENTS
        ),
    }
    return expected, taken


def check(storm: Storm) -> Checks:
    """Every check of one run, and whether each target was met."""
    cfg = storm.cfg
    failing = set(storm.failing)
    healthy = healthy_nodes(storm)
    events_by_node = _events_by_node(storm)
    rollback_plans = [r for r in storm.rollbacks if r.spec.action is Action.ROLLBACK_NODE]
    plans_by_node = Counter(r.spec.node for r in rollback_plans)
    not_once = _not_exactly_once(storm, events_by_node, plans_by_node)
    healthy_modified = sorted(
        n
        for n in healthy
        if storm.watch.records.get(n, NodeRecord()).modifications > 0
        or storm.nodes_now.get(n, {}).get("metadata", {}).get("resourceVersion")
        != storm.created_rv.get(n)
    )
    healthy_step_events = sorted(
        n for n in healthy if any(r in STEP_EVENTS for r in events_by_node.get(n, {}))
    )
    healthy_plans = sorted({r.spec.node for r in rollback_plans if r.spec.node not in failing})
    healthy_pods_evicted = sum(
        1
        for p in storm.pods_now
        if p["spec"].get("nodeName") not in failing and p["metadata"].get("deletionTimestamp")
    )
    expected, taken = _actions(storm, events_by_node)
    duplicates = (
        sum(max(0, taken[k] - expected[k]) for k in expected)
        + count(storm, "create", "events", 409)
        + count(storm, "create", "pods/eviction", 429)
        + sum(k - 1 for k in plans_by_node.values() if k > 1)
    )
    missed = sum(max(0, expected[k] - taken[k]) for k in expected)
    missed += len(storm.failing) - len(storm.final_plans)
    rates = write_rates(storm.counter_samples, cfg.api_qps, cfg.api_burst)
    paced = ok_latencies(storm.am["paced"]["controller"])
    p99 = percentile(paced, 0.99) * 1000 if paced else float("inf")
    targets = {
        "no_duplicate_actions": duplicates == 0 and not not_once,
        "no_missed_actions": missed == 0,
        "no_healthy_node_touched": not healthy_modified
        and not healthy_step_events
        and not healthy_plans
        and healthy_pods_evicted == 0,
        "api_writes_within_limit": rates.get("token_bucket_bound_violations", 0) == 0
        and (rates.get("average_per_second") or 0.0) <= cfg.api_qps,
        "webhook_p99_under_50ms": p99 < cfg.p99_target_ms,
        "under_10_minutes": storm.wall_time < cfg.wall_target_s,
    }
    return Checks(
        events_by_node=events_by_node,
        plans_by_node=plans_by_node,
        not_once=not_once,
        healthy_modified=healthy_modified,
        healthy_step_events=healthy_step_events,
        healthy_plans=healthy_plans,
        healthy_pods_evicted=healthy_pods_evicted,
        expected=expected,
        taken=taken,
        duplicates=duplicates,
        missed=missed,
        rates=rates,
        p99_ms=p99,
        targets=targets,
    )
