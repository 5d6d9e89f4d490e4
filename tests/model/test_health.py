"""The guards' view of a node's health, and the index that keeps the correlated-failure counts
current: it must answer what a look at every node answers, whatever the order of changes and
times (and at the very instants a node's window ends or its Lease goes stale)."""

from __future__ import annotations

import random

import pytest

from exporter.model.health import (
    HealthIndex,
    NodeHealth,
    counts,
    failing_since,
    is_established,
    is_failing,
    node_health,
)
from exporter.model.kube import NodeCondition

NOW = 1_796_000_000.0
WINDOW = 1800.0
GRACE = 50.0


@pytest.mark.parametrize(
    ("conditions", "since"),
    [
        pytest.param((NodeCondition("Ready", "True", last_transition=NOW - 5),), None, id="ready"),
        pytest.param(
            (NodeCondition("Ready", "False", last_transition=NOW - 5),), NOW - 5, id="not-ready"
        ),
        pytest.param((NodeCondition("Ready", "Unknown"),), NOW - 100, id="no-transition"),
        pytest.param((), NOW - 100, id="no-ready-condition"),
    ],
)
def test_ready_since(conditions: tuple[NodeCondition, ...], since: float | None) -> None:
    assert node_health(conditions, NOW - 100, None).ready_since == since


def test_a_stale_lease_fails_the_node_since_its_renewal() -> None:
    fresh = NodeHealth(NOW - 3600, None, NOW - GRACE)
    stale = NodeHealth(NOW - 3600, None, NOW - GRACE - 1)
    assert not is_failing(fresh, NOW, GRACE)
    assert failing_since(fresh, NOW, GRACE) is None
    assert is_failing(stale, NOW, GRACE)
    assert failing_since(stale, NOW, GRACE) == NOW - GRACE - 1
    # the earlier of the Ready transition and the renewal
    both = NodeHealth(NOW - 3600, NOW - 10, NOW - 200)
    assert failing_since(both, NOW, GRACE) == NOW - 200


def test_a_failed_join_never_becomes_established() -> None:
    failed_join = NodeHealth(NOW - 3 * WINDOW, NOW - 3 * WINDOW + 60, None)
    old_then_failed = NodeHealth(NOW - 3 * WINDOW, NOW - 60, None)
    young = NodeHealth(NOW - 60, None, NOW)
    assert not is_established(failed_join, NOW, WINDOW, GRACE)
    assert is_established(old_then_failed, NOW, WINDOW, GRACE)
    assert not is_established(young, NOW, WINDOW, GRACE)
    assert counts([failed_join, old_then_failed, young], NOW, WINDOW, GRACE) == (1, 1)


def _random_health(rng: random.Random, now: float) -> NodeHealth:
    created = now - rng.choice([0.0, WINDOW, 2 * WINDOW]) - rng.uniform(-5.0, 5.0)
    ready_since = rng.choice([None, None, created + rng.uniform(0, 3 * WINDOW)])
    renew = rng.choice([None, now - rng.uniform(-5.0, GRACE + 5.0), now - GRACE])
    return NodeHealth(created, ready_since, renew)


@pytest.mark.parametrize("seed", range(8))
def test_the_index_answers_what_a_look_at_every_node_answers(seed: int) -> None:
    """Random changes, removals and times (mostly forwards, at times backwards, often exactly
    on a deadline): after each step the index's counts equal the full count."""
    rng = random.Random(seed)
    index = HealthIndex(WINDOW, GRACE)
    nodes: dict[str, NodeHealth] = {}
    now = NOW
    for _ in range(400):
        action = rng.random()
        key = f"n{rng.randrange(40)}"
        if action < 0.5:
            nodes[key] = _random_health(rng, now)
            index.set(key, nodes[key])
        elif action < 0.6:
            nodes.pop(key, None)
            index.remove(key)
        elif action < 0.95:
            deadlines = [
                t
                for h in nodes.values()
                for t in (h.created_at + WINDOW, (h.lease_renew_time or now) + GRACE)
            ]
            if deadlines and rng.random() < 0.5:
                now = rng.choice(deadlines) + rng.choice([0.0, 1e-6, -1e-6, 2.5e-7])
            else:
                now += rng.uniform(0.0, 120.0)
        else:
            now -= rng.uniform(0.0, 300.0)
        assert index.counts(now) == counts(nodes.values(), now, WINDOW, GRACE)
        assert len(index) == len(nodes)


def test_the_index_looks_only_at_what_changed_or_is_due() -> None:
    """Asked again and again while nothing changes and no deadline passes, the index judges no
    node again."""
    index = HealthIndex(WINDOW, GRACE)
    for i in range(1000):
        index.set(f"n{i}", NodeHealth(NOW - 2 * WINDOW, None, NOW))
    assert index.counts(NOW) == (1000, 0)
    judged: list[str] = []
    original = index._judge

    def spy(key: str, now: float) -> None:
        judged.append(key)
        original(key, now)

    index._judge = spy  # type: ignore[method-assign]
    for step in range(10):
        assert index.counts(NOW + step) == (1000, 0)
    assert judged == []
    index.set("n7", NodeHealth(NOW - 2 * WINDOW, NOW, NOW))
    assert index.counts(NOW + 11) == (1000, 1)
    assert judged == ["n7"]
    # every Lease goes stale at NOW + GRACE: each node is looked at once then
    assert index.counts(NOW + GRACE + 1) == (1000, 1000)
    assert len(judged) == 1001
