"""The suite's one way to wait: poll a condition with a deadline.

``until`` (plain code) and ``until_async`` (in the event loop; the condition may be a coroutine
function) call ``condition`` every ``interval`` seconds until what it returns is accepted (truthy,
unless ``accept`` says otherwise), and return that value. At the deadline the test fails with
:class:`TimedOut`, naming ``what`` and the last value seen (and ``detail()``, when given: a log,
a state dump).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")

#: How often a condition is polled unless told otherwise.
INTERVAL = 0.05

#: How much of the last value a failure shows.
SHOWN = 4000


class TimedOut(AssertionError):
    """A condition the test waited for did not come within its deadline."""


def until(
    condition: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    interval: float = INTERVAL,
    accept: Callable[[T], object] | None = None,
    detail: Callable[[], str] | None = None,
) -> T:
    """Poll ``condition`` until its value is accepted (truthy by default) and return it; fail
    after ``timeout`` seconds, naming ``what`` and the last value seen."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if _accepted(value, accept):
            return value  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise TimedOut(_message(what, timeout, value, detail))
        time.sleep(interval)


@overload
async def until_async(
    condition: Callable[[], Awaitable[T | None]],
    *,
    timeout: float,  # noqa: ASYNC109 (a polling deadline, not a cancellation scope)
    what: str,
    interval: float = ...,
    accept: Callable[[T], object] | None = ...,
    detail: Callable[[], str] | None = ...,
) -> T: ...


@overload
async def until_async(
    condition: Callable[[], T | None],
    *,
    timeout: float,  # noqa: ASYNC109 (a polling deadline, not a cancellation scope)
    what: str,
    interval: float = ...,
    accept: Callable[[T], object] | None = ...,
    detail: Callable[[], str] | None = ...,
) -> T: ...


async def until_async(
    condition: Callable[[], Any],
    *,
    timeout: float,  # noqa: ASYNC109 (a polling deadline, not a cancellation scope)
    what: str,
    interval: float = INTERVAL,
    accept: Callable[[Any], object] | None = None,
    detail: Callable[[], str] | None = None,
) -> Any:
    """:func:`until` in the event loop: ``condition`` may be plain or a coroutine function,
    and the loop runs between polls."""
    deadline = time.monotonic() + timeout
    while True:
        value: Any = condition()
        if inspect.isawaitable(value):
            value = await value
        if _accepted(value, accept):
            return value
        if time.monotonic() > deadline:
            raise TimedOut(_message(what, timeout, value, detail))
        await asyncio.sleep(interval)


def _accepted(value: Any, accept: Callable[[Any], object] | None) -> bool:
    return bool(value) if accept is None else bool(accept(value))


def _message(what: str, timeout: float, last: object, detail: Callable[[], str] | None) -> str:
    shown = last if isinstance(last, str) and "\n" in last else repr(last)
    if len(shown) > SHOWN:
        shown = f"{shown[:SHOWN]}... ({len(shown) - SHOWN} more characters)"
    text = f"timed out after {timeout:g} s waiting for {what}; last seen:\n{shown}"
    return f"{text}\n{detail()}" if detail is not None else text
