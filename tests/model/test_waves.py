"""Scale-out waves as tables: each case replays observations (tracker time, the nodes that exist)
and checks the waves and assignments of the last one."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from exporter.model.kube import NodeInfo
from exporter.model.waves import Wave, WaveTracker, time_wave_id
from tests.controller.builders import T0, node

GAP = 120.0
ID0 = "2026-11-30T01:02:03Z"  # time_wave_id(T0)


def tid(offset: float) -> str:
    return time_wave_id(T0 + offset)


@dataclass(frozen=True)
class Step:
    now: float
    nodes: tuple[NodeInfo, ...]


def step(now_offset: float, *nodes: NodeInfo) -> Step:
    return Step(T0 + now_offset, nodes)


def n(
    name: str, offset: float, *, uid: str | None = None, labels: dict[str, str] | None = None
) -> NodeInfo:
    return node(name, T0 + offset, uid=uid, labels=labels)


A = n("a", 0)
B = n("b", 60)
C = n("c", 150)
D = n("d", 400)

# expected waves: id -> (size, closed, live_nodes)
Expected = dict[str, tuple[int, bool, int]]


@pytest.mark.parametrize(
    ("steps", "waves", "assignment"),
    [
        pytest.param(
            [step(10, A)],
            {ID0: (1, False, 1)},
            {"a": ID0},
            id="one-node-wave-open",
        ),
        pytest.param(
            [step(10, A), step(130, A)],
            {ID0: (1, True, 1)},
            {"a": ID0},
            id="one-node-wave-closes-after-gap",
        ),
        pytest.param(
            [step(10, A), step(129.9, A)],
            {ID0: (1, False, 1)},
            {"a": ID0},
            id="still-open-just-before-gap",
        ),
        pytest.param(
            [step(200, A, B, C)],
            {ID0: (3, False, 3)},
            {"a": ID0, "b": ID0, "c": ID0},
            id="chain-within-gap-of-previous-node",
        ),
        pytest.param(
            [step(300, A, n("b", 120), n("c", 240.5))],
            {ID0: (2, False, 2), tid(240.5): (1, False, 1)},
            {"a": ID0, "b": ID0, "c": tid(240.5)},
            id="exactly-gap-joins-more-opens-new-wave",
        ),
        pytest.param(
            [step(10, A), step(70, A, B), step(160, A, B, C), step(500, A, B, C, D)],
            {ID0: (3, True, 3), tid(400): (1, False, 1)},
            {"a": ID0, "b": ID0, "c": ID0, "d": tid(400)},
            id="incremental-joins-then-node-created-after-gap-opens-new-wave",
        ),
        pytest.param(
            [step(500, D, C, B, A)],
            {ID0: (3, False, 3), tid(400): (1, False, 1)},
            {"a": ID0, "b": ID0, "c": ID0, "d": tid(400)},
            id="input-order-does-not-matter",
        ),
        pytest.param(
            [step(10, A, B), step(200, A, B), step(210, A, B, n("late", 100))],
            {ID0: (2, True, 3)},
            {"a": ID0, "b": ID0, "late": ID0},
            id="late-node-after-close-joins-without-growing-size",
        ),
        pytest.param(
            [step(70, B), step(80, A, B)],
            {tid(60): (2, False, 2)},
            {"a": tid(60), "b": tid(60)},
            id="late-node-created-before-first-keeps-id",
        ),
        pytest.param(
            [step(10, A), step(300, A, n("x", 200)), step(310, A, n("x", 200), n("bridge", 100))],
            {ID0: (1, True, 2), tid(200): (1, False, 1)},
            {"a": ID0, "x": tid(200), "bridge": ID0},
            id="late-node-within-reach-of-two-waves-joins-earlier",
        ),
        pytest.param(
            [step(10, A, B), step(20, A)],
            {ID0: (2, False, 1)},
            {"a": ID0},
            id="open-wave-counts-deleted-nodes",
        ),
        pytest.param(
            [step(10, A, B, C), step(300, A, B, C), step(310, A)],
            {ID0: (3, True, 1)},
            {"a": ID0},
            id="closed-wave-does-not-shrink-on-delete",
        ),
        pytest.param(
            [step(10, A), step(20)],
            {ID0: (1, False, 0)},
            {},
            id="open-wave-without-nodes-is-kept",
        ),
        pytest.param(
            [step(10, A, D), step(600, D)],
            {tid(400): (1, True, 1)},
            {"d": tid(400)},
            id="closed-wave-without-nodes-is-forgotten",
        ),
        pytest.param(
            [step(10, A), step(20, n("a", 0, uid="uid-a2"))],
            {ID0: (2, False, 1)},
            {"a": ID0},
            id="recreated-node-same-name-is-a-new-member",
        ),
        pytest.param(
            [step(10, A), step(20), step(30, A)],
            {ID0: (1, False, 1)},
            {"a": ID0},
            id="node-seen-again-is-not-counted-twice",
        ),
    ],
)
def test_time_waves(steps: list[Step], waves: Expected, assignment: dict[str, str]) -> None:
    tracker = WaveTracker()
    snap = None
    for s in steps:
        snap = tracker.snapshot(s.nodes, now=s.now, gap_seconds=GAP)
    assert snap is not None
    assert {w.id: (w.size, w.closed, w.live_nodes) for w in snap.waves} == waves
    assert dict(snap.node_wave) == assignment


LABEL = "nodesync.io/wave"


def lab(name: str, offset: float, value: str) -> NodeInfo:
    return n(name, offset, labels={LABEL: value})


@pytest.mark.parametrize(
    ("steps", "label", "waves", "assignment"),
    [
        pytest.param(
            [step(10, lab("a", 0, "blue"), lab("b", 1000, "blue"), lab("c", 5, "green"))],
            LABEL,
            {"blue": (2, False, 2), "green": (1, False, 1)},
            {"a": "blue", "b": "blue", "c": "green"},
            id="label-names-wave-regardless-of-time",
        ),
        pytest.param(
            [step(10, lab("a", 0, "blue"), n("b", 60), n("c", 100))],
            LABEL,
            {"blue": (1, False, 1), tid(60): (2, False, 2)},
            {"a": "blue", "b": tid(60), "c": tid(60)},
            id="labelled-nodes-do-not-chain-time-waves",
        ),
        pytest.param(
            [step(10, lab("a", 0, "blue"), lab("b", 60, ""))],
            LABEL,
            {"blue": (1, False, 1), tid(60): (1, False, 1)},
            {"a": "blue", "b": tid(60)},
            id="empty-label-value-is-no-label",
        ),
        pytest.param(
            [step(10, lab("a", 0, "blue"), lab("b", 60, "blue"))],
            None,
            {ID0: (2, False, 2)},
            {"a": ID0, "b": ID0},
            id="no-wave-label-configured",
        ),
        pytest.param(
            [step(10, A), step(20, lab("a", 0, "blue"))],
            LABEL,
            {ID0: (1, False, 1)},
            {"a": ID0},
            id="label-added-later-does-not-move-node",
        ),
        pytest.param(
            [step(10, lab("a", 0, "blue")), step(200, lab("a", 0, "blue"), lab("b", 190, "blue"))],
            LABEL,
            {"blue": (1, True, 2)},
            {"a": "blue", "b": "blue"},
            id="label-reused-after-close-does-not-grow-size",
        ),
    ],
)
def test_label_waves(
    steps: list[Step], label: str | None, waves: Expected, assignment: dict[str, str]
) -> None:
    tracker = WaveTracker()
    snap = None
    for s in steps:
        snap = tracker.snapshot(s.nodes, now=s.now, gap_seconds=GAP, wave_label=label)
    assert snap is not None
    assert {w.id: (w.size, w.closed, w.live_nodes) for w in snap.waves} == waves
    assert dict(snap.node_wave) == assignment


def test_wave_fields() -> None:
    snap = WaveTracker().snapshot(
        [B, A, lab("l", 30, "blue")], now=T0 + 100, gap_seconds=GAP, wave_label=LABEL
    )
    assert snap.waves == (
        Wave(
            id=ID0,
            started_at=T0,
            size=2,
            closed=False,
            live_nodes=2,
            labelled=False,
            newest_created=T0 + 60,
        ),
        Wave(
            id="blue",
            started_at=T0 + 30,
            size=1,
            closed=False,
            live_nodes=1,
            labelled=True,
            newest_created=T0 + 30,
        ),
    )
    assert snap.wave("blue") == snap.waves[1]
    assert snap.wave("nope") is None


def test_observe_a_subset_times_the_join() -> None:
    """Nodes an informer hands over one by one join at observation time, which keeps the wave
    open; the snapshot with every node then counts them once."""
    tracker = WaveTracker()
    tracker.observe([A], now=T0 + 10, gap_seconds=GAP)
    tracker.observe([B], now=T0 + 100, gap_seconds=GAP)
    snap = tracker.snapshot([A, B], now=T0 + 200, gap_seconds=GAP)
    assert [(w.id, w.size, w.closed) for w in snap.waves] == [(ID0, 2, False)]
    snap = tracker.snapshot([A, B], now=T0 + 220, gap_seconds=GAP)
    assert [(w.id, w.size, w.closed) for w in snap.waves] == [(ID0, 2, True)]


def test_ids_never_collide() -> None:
    """With a gap under a second, two waves can start within the same second."""
    snap = WaveTracker().snapshot([n("a", 0.1), n("b", 0.8)], now=T0 + 1, gap_seconds=0.5)
    assert dict(snap.node_wave) == {"a": ID0, "b": f"{ID0}-2"}


@pytest.mark.parametrize(
    ("created", "expected"),
    [
        pytest.param(T0, ID0, id="whole-second"),
        pytest.param(T0 + 0.999, ID0, id="fraction-floored"),
        pytest.param(0.0, "1970-01-01T00:00:00Z", id="epoch"),
    ],
)
def test_time_wave_id(created: float, expected: str) -> None:
    assert time_wave_id(created) == expected


def test_negative_gap_is_rejected() -> None:
    with pytest.raises(ValueError, match="gap_seconds"):
        WaveTracker().observe([A], now=T0, gap_seconds=-1)


@pytest.mark.parametrize("seed", range(6))
def test_node_by_node_agrees_with_full_snapshots(seed: int) -> None:
    """A tracker kept current from a watch (observe what appears, remove what goes) reports the
    waves, sizes, live counts and newest creation times that one given every node each time
    reports: random joins (in creation order, as each arrives), deletions and passing time."""
    rng = random.Random(seed)
    by_events, by_lists = WaveTracker(), WaveTracker()
    existing: dict[str, NodeInfo] = {}
    now = T0
    for i in range(300):
        now += rng.uniform(0.0, 40.0)
        if existing and rng.random() < 0.3:
            gone = existing.pop(rng.choice(sorted(existing)))
            by_events.remove(gone)
        else:
            labels = {"pool": rng.choice(["blue", "green"])} if rng.random() < 0.2 else None
            new = node(f"n{i}", now - rng.uniform(0.0, 5.0), labels=labels)
            existing[new.name] = new
            by_events.observe([new], now=now, gap_seconds=GAP, wave_label="pool")
        current = list(existing.values())
        expected = by_lists.snapshot(current, now=now, gap_seconds=GAP, wave_label="pool")
        assert by_events.waves(now=now, gap_seconds=GAP) == expected.waves
        assert {n.name: by_events.wave_of(n) for n in current} == dict(expected.node_wave)


def test_newest_creation_follows_deletions() -> None:
    tracker = WaveTracker()
    tracker.observe([A, B], now=T0 + 61, gap_seconds=GAP)
    [wave] = tracker.waves(now=T0 + 62, gap_seconds=GAP)
    assert (wave.live_nodes, wave.newest_created) == (2, T0 + 60)
    tracker.remove(B)
    [wave] = tracker.waves(now=T0 + 63, gap_seconds=GAP)
    assert (wave.size, wave.live_nodes, wave.newest_created) == (2, 1, T0)
    tracker.remove(A)
    [wave] = tracker.waves(now=T0 + 64, gap_seconds=GAP)  # open: kept without nodes
    assert (wave.live_nodes, wave.newest_created) == (0, None)
    assert tracker.waves(now=T0 + 61 + GAP, gap_seconds=GAP) == ()  # closed and empty: gone
