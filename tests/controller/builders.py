"""Small constructors for Nodes and Leases as the API boundary hands them over (defaults fill what
a test does not care about)."""

from __future__ import annotations

from collections.abc import Mapping

from exporter.model.kube import LEASE_NAMESPACE, LeaseInfo, NodeCondition, NodeInfo, Taint

# 2026-11-30T01:02:03Z
T0 = 1_796_000_523.0


def node(
    name: str,
    created_at: float = T0,
    *,
    uid: str | None = None,
    labels: Mapping[str, str] | None = None,
    unschedulable: bool = False,
    taints: tuple[Taint, ...] = (),
    conditions: tuple[NodeCondition, ...] = (),
) -> NodeInfo:
    return NodeInfo(
        name=name,
        uid=uid if uid is not None else f"uid-{name}",
        created_at=created_at,
        labels=dict(labels or {}),
        unschedulable=unschedulable,
        taints=taints,
        conditions=conditions,
    )


def lease(
    name: str, renew_time: float | None = T0, *, namespace: str = LEASE_NAMESPACE
) -> LeaseInfo:
    return LeaseInfo(name=name, namespace=namespace, renew_time=renew_time, holder=name)
