"""The token bucket as tables and as a property: never more than burst + qps * elapsed."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.model.ratelimit import TokenBucket

T0 = 1000.0


def bucket(qps: float = 2.0, burst: int = 3) -> TokenBucket:
    return TokenBucket(qps, burst, lambda: T0)


def test_starts_full_and_allows_a_burst() -> None:
    b = bucket()
    assert b.tokens(T0) == 3.0
    assert [b.try_take(T0) for _ in range(4)] == [True, True, True, False]
    assert b.tokens(T0) == 0.0


def test_refills_at_qps_up_to_burst() -> None:
    b = bucket(qps=2.0, burst=3)
    for _ in range(3):
        assert b.try_take(T0)
    assert b.tokens(T0 + 0.25) == pytest.approx(0.5)
    assert not b.try_take(T0 + 0.25)
    assert b.try_take(T0 + 0.5)
    assert b.tokens(T0 + 100) == 3.0  # capped at burst


@pytest.mark.parametrize(
    ("taken", "at", "delay"),
    [
        pytest.param(0, 0.0, 0.0, id="full"),
        pytest.param(3, 0.0, 0.5, id="empty: one token in 1/qps"),
        pytest.param(3, 0.2, 0.3, id="partly refilled"),
        pytest.param(3, 0.5, 0.0, id="refilled"),
    ],
)
def test_delay_until_available(taken: int, at: float, delay: float) -> None:
    b = bucket(qps=2.0, burst=3)
    for _ in range(taken):
        assert b.try_take(T0)
    assert b.delay_until_available(T0 + at) == pytest.approx(delay)


def test_waiting_the_delay_always_yields_a_token() -> None:
    b = bucket(qps=3.0, burst=1)
    now = T0
    for _ in range(100):
        now += b.delay_until_available(now)
        assert b.try_take(now), now


def test_a_clock_going_backwards_adds_nothing() -> None:
    b = bucket(qps=1.0, burst=1)
    assert b.try_take(T0 + 10)
    assert not b.try_take(T0 + 5)
    assert b.tokens(T0 + 5) == 0.0
    assert b.try_take(T0 + 11)


@pytest.mark.parametrize(
    ("qps", "burst"), [(0.0, 1), (-1.0, 1), (math.inf, 1), (math.nan, 1), (1.0, 0)]
)
def test_rejects_invalid_parameters(qps: float, burst: int) -> None:
    with pytest.raises(ValueError, match=r"qps|burst"):
        TokenBucket(qps, burst, lambda: T0)


@given(
    qps=st.floats(min_value=0.1, max_value=50.0),
    burst=st.integers(min_value=1, max_value=20),
    steps=st.lists(st.floats(min_value=0.0, max_value=2.0), min_size=1, max_size=200),
)
def test_never_more_than_burst_plus_qps_times_elapsed(
    qps: float, burst: int, steps: list[float]
) -> None:
    b = TokenBucket(qps, burst, lambda: T0)
    now = T0
    taken = 0
    for step in steps:
        now += step
        if b.try_take(now):
            taken += 1
        assert taken <= burst + qps * (now - T0) + 1e-6
        assert 0.0 <= b.tokens(now) <= burst
