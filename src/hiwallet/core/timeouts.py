"""A bounded wait that keeps a cancellation.

``asyncio.wait_for`` on Python 3.11 loses a cancellation that arrives as the awaited thing
completes: it returns the result and the task goes on as if never cancelled (CPython issue
gh-86296, fixed in 3.12 by rebuilding it on ``asyncio.timeout``). A loop that is stopped by
cancelling its task (a relay, a consumer, a job) then never stops: seen as a test run that hung
for good, its relay reconnecting every 0.2 s after ``task.cancel()``. ``asyncio.timeout``
(3.11) keeps it; every bounded wait in hiwallet goes through :func:`within`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["within"]

T = TypeVar("T")


async def within(awaitable: Awaitable[T], timeout_s: float | None) -> T:
    """``await awaitable``, or ``TimeoutError`` after ``timeout_s`` (None: no bound), as
    ``asyncio.wait_for`` but never swallowing the caller's cancellation."""
    async with asyncio.timeout(timeout_s):
        return await awaitable
