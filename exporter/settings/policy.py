"""The flags of the rollback policy, declared once (exporter.settings.declare): the guards'
(:class:`GuardSettings`) and the drain's (:class:`DrainSettings`). A settings class that holds
them declares its field as ``group(GuardSettings, builds=GuardPolicy)``: its value is the
model's :class:`~exporter.model.guards.GuardPolicy`, which knows no flags."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.model.cohorts import CohortPolicy
from exporter.model.drain import DrainPolicy
from exporter.model.guards.policy import GuardPolicy
from exporter.settings.cohorts import CohortSettings
from exporter.settings.declare import group, model_of, setting
from exporter.settings.values import (
    BOOLEAN,
    COUNT,
    FRACTION,
    POSITIVE_COUNT,
    POSITIVE_DURATION,
)


@dataclass(frozen=True, slots=True)
class DrainSettings:
    """The flags of :class:`~exporter.model.drain.DrainPolicy`."""

    force: bool = setting(
        "--drain.force",
        "true",
        "a drain also evicts pods no controller owns (bare pods: nothing recreates them), as "
        "kubectl drain --force",
        BOOLEAN,
        doc="a drain also evicts pods no controller owns (bare pods, which nothing recreates), "
        "as `kubectl drain --force`. On by default, unlike kubectl: the node drained is failing, "
        "and Kubernetes' own taint-based eviction would remove them from it after 300 s anyway "
        "(see [hook.md](hook.md#the-steps)); `--no-drain.force` leaves them on the node",
    )
    delete_emptydir_data: bool = setting(
        "--drain.delete-emptydir-data",
        "true",
        "a drain also evicts pods with emptyDir volumes (their data is lost), as kubectl drain "
        "--delete-emptydir-data",
        BOOLEAN,
        doc="a drain also evicts pods with `emptyDir` volumes, whose data is lost, as `kubectl "
        "drain --delete-emptydir-data`. On by default, unlike kubectl: the data is scratch "
        "space on a failing node, lost with it; `--no-drain.delete-emptydir-data` leaves such "
        "pods on the node",
    )


@dataclass(frozen=True, slots=True)
class GuardSettings:
    """The flags of :class:`~exporter.model.guards.GuardPolicy` (shared by the controller and
    ``plan``)."""

    delete_nodes: bool = setting(
        "--rollback.delete-nodes",
        "false",
        "end a node rollback by deleting the Node",
        BOOLEAN,
        aliases=("--delete-nodes",),
    )
    scaleout_window: float = setting(
        "--guard.scaleout-window",
        "30m",
        "only nodes created at most this long before their trouble began are rolled back",
        POSITIVE_DURATION,
        aliases=("--scaleout-window",),
    )
    max_rollbacks: int = setting(
        "--guard.max-rollbacks",
        "10",
        "at most this many nodes rolled back within --guard.max-rollbacks-window, all waves "
        "together",
        COUNT,
        aliases=("--max-rollbacks",),
    )
    max_rollbacks_window: float = setting(
        "--guard.max-rollbacks-window",
        "1h",
        "the sliding window --guard.max-rollbacks counts in",
        POSITIVE_DURATION,
        aliases=("--max-rollbacks-window",),
    )
    max_rollback_fraction: float = setting(
        "--guard.max-rollback-fraction",
        "0.1",
        "at most this fraction of a scale-out wave is rolled back (at least one node)",
        FRACTION,
        aliases=("--max-rollback-fraction",),
    )
    correlated_failure_fraction: float = setting(
        "--guard.correlated-failure-fraction",
        "0.3",
        "pause every action while at least this fraction of the established nodes fail",
        FRACTION,
        aliases=("--correlated-failure-fraction",),
    )
    correlated_failure_min_nodes: int = setting(
        "--guard.correlated-failure-min-nodes",
        "2",
        "... and at least this many established nodes fail",
        POSITIVE_COUNT,
        aliases=("--correlated-failure-min-nodes",),
    )
    node_monitor_grace_period: float = setting(
        "--guard.node-monitor-grace-period",
        "50s",
        "a Lease older than this is stale (kube-controller-manager's flag of that name)",
        POSITIVE_DURATION,
        aliases=("--node-monitor-grace-period",),
    )
    max_concurrent_rollbacks: int = setting(
        "--guard.max-concurrent-rollbacks",
        "3",
        "node rollbacks draining, cleaning up or deleting at once; further ones wait, "
        "cordoned and tainted",
        POSITIVE_COUNT,
        aliases=("--max-concurrent-rollbacks",),
    )
    drain: DrainPolicy = group(DrainSettings, builds=DrainPolicy)  # which pods a drain evicts
    cohorts: CohortPolicy = group(CohortSettings, builds=CohortPolicy)  # the cohort breaker


def default_policy() -> GuardPolicy:
    """The policy without flags or environment."""
    return model_of(GuardSettings(), GuardPolicy)
