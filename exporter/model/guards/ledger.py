"""The rollbacks decided so far, as the guards count them: the NodeRollbacks in the cluster,
plus what this pass decided. A controller that takes over after a failover counts what the one
before it decided. It also keeps which nodes (by uid) a rollback deleted or found gone: the
watch of the nodes may show such a node for a moment after the rollback's end was seen, and an
alert about it must not become a rollback of a node that exists no more."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field

from exporter.model.rollback import Action, NodeRollback, Phase, Plan
from exporter.model.rollback_state import touched


@dataclass(frozen=True, slots=True)
class Decided:
    """What the guards need of one rollback decided so far."""

    node: str
    action: Action
    wave: str
    accepted_at: float
    active: bool  # not finished
    counts: bool  # counts against the blast radius (a node rollback that did or may act)
    pod: tuple[str, str] = ("", "")  # (namespace, name) of an evict_pod rollback

    @property
    def node_level(self) -> bool:
        return self.action in (Action.ROLLBACK_NODE, Action.CLEANUP_ORPHANS)


@dataclass(slots=True)
class GuardState:
    """The rollbacks decided so far, by name: the NodeRollbacks in the cluster (:meth:`of`),
    plus what this pass decided (:meth:`accept`)."""

    _decided: dict[str, Decided] = field(default_factory=dict)
    _gone: dict[str, str] = field(default_factory=dict)  # node uid -> the rollback that saw it go

    @classmethod
    def of(cls, rollbacks: Iterable[NodeRollback]) -> GuardState:
        state = cls()
        for r in rollbacks:
            state._saw_go(r)
            node_rollback = r.spec.action is Action.ROLLBACK_NODE
            pod = (r.spec.pod.namespace, r.spec.pod.name) if r.spec.pod is not None else ("", "")
            state._decided[r.name] = Decided(
                node=r.spec.node,
                action=r.spec.action,
                wave=r.spec.wave,
                accepted_at=r.spec.decision.decided_at,
                active=r.active,
                counts=node_rollback
                and (r.status.phase is not Phase.CANCELLED or touched(r.status)),
                pod=pod,
            )
        return state

    def accept(self, key: str, plan: Plan, now: float, *, active: bool = True) -> None:
        """Count a plan decided now (before its NodeRollback is in the cluster's view)."""
        pod = next(((s.namespace, s.pod) for s in plan.steps if s.pod), ("", ""))
        self.accept_decided(key, plan.node, plan.action, plan.wave, now, active=active, pod=pod)

    def accept_decided(
        self,
        key: str,
        node: str,
        action: Action,
        wave: str,
        at: float,
        *,
        active: bool = True,
        pod: tuple[str, str] = ("", ""),
    ) -> None:
        """Count a decision made at ``at`` (e.g. one of a dry run, which made no object)."""
        self._decided[key] = Decided(
            node=node,
            action=action,
            wave=wave,
            accepted_at=at,
            active=active,
            counts=action is Action.ROLLBACK_NODE,
            pod=pod,
        )

    def ended(self, key: str, found: NodeRollback | None = None) -> None:
        """Rollback ``key`` was found ended (a watch had not delivered its end yet): an alert
        about its node no longer joins or escalates it. ``found``: the rollback as found, when
        it still exists (it may have deleted its node)."""
        decided = self._decided.get(key)
        if decided is not None:
            self._decided[key] = dataclasses.replace(decided, active=False)
        if found is not None:
            self._saw_go(found)

    def _saw_go(self, rollback: NodeRollback) -> None:
        if rollback.spec.node_uid and rollback.node_gone:
            self._gone[rollback.spec.node_uid] = rollback.name

    def gone_by(self, node_uid: str) -> str | None:
        """The rollback that deleted the node with this uid or found it gone; None if none did."""
        return self._gone.get(node_uid) if node_uid else None

    def active_on(
        self, node: str, *, node_level: bool, pod: tuple[str, str] = ("", "")
    ) -> tuple[str, Decided] | None:
        """The active rollback an alert about ``node`` would join: a node-level one, or (for
        an eviction) one evicting the same pod."""
        for name, d in sorted(self._decided.items()):
            if not d.active or d.node != node:
                continue
            if d.node_level and (node_level or d.action is Action.ROLLBACK_NODE):
                return name, d
            if not node_level and not d.node_level and d.pod == pod:
                return name, d
        return None

    def active_nodes(self) -> set[str]:
        """The nodes with an active node-level rollback (a node rollback, a cleanup)."""
        return {d.node for d in self._decided.values() if d.active and d.node_level}

    def running(self) -> int:
        """Active node rollbacks."""
        return sum(1 for d in self._decided.values() if d.active and d.counts)

    def nodes_in_window(self, now: float, window: float) -> set[str]:
        return {d.node for d in self._decided.values() if d.counts and now - d.accepted_at < window}

    def window_frees_at(self, now: float, window: float) -> float | None:
        """When the oldest node rollback within the sliding window leaves it (None: none is
        in it)."""
        times = [
            d.accepted_at
            for d in self._decided.values()
            if d.counts and now - d.accepted_at < window
        ]
        return min(times) + window if times else None

    def nodes_in_wave(self, wave: str) -> set[str]:
        return {d.node for d in self._decided.values() if d.counts and d.wave == wave}
