"""core.background: what every service runs its background work through (one copy for all)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hiwallet.core import db
from hiwallet.core.background import consumer_started, every, supervised


async def test_supervised_starts_work_again_after_an_error_and_ends_when_it_returns() -> None:
    calls = 0

    async def work() -> None:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise RuntimeError("boom")

    await asyncio.wait_for(supervised("test", work, restart_delay_s=0.01), 5)
    assert calls == 3


async def test_supervised_lets_a_cancellation_through() -> None:
    working = asyncio.Event()

    async def work() -> None:
        working.set()
        await asyncio.sleep(60)  # work that goes on until cancelled

    task = asyncio.create_task(supervised("test", work))
    await asyncio.wait_for(working.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_every_keeps_going_after_a_failed_round() -> None:
    rounds: list[int] = []
    third = asyncio.Event()

    async def work() -> None:
        rounds.append(len(rounds))
        if len(rounds) == 1:
            raise ValueError("first round fails")
        if len(rounds) == 3:
            third.set()

    task = asyncio.create_task(every(0.01, "test", work))
    try:
        await asyncio.wait_for(third.wait(), 5)
    finally:
        task.cancel()
    assert rounds[:3] == [0, 1, 2]


class _Consumer:
    def __init__(self) -> None:
        self.started = asyncio.Event()

    async def wait_started(self) -> None:
        await self.started.wait()


async def test_consumer_started_waits_raises_its_failure_and_times_out() -> None:
    consumer: Any = _Consumer()
    running = asyncio.create_task(asyncio.sleep(60))  # a consumer that runs on
    consumer.started.set()
    await consumer_started(consumer, running, 1)
    running.cancel()

    async def fails() -> None:
        raise ConnectionError("no broker")

    failing = asyncio.create_task(fails())
    with pytest.raises(ConnectionError):
        await consumer_started(_Consumer(), failing, 1)  # type: ignore[arg-type]

    idle = asyncio.create_task(asyncio.sleep(60))  # a consumer that never starts
    with pytest.raises(TimeoutError):
        await consumer_started(_Consumer(), idle, 0.05)  # type: ignore[arg-type]
    idle.cancel()


async def test_a_dedicated_connection_is_the_role_with_the_pools_timeouts(wallet_db: str) -> None:
    connect = db.dedicated_connection(wallet_db, db.app_role("wallet"))
    conn = await connect()
    try:
        assert await conn.fetchval("SELECT current_user") == db.app_role("wallet")
        assert await conn.fetchval("SHOW lock_timeout") != "0"
    finally:
        await conn.close()
