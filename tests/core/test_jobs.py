"""core.jobs: one instance a round, under an advisory lock on a connection of its own."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time

import asyncpg
import pytest

from hiwallet.core.jobs import PeriodicJob, in_batches
from tests.core import spine


def _connect(database: str):  # type: ignore[no-untyped-def]
    async def connect() -> asyncpg.Connection:
        return await spine.owner_connect(database)

    return connect


async def test_a_second_instance_skips_while_the_first_holds_the_lock(spine_db: str) -> None:
    key = random.randrange(1, 2**62)
    inside = asyncio.Event()
    release = asyncio.Event()
    runs: list[str] = []

    async def slow() -> int:
        runs.append("first")
        inside.set()
        await release.wait()
        return 1

    async def quick() -> int:
        runs.append("second")
        return 1

    first = PeriodicJob("test-job", 60, key, slow, _connect(spine_db))
    second = PeriodicJob("test-job", 60, key, quick, _connect(spine_db))
    task = asyncio.create_task(first.run_once())
    await asyncio.wait_for(inside.wait(), 5)
    assert await second.run_once() is False  # busy: skipped, not queued
    assert second.skipped == 1
    release.set()
    assert await task is True
    assert await second.run_once() is True  # the lock is free again (released with the round)
    assert runs == ["first", "second"]


async def test_first_round_one_interval_after_start_and_errors_do_not_stop_it(spine_db: str) -> None:
    key = random.randrange(1, 2**62)
    started = time.monotonic()
    rounds: list[float] = []
    three = asyncio.Event()

    async def work() -> None:
        rounds.append(time.monotonic() - started)
        if len(rounds) >= 3:
            three.set()
        if len(rounds) == 1:
            raise RuntimeError("the first round fails")

    job = PeriodicJob("test-job", 0.3, key, work, _connect(spine_db))
    task = asyncio.create_task(job.run_forever())
    try:
        await asyncio.wait_for(three.wait(), 5)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert len(rounds) >= 3  # the failure did not stop the job
    assert rounds[0] >= 0.3  # not at start: one interval after it
    assert job.rounds >= 1  # the third round set the event before it was counted


async def test_a_round_is_bounded_and_releases_the_lock(spine_db: str) -> None:
    key = random.randrange(1, 2**62)

    async def stuck() -> None:
        await asyncio.sleep(60)  # a round that hangs: the behaviour under test

    job = PeriodicJob("test-job", 60, key, stuck, _connect(spine_db), timeout_s=0.2)
    try:
        await job.run_once()
    except TimeoutError:
        pass
    else:
        raise AssertionError("a stuck round must time out")

    async def quick() -> int:
        return 0

    assert await PeriodicJob("test-job", 60, key, quick, _connect(spine_db)).run_once() is True


async def test_in_batches_stops_at_a_short_batch_or_at_the_bound() -> None:
    sizes = iter([3, 3, 1, 3])
    calls = 0

    async def step() -> int:
        nonlocal calls
        calls += 1
        return next(sizes)

    assert await in_batches(step, batch=3, max_batches=10) == 7  # 3 + 3 + 1: the short one ends it
    assert calls == 3

    async def always_full() -> int:
        return 3

    assert await in_batches(always_full, batch=3, max_batches=4) == 12  # bounded, the rest waits
    with pytest.raises(ValueError):
        await in_batches(always_full, batch=0, max_batches=1)
