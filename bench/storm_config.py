"""The storm's parameters, from its command line, and the schedule they make: which new nodes
fail, when, and when the first rollback alert reaches the controller."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Config:
    """One storm's parameters (their meaning: the command line's help, :func:`parser`)."""

    nodes: int
    old_nodes: int
    join_seconds: float
    fail_every: int
    fail_after: float
    fail_together_at: float
    alert_for: float
    lease_period: float
    scaleout_window: float
    grace: float
    api_qps: float
    api_burst: int
    max_concurrent: int
    cleanup_timeout: float
    agent_delay: float
    noise_none: int
    noise_resolved: int
    group_wait: float
    group_interval: float
    peer_delay: float
    in_flight: int
    max_alerts: int
    scrape_interval: float
    plans_deadline: float
    p99_target_ms: float = 50.0
    wall_target_s: float = 600.0

    def is_failing(self, index: int) -> bool:
        return index % self.fail_every == self.fail_every - 1

    @property
    def failing(self) -> int:
        return sum(1 for i in range(self.nodes) if self.is_failing(i))

    def fail_time(self, created: float, join_start: float) -> float:
        """When a failing node fails: ``fail_after`` after it joined, and not before
        ``fail_together_at`` into the join (the nodes that joined by then fail together)."""
        at = created + self.fail_after
        if self.fail_together_at > 0:
            at = max(at, join_start + self.fail_together_at)
        return at

    def first_alert_after(self) -> float:
        """Seconds from the join's start to the first rollback alert's first notification."""
        first = self.fail_every - 1
        created = first * self.join_seconds / self.nodes
        return self.fail_time(created, 0.0) + self.alert_for + self.group_wait


def parser(description: str | None) -> argparse.ArgumentParser:
    """The storm's command line; every default is the run docs/performance.md records."""
    parser = argparse.ArgumentParser(description=description)
    add = parser.add_argument
    add("--nodes", type=int, default=1000, help="new nodes joining")
    add("--old-nodes", type=int, default=50, help="established nodes before the storm")
    add("--join-seconds", type=float, default=60.0, help="the new nodes join within this")
    add("--fail-every", type=int, default=20, help="every Nth new node fails (20: 5%%)")
    add("--fail-after", type=float, default=10.0, help="a node fails this long after joining")
    add(
        "--fail-together-at",
        type=float,
        default=40.0,
        help="...but not before this long into the join: those that joined earlier fail "
        "together then (0: each on its own)",
    )
    add("--alert-for", type=float, default=5.0, help="seconds a node fails before its alert")
    add("--lease-period", type=float, default=10.0, help="kubelet's lease renewal period")
    add("--scaleout-window", type=float, default=60.0)
    add("--node-monitor-grace-period", type=float, default=50.0)
    add("--api-qps", type=float, default=20.0)
    add("--api-burst", type=int, default=20)
    add("--max-concurrent-rollbacks", type=int, default=10)
    add("--cleanup-timeout", type=float, default=60.0)
    add("--agent-delay", type=float, default=1.0, help="the agents answer cleanups this late")
    add("--noise-none", type=int, default=120, help="firing alerts with nodesync_action=none")
    add("--noise-resolved", type=int, default=30, help="alerts that arrive already resolved")
    add("--group-wait", type=float, default=0.5, help="Alertmanager's group_wait (30s / 60)")
    add("--group-interval", type=float, default=1.0, help="its group_interval (1m / 60)")
    add("--peer-delay", type=float, default=0.25, help="the second replica's lag (15s / 60)")
    add("--in-flight", type=int, default=8, help="webhook requests in flight per receiver")
    add("--max-alerts", type=int, default=100, help="the receiver's max_alerts")
    add(
        "--scrape-interval",
        type=float,
        default=15.0,
        help="Prometheus scrapes the controller every this many seconds (0: never)",
    )
    add("--plans-deadline", type=float, default=300.0, help="seconds to wait for the plans")
    return parser


def parse_config(argv: Sequence[str] | None, description: str | None = None) -> Config:
    """The Config of a command line (``None``: this process' arguments)."""
    args = parser(description).parse_args(argv)
    return Config(
        nodes=args.nodes,
        old_nodes=args.old_nodes,
        join_seconds=args.join_seconds,
        fail_every=args.fail_every,
        fail_after=args.fail_after,
        fail_together_at=args.fail_together_at,
        alert_for=args.alert_for,
        lease_period=args.lease_period,
        scaleout_window=args.scaleout_window,
        grace=args.node_monitor_grace_period,
        api_qps=args.api_qps,
        api_burst=args.api_burst,
        max_concurrent=args.max_concurrent_rollbacks,
        cleanup_timeout=args.cleanup_timeout,
        agent_delay=args.agent_delay,
        noise_none=args.noise_none,
        noise_resolved=args.noise_resolved,
        group_wait=args.group_wait,
        group_interval=args.group_interval,
        peer_delay=args.peer_delay,
        in_flight=args.in_flight,
        max_alerts=args.max_alerts,
        scrape_interval=args.scrape_interval,
        plans_deadline=args.plans_deadline,
    )
