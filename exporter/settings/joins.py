"""The flags of how the controller follows a join (:class:`JoinSettings`), declared once
(exporter.settings.declare). A settings class that holds them declares its field as
``group(JoinSettings, builds=JoinPolicy)``: its value is the model's
:class:`~exporter.model.joins.JoinPolicy`, which knows no flags."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.settings.declare import setting
from exporter.settings.values import POSITIVE_DURATION, TAINT_KEYS


@dataclass(frozen=True, slots=True)
class JoinSettings:
    """The flags of :class:`~exporter.model.joins.JoinPolicy`."""

    join_window: float = setting(
        "--join.window",
        "30m",
        "a node is joining for this long after its Node was created: its join stages are "
        "exported and observed meanwhile",
        POSITIVE_DURATION,
    )
    ready_objective: float = setting(
        "--join.ready-objective",
        "5m",
        "the join SLO's objective: a new node is Ready within this long of its creation",
        POSITIVE_DURATION,
    )
    readiness_taints: tuple[str, ...] = setting(
        "--join.readiness-taints",
        "node.cilium.io/agent-not-ready",
        "taint keys that hold a starting node back on purpose until a component removes them "
        "(a CNI's startup taint), beside every key under readiness.k8s.io/; comma-separated",
        TAINT_KEYS,
        doc="taint keys that hold a starting node back on purpose until a component removes "
        "them (a CNI's startup taint; Cilium's is the default), beside every key under "
        "`readiness.k8s.io/` (node-readiness-controller's), which always count; "
        "comma-separated, empty for none",
    )
    readiness_hold_limit: float = setting(
        "--join.readiness-hold-limit",
        "20m",
        "a new node held back by a readiness taint counts as starting, not failed, for this "
        "long after its creation; past it, a failed join if it is not Ready, and its readiness "
        "taints reported as left if it is; at most --join.window",
        POSITIVE_DURATION,
    )
