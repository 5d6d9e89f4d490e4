"""Scale-out waves: nodes created close together, and the frozen size of each wave.

A wave is the group of nodes one scale-out created. The rollback's blast radius is a fraction of
a wave, so the wave's size is its denominator and must not move once the scale-out is over.

Membership (by the API server's creation timestamps):

- Nodes carrying the wave label (``--wave.label``, non-empty value) belong to the wave named by
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
    newest_created: float | None = None  # creation time of its newest node that exists now


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

    Two ways to keep it current, not to be mixed on one tracker:

    - from a watch, node by node: ``observe`` the nodes that appeared (a batch of them at once
      when a list hands over many, so that they are taken in creation order), ``remove`` those
      that were deleted, and read ``waves`` and ``wave_of``; every call costs what changed;
    - from a full list each time: ``snapshot`` with every node that exists now.
    """

    def __init__(self) -> None:
        self._waves: dict[str, _WaveState] = {}
        self._node_wave: dict[str, str] = {}  # node key -> wave id, for every member ever seen
        # wave id -> the key and creation time of each of its nodes that exists now
        self._live: dict[str, dict[str, float]] = {}
        self._newest: dict[str, float | None] = {}  # wave id -> newest live creation (cache)

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
        given = list(nodes)
        new = sorted(
            (n for n in given if node_key(n) not in self._node_wave),
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
        for node in given:
            self._alive(node)

    def remove(self, node: NodeInfo) -> None:
        """The node no longer exists (its wave keeps its size)."""
        key = node_key(node)
        wave_id = self._node_wave.get(key)
        live = self._live.get(wave_id, {}) if wave_id is not None else {}
        created = live.pop(key, None)
        if wave_id is not None and created is not None and created == self._newest.get(wave_id):
            self._newest.pop(wave_id, None)  # look again when asked

    def wave_of(self, node: NodeInfo) -> str | None:
        """The id of the wave the node joined (None for a node not observed)."""
        return self._node_wave.get(node_key(node))

    def waves(self, *, now: float, gap_seconds: float = DEFAULT_GAP_SECONDS) -> tuple[Wave, ...]:
        """Close the waves that are due, forget the closed ones none of whose nodes exists, and
        report the others, by start time (then id)."""
        self._close_due(now, gap_seconds)
        finished = [w.id for w in self._waves.values() if w.closed and not self._live.get(w.id)]
        for wave_id in finished:
            self._forget(wave_id)
        return tuple(
            Wave(
                id=w.id,
                started_at=w.started_at,
                size=w.size,
                closed=w.closed,
                live_nodes=len(self._live.get(w.id, ())),
                labelled=w.labelled,
                newest_created=self._newest_created(w.id),
            )
            for w in sorted(self._waves.values(), key=lambda w: (w.started_at, w.id))
        )

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
        keys = {node_key(n) for n in current}
        for live in self._live.values():
            for gone in [k for k in live if k not in keys]:
                del live[gone]
        self._newest.clear()
        self.observe(current, now=now, gap_seconds=gap_seconds, wave_label=wave_label)
        node_wave = {node.name: self._node_wave[node_key(node)] for node in current}
        return WaveSnapshot(waves=self.waves(now=now, gap_seconds=gap_seconds), node_wave=node_wave)

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
        self._live.pop(wave_id, None)
        self._newest.pop(wave_id, None)
        for key in wave.members:
            self._node_wave.pop(key, None)

    def _alive(self, node: NodeInfo) -> None:
        key = node_key(node)
        wave_id = self._node_wave[key]
        self._live.setdefault(wave_id, {})[key] = node.created_at
        if wave_id in self._newest:
            newest = self._newest[wave_id]
            self._newest[wave_id] = (
                node.created_at if newest is None else max(newest, node.created_at)
            )

    def _newest_created(self, wave_id: str) -> float | None:
        if wave_id not in self._newest:
            live = self._live.get(wave_id)
            self._newest[wave_id] = max(live.values()) if live else None
        return self._newest[wave_id]
