"""Scale-out waves: nodes created close together, and the frozen size of each wave.

A wave is the group of nodes one scale-out created. The rollback's blast radius is a fraction of
a wave, so the wave's size is its denominator and must not move once the scale-out is over.

Membership (by the API server's creation timestamps):

- Nodes carrying the wave label (``--wave-label``, non-empty value) belong to the wave named by
  that value. Label values cannot contain ``:``, so they never clash with time-named waves.
- Other nodes are sorted by creation time (then name); a node joins the wave of the node created
  just before it if it was created at most ``gap_seconds`` after it, else it opens a new wave.
  A node observed late whose creation time lies within ``gap_seconds`` of a known wave's span
  (before its first node, between its nodes or after its last) joins that wave; when it is within
  reach of two waves it joins the earlier one. Waves are never merged or split.
- A node keeps its wave for as long as the tracker knows the wave: adding or changing the wave
  label later does not move it.

Identity: a time-named wave's id is the creation time of the node that opened it, in UTC
(``2026-11-30T01:02:03Z``); a label-named wave's id is the label value. The id and the start
time (the creation time of the first node seen) never change, even when a node created earlier
is observed later.

Open, closed, frozen (in the tracker's time, ``now``, passed in by the caller):

- A wave is open until no node joined it for ``gap_seconds``: a node *joins* when the tracker
  first sees it. While open, the size counts every node that ever joined, whether it still exists
  or not.
- When the wave closes its size is frozen. Deleting nodes of the wave (a rollback does exactly
  that) never shrinks it, so the fraction of a wave a rollback may touch cannot grow as the
  rollback proceeds. A node first seen after the close (a watch that lagged by more than
  ``gap_seconds``, or a label value reused by a later scale-out) still gets the wave's id but does
  not change the size: the frozen denominator can only err on the small side, which makes a
  fraction-based cap stricter, never looser.
- A closed wave none of whose nodes still exists is forgotten (nothing is left to roll back).

The state lives in a ``WaveTracker`` instance, in memory: after a restart the sizes are counted
again from the nodes that still exist, so a wave that lost nodes before the restart comes back
smaller. Whatever needs the denominator across restarts (the rollback journal) must record it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from exporter.model.kube import NodeInfo
from exporter.model.rfc3339 import format_time

DEFAULT_GAP_SECONDS = 120.0


@dataclass(frozen=True, slots=True)
class Wave:
    id: str
    started_at: float  # creation time of the first node the tracker saw in the wave
    size: int  # nodes that joined while the wave was open; frozen once it closed
    closed: bool
    live_nodes: int  # nodes of the wave that exist now
    labelled: bool  # named by the wave label rather than by time


@dataclass(frozen=True, slots=True)
class WaveSnapshot:
    waves: tuple[Wave, ...]  # sorted by start time, then id
    node_wave: Mapping[str, str]  # node name -> wave id, for every node passed in

    def wave(self, wave_id: str) -> Wave | None:
        return next((w for w in self.waves if w.id == wave_id), None)


def time_wave_id(created_at: float) -> str:
    """The id of a wave opened by a node created at ``created_at`` (Unix seconds)."""
    return format_time(math.floor(created_at))


def node_key(node: NodeInfo) -> str:
    """Nodes are told apart by uid, so a node re-created under the same name is a new node."""
    return node.uid or f"name:{node.name}"


@dataclass(slots=True)
class _WaveState:
    id: str
    started_at: float
    labelled: bool
    first_created: float
    last_created: float
    last_join: float
    size: int = 0
    closed: bool = False
    members: set[str] = field(default_factory=set)


class WaveTracker:
    """Remembers which wave each node joined and freezes wave sizes; the caller passes the time.

    ``observe`` may be given any subset of the nodes (e.g. the one an informer just added);
    ``snapshot`` must be given every node that exists now.
    """

    def __init__(self) -> None:
        self._waves: dict[str, _WaveState] = {}
        self._node_wave: dict[str, str] = {}  # node key -> wave id, for every member ever seen

    def observe(
        self,
        nodes: Iterable[NodeInfo],
        *,
        now: float,
        gap_seconds: float = DEFAULT_GAP_SECONDS,
        wave_label: str | None = None,
    ) -> None:
        """Assign the nodes the tracker has not seen yet to waves, and close waves that are due."""
        if gap_seconds < 0:
            raise ValueError("gap_seconds must not be negative")
        self._close_due(now, gap_seconds)
        new = sorted(
            (n for n in nodes if node_key(n) not in self._node_wave),
            key=lambda n: (n.created_at, n.name),
        )
        for node in new:
            label_value = node.labels.get(wave_label, "") if wave_label else ""
            if label_value:
                wave = self._waves.get(label_value)
                if wave is None:
                    wave = self._open(label_value, node.created_at, now, labelled=True)
            else:
                wave = self._time_wave_for(node.created_at, gap_seconds)
                if wave is None:
                    wave = self._open(
                        self._free_id(time_wave_id(node.created_at)),
                        node.created_at,
                        now,
                        labelled=False,
                    )
            self._join(wave, node, now)

    def snapshot(
        self,
        nodes: Iterable[NodeInfo],
        *,
        now: float,
        gap_seconds: float = DEFAULT_GAP_SECONDS,
        wave_label: str | None = None,
    ) -> WaveSnapshot:
        """Observe ``nodes`` (all that exist now), forget finished waves, and report."""
        current = list(nodes)
        self.observe(current, now=now, gap_seconds=gap_seconds, wave_label=wave_label)
        live: dict[str, int] = {}
        node_wave: dict[str, str] = {}
        for node in current:
            wave_id = self._node_wave[node_key(node)]
            node_wave[node.name] = wave_id
            live[wave_id] = live.get(wave_id, 0) + 1
        for wave_id in [w.id for w in self._waves.values() if w.closed and w.id not in live]:
            self._forget(wave_id)
        waves = tuple(
            Wave(
                id=w.id,
                started_at=w.started_at,
                size=w.size,
                closed=w.closed,
                live_nodes=live.get(w.id, 0),
                labelled=w.labelled,
            )
            for w in sorted(self._waves.values(), key=lambda w: (w.started_at, w.id))
        )
        return WaveSnapshot(waves=waves, node_wave=node_wave)

    # ------------------------------------------------------------------ internals

    def _close_due(self, now: float, gap_seconds: float) -> None:
        for wave in self._waves.values():
            if not wave.closed and now - wave.last_join >= gap_seconds:
                wave.closed = True

    def _time_wave_for(self, created_at: float, gap_seconds: float) -> _WaveState | None:
        reachable = [
            w
            for w in self._waves.values()
            if not w.labelled
            and w.first_created - gap_seconds <= created_at <= w.last_created + gap_seconds
        ]
        return min(reachable, key=lambda w: (w.first_created, w.id), default=None)

    def _free_id(self, wave_id: str) -> str:
        candidate, n = wave_id, 1
        while candidate in self._waves:
            n += 1
            candidate = f"{wave_id}-{n}"
        return candidate

    def _open(self, wave_id: str, created_at: float, now: float, *, labelled: bool) -> _WaveState:
        wave = _WaveState(
            id=wave_id,
            started_at=created_at,
            labelled=labelled,
            first_created=created_at,
            last_created=created_at,
            last_join=now,
        )
        self._waves[wave_id] = wave
        return wave

    def _join(self, wave: _WaveState, node: NodeInfo, now: float) -> None:
        key = node_key(node)
        self._node_wave[key] = wave.id
        wave.members.add(key)
        wave.first_created = min(wave.first_created, node.created_at)
        wave.last_created = max(wave.last_created, node.created_at)
        if not wave.closed:
            wave.size += 1
            wave.last_join = now

    def _forget(self, wave_id: str) -> None:
        wave = self._waves.pop(wave_id)
        for key in wave.members:
            self._node_wave.pop(key, None)
