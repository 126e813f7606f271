"""The open loop the load benchmarks share: call ``i`` is started when it is due, at
start + i / rate, whatever the calls before it are doing (a closed loop, one call after the
answer of the last, would hide the server's queueing: it slows down with the server)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any


async def open_loop(
    rate: float,
    duration_s: float,
    send: Callable[[int, float], Coroutine[Any, Any, None]],
    *,
    clock: Callable[[], float] = time.time,
) -> int:
    """Start ``send(i, due)`` for each of the ``int(rate * duration_s)`` calls at its due time and
    wait for them all; how many there were. ``due`` is on ``clock`` (the wall clock by default:
    comparable with what the database timestamps); the pacing itself is on the monotonic clock."""
    total = int(rate * duration_s)
    tasks: set[asyncio.Task[None]] = set()

    start_mono, start = time.monotonic(), clock()
    for i in range(total):
        at = i / rate
        delay = start_mono + at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(send(i, start + at))
        tasks.add(task)  # a strong reference: the loop keeps only weak ones
        task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)
    return total
