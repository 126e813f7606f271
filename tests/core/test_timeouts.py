"""core.timeouts.within: a bounded wait that keeps the caller's cancellation, even one that
arrives as the awaited thing completes (which Python 3.11's asyncio.wait_for swallows: a relay's
task cancelled at that moment ran on for good, and a test run hung)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from hiwallet.core.timeouts import within


async def _cancelled_as_it_completes(wait: Callable[[Awaitable[Any], float], Awaitable[Any]]) -> bool:
    """Whether a task is cancelled when the cancel lands in the same loop turn as the end of
    the thing it waits for (bounded)."""
    inner: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    went_on = asyncio.Event()

    async def loop_body() -> None:
        await wait(inner, 5.0)
        went_on.set()  # the cancel was lost: a stopped loop would run on from here
        await asyncio.sleep(10)

    task = asyncio.create_task(loop_body())
    await asyncio.sleep(0)  # it waits on ``inner`` now
    inner.set_result(None)
    task.cancel()
    try:
        await asyncio.wait_for(asyncio.shield(task), 1.0)
    except asyncio.CancelledError:
        return True
    except TimeoutError:
        task.cancel()
        return False
    return False


async def test_the_cancel_that_arrives_as_the_wait_ends_is_kept() -> None:
    assert await _cancelled_as_it_completes(within)


async def test_it_bounds_the_wait_and_returns_the_result() -> None:
    with pytest.raises(TimeoutError):
        await within(asyncio.sleep(5), 0.01)
    assert await within(asyncio.sleep(0, result=7), 1.0) == 7
    assert await within(asyncio.sleep(0, result=8), None) == 8
