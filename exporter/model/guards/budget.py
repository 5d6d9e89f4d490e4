"""The blast radius left: per scale-out wave (a fraction of its frozen size, at least one node)
and in absolute terms (nodes within a sliding window), from the rollbacks decided so far."""

from __future__ import annotations

import math
from dataclasses import dataclass

from exporter.model.clusterview import ClusterView
from exporter.model.guards.ledger import GuardState
from exporter.model.guards.policy import EPSILON, GuardPolicy


def wave_limit(size: int, fraction: float) -> int:
    """Nodes of a wave of ``size`` nodes that may be rolled back: the fraction, at least one."""
    return max(1, math.floor(size * fraction + EPSILON))


@dataclass(frozen=True, slots=True)
class WaveBudget:
    wave: str
    size: int
    limit: int
    used: int

    @property
    def remaining(self) -> int:
        return max(0, self.limit - self.used)


@dataclass(frozen=True, slots=True)
class Budget:
    absolute_limit: int
    absolute_used: int
    waves: tuple[WaveBudget, ...]  # waves with a node inside its scale-out window, by start

    @property
    def absolute_remaining(self) -> int:
        return max(0, self.absolute_limit - self.absolute_used)

    @property
    def wave_remaining(self) -> int | None:
        """The smallest budget left among the waves that can still be rolled back (None when
        there is none)."""
        return min((w.remaining for w in self.waves), default=None)


def _wave_size(view: ClusterView, wave_id: str) -> int:
    wave = view.wave(wave_id)
    if wave is not None:
        return wave.size
    return sum(1 for n in view.nodes if n.wave_id == wave_id)


def wave_budget(
    view: ClusterView, state: GuardState, policy: GuardPolicy, wave_id: str
) -> WaveBudget:
    size = _wave_size(view, wave_id)
    return WaveBudget(
        wave=wave_id,
        size=size,
        limit=wave_limit(size, policy.max_rollback_fraction),
        used=len(state.nodes_in_wave(wave_id)),
    )


def budget(view: ClusterView, state: GuardState, policy: GuardPolicy, now: float) -> Budget:
    return Budget(
        absolute_limit=policy.max_rollbacks,
        absolute_used=len(state.nodes_in_window(now, policy.max_rollbacks_window)),
        waves=tuple(
            wave_budget(view, state, policy, w.id)
            for w in view.waves
            if w.newest_created is not None and now - w.newest_created < policy.scaleout_window
        ),
    )
