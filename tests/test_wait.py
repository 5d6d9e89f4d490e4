"""The suite's wait helper: returns what it waited for, and names it when it does not come."""

from __future__ import annotations

import pytest

from tests.support.wait import TimedOut, until, until_async


def test_until_returns_the_first_truthy_value() -> None:
    values = iter([None, 0, "", "found"])
    assert until(lambda: next(values), timeout=5, what="a value", interval=0) == "found"


def test_until_fails_naming_what_and_the_last_value_seen() -> None:
    seen: list[int] = []

    def empty() -> list[int]:
        seen.append(len(seen))
        return []

    with pytest.raises(TimedOut, match=r"waiting for the answer; last seen:\n\[\]") as caught:
        until(empty, timeout=0.05, what="the answer", interval=0.01)
    assert isinstance(caught.value, AssertionError)  # a test failure, as pytest reports one
    assert len(seen) >= 2  # polled, not tried once


def test_accept_decides_and_the_accepted_value_is_returned() -> None:
    values = iter(["a", "ab", "abc"])
    got = until(
        lambda: next(values), accept=lambda v: len(v) == 3, timeout=5, what="abc", interval=0
    )
    assert got == "abc"


def test_a_failure_shows_the_last_value_and_the_detail() -> None:
    with pytest.raises(TimedOut) as caught:
        until(
            lambda: "line 1\nline 2",
            accept=lambda text: "line 3" in text,
            timeout=0.02,
            what="line 3",
            interval=0.01,
            detail=lambda: "the log",
        )
    assert str(caught.value).endswith("waiting for line 3; last seen:\nline 1\nline 2\nthe log")


async def test_until_async_awaits_a_coroutine_condition() -> None:
    calls = 0

    async def ready() -> int | None:
        nonlocal calls
        calls += 1
        return calls if calls >= 3 else None

    assert await until_async(ready, timeout=5, what="three calls", interval=0) == 3


async def test_until_async_takes_a_plain_condition_and_fails_with_the_last_value() -> None:
    with pytest.raises(TimedOut, match="waiting for nothing; last seen:\nFalse"):
        await until_async(lambda: False, timeout=0.02, what="nothing", interval=0.01)
