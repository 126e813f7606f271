"""The one way a test waits: poll what can be observed until it holds, against a deadline.

A test never sleeps to "let something happen" (a message be consumed, a process start, a token
expire): the time that takes varies with the machine's load, so a sleep is either too short
(a flaky test) or too long (a slow one). It waits on the observable outcome instead, and moves
clocks rather than waiting for them. What is left is the other direction, a check that nothing
happens: ``stays`` watches a condition for a window and fails the moment it breaks.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

INTERVAL_S = 0.02
TIMEOUT_S = 20.0  # only a failing test waits it out


async def until(
    condition: Callable[[], T | Awaitable[T]],
    timeout_s: float = TIMEOUT_S,
    what: str = "the condition",
    *,
    interval_s: float = INTERVAL_S,
) -> T:
    """Poll ``condition`` (sync or async) until it returns something truthy; return that.
    AssertionError naming ``what`` (and the last value) after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what} (last: {value!r})")
        await asyncio.sleep(interval_s)  # the polling interval, not a synchronisation


def until_sync(
    condition: Callable[[], T],
    timeout_s: float = TIMEOUT_S,
    what: str = "the condition",
    *,
    interval_s: float = INTERVAL_S,
) -> T:
    """``until`` for synchronous tests (a blocking client, a server in a thread)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what} (last: {value!r})")
        time.sleep(interval_s)  # the polling interval, not a synchronisation


async def stays(
    condition: Callable[[], object | Awaitable[object]],
    for_s: float,
    what: str = "the condition",
    *,
    interval_s: float = INTERVAL_S,
) -> None:
    """Check that ``condition`` holds throughout ``for_s`` (that nothing late arrives, nothing is
    retried); AssertionError naming ``what`` as soon as it does not. The window is the claim
    under test ("nothing within so long"), not a wait for something to happen."""
    deadline = time.monotonic() + for_s
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if not value:
            raise AssertionError(f"no longer true: {what} (got: {value!r})")
        if time.monotonic() > deadline:
            return
        await asyncio.sleep(interval_s)  # the polling interval, not a synchronisation


def stays_sync(
    condition: Callable[[], object],
    for_s: float,
    what: str = "the condition",
    *,
    interval_s: float = INTERVAL_S,
) -> None:
    """``stays`` for synchronous tests."""
    deadline = time.monotonic() + for_s
    while True:
        value = condition()
        if not value:
            raise AssertionError(f"no longer true: {what} (got: {value!r})")
        if time.monotonic() > deadline:
            return
        time.sleep(interval_s)  # the polling interval, not a synchronisation


class Clock:
    """A clock the test moves: passed where the code takes a ``clock`` (token expiry, refetch
    pacing), so a test steps past a deadline instead of waiting seconds of wall clock."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
