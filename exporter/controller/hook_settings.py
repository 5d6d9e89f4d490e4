"""Typed settings of the rollback hook's executor, and their flags (each with an environment
default, like every nodesync flag)."""

from __future__ import annotations

import argparse
import os
import socket
from dataclasses import asdict, dataclass
from typing import Any

from exporter.model.guards import GuardPolicy
from exporter.settings import FlagAdder, positive_duration

_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off", ""})


def boolean(text: str) -> bool:
    """``true``/``false`` (also 1/0, yes/no, on/off; case does not matter)."""
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean {text!r}: use true or false")


def fraction(text: str) -> float:
    """A number from 0 to 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid fraction {text!r}: use e.g. 0.1") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"invalid fraction {text!r}: must be from 0 to 1")
    return value


def count(text: str) -> int:
    """A whole number, zero or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}: use e.g. 10") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}: must not be negative")
    return value


def positive_count(text: str) -> int:
    value = count(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}: must be at least 1")
    return value


def positive_number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}: use e.g. 5") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"invalid number {text!r}: must be positive")
    return value


def default_identity() -> str:
    """The hostname (the pod's name in a Deployment) and the process id."""
    return f"{socket.gethostname()}_{os.getpid()}"


@dataclass(frozen=True, slots=True)
class HookSettings:
    dry_run: bool = False
    delete_nodes: bool = False
    scaleout_window: float = 1800.0
    max_rollbacks: int = 10
    max_rollbacks_window: float = 3600.0
    max_rollback_fraction: float = 0.1
    correlated_failure_fraction: float = 0.3
    correlated_failure_min_nodes: int = 2
    node_monitor_grace_period: float = 50.0
    max_concurrent_rollbacks: int = 3
    api_qps: float = 5.0
    api_burst: int = 10
    eviction_timeout: float = 120.0
    cleanup_timeout: float = 300.0
    leader_elect: bool = False
    leader_elect_namespace: str = "nodesync"
    leader_elect_name: str = "nodesync-controller"
    identity: str = ""  # empty: hostname and process id

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> HookSettings:
        return cls(
            dry_run=args.dry_run,
            delete_nodes=args.delete_nodes,
            scaleout_window=args.scaleout_window,
            max_rollbacks=args.max_rollbacks,
            max_rollbacks_window=args.max_rollbacks_window,
            max_rollback_fraction=args.max_rollback_fraction,
            correlated_failure_fraction=args.correlated_failure_fraction,
            correlated_failure_min_nodes=args.correlated_failure_min_nodes,
            node_monitor_grace_period=args.node_monitor_grace_period,
            max_concurrent_rollbacks=args.max_concurrent_rollbacks,
            api_qps=args.api_qps,
            api_burst=args.api_burst,
            eviction_timeout=args.eviction_timeout,
            cleanup_timeout=args.cleanup_timeout,
            leader_elect=args.leader_elect,
            leader_elect_namespace=args.leader_elect_namespace,
            leader_elect_name=args.leader_elect_name,
            identity=args.leader_elect_identity,
        )

    @property
    def policy(self) -> GuardPolicy:
        return GuardPolicy(
            scaleout_window=self.scaleout_window,
            max_rollbacks=self.max_rollbacks,
            max_rollbacks_window=self.max_rollbacks_window,
            max_rollback_fraction=self.max_rollback_fraction,
            correlated_failure_fraction=self.correlated_failure_fraction,
            correlated_failure_min_nodes=self.correlated_failure_min_nodes,
            node_monitor_grace_period=self.node_monitor_grace_period,
            max_concurrent_rollbacks=self.max_concurrent_rollbacks,
        )

    @property
    def leader_identity(self) -> str:
        return self.identity or default_identity()

    def as_log_fields(self) -> dict[str, Any]:
        return asdict(self)


def add_guard_flags(add: FlagAdder) -> None:
    """The flags that decide what a plan may do (shared by ``controller`` and ``plan``)."""
    add.add(
        "--delete-nodes",
        default="false",
        type=boolean,
        help="end a node rollback by deleting the Node (true or false)",
    )
    add.add(
        "--scaleout-window",
        default="30m",
        type=positive_duration,
        help="only nodes created at most this long before their trouble began are rolled back",
    )
    add.add(
        "--max-rollbacks",
        default="10",
        type=count,
        help="at most this many nodes rolled back within --max-rollbacks-window, all waves "
        "together",
    )
    add.add(
        "--max-rollbacks-window",
        default="1h",
        type=positive_duration,
        help="the sliding window --max-rollbacks counts in",
    )
    add.add(
        "--max-rollback-fraction",
        default="0.1",
        type=fraction,
        help="at most this fraction of a scale-out wave is rolled back (at least one node)",
    )
    add.add(
        "--correlated-failure-fraction",
        default="0.3",
        type=fraction,
        help="pause every action while at least this fraction of the established nodes fail",
    )
    add.add(
        "--correlated-failure-min-nodes",
        default="2",
        type=positive_count,
        help="... and at least this many established nodes fail",
    )
    add.add(
        "--node-monitor-grace-period",
        default="50s",
        type=positive_duration,
        help="a Lease older than this is stale (kube-controller-manager's flag of that name)",
    )


def add_hook_flags(add: FlagAdder) -> None:
    """Every flag of the executor, for ``nodesync controller``."""
    add.add(
        "--dry-run",
        default="false",
        type=boolean,
        help="plan and record every alert, write nothing to the API server (true or false)",
    )
    add_guard_flags(add)
    add.add(
        "--max-concurrent-rollbacks",
        default="3",
        type=positive_count,
        help="node rollbacks running at once; further ones wait",
    )
    add.add(
        "--api-qps",
        default="5",
        type=positive_number,
        help="API writes per second on average (token bucket refill)",
    )
    add.add(
        "--api-burst",
        default="10",
        type=positive_count,
        help="API writes at once (token bucket size)",
    )
    add.add(
        "--eviction-timeout",
        default="2m",
        type=positive_duration,
        help="how long an eviction a PodDisruptionBudget refuses is retried before the step fails",
    )
    add.add(
        "--cleanup-timeout",
        default="5m",
        type=positive_duration,
        help="how long to wait for the node's agent to report its runtime cleanup",
    )
    add.add(
        "--leader-elect",
        default="false",
        type=boolean,
        help="execute plans only while holding the leader Lease (true or false)",
    )
    add.add(
        "--leader-elect-namespace",
        default="nodesync",
        help="namespace of the leader Lease",
    )
    add.add(
        "--leader-elect-name",
        default="nodesync-controller",
        help="name of the leader Lease",
    )
    add.add(
        "--leader-elect-identity",
        default="",
        help="this controller's identity in the leader Lease (set it to the pod's name); "
        "empty: hostname and process id",
    )
