"""What a rollback may do: the guards' policy, a plain value (the flags that set it are declared
in exporter.settings.policy)."""

from __future__ import annotations

from dataclasses import dataclass, field

from exporter.model.cohorts import CohortPolicy
from exporter.model.drain import DrainPolicy

#: Fractions are compared with this tolerance, so that 0.1 of 100 nodes is 10, not 9.
EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class GuardPolicy:
    """What a rollback may do (shared by the controller and ``plan``; the flags that set it are
    declared in exporter.settings.policy)."""

    delete_nodes: bool  # end a node rollback by deleting the Node
    scaleout_window: float  # seconds: only nodes created this long before their trouble
    max_rollbacks: int  # nodes rolled back within max_rollbacks_window, all waves together
    max_rollbacks_window: float  # seconds
    max_rollback_fraction: float  # of a scale-out wave (at least one node)
    correlated_failure_fraction: float  # of the established nodes failing: every plan waits
    correlated_failure_min_nodes: int  # ... and at least this many of them
    node_monitor_grace_period: float  # seconds: a Lease older than this is stale
    max_concurrent_rollbacks: int  # node rollbacks past their cordon and taint at once
    drain: DrainPolicy  # which pods a drain evicts
    cohorts: CohortPolicy = field(default_factory=CohortPolicy)  # the cohort breaker
