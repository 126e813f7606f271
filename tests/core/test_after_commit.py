"""core.db.after_commit / committing: what a transaction asks for runs after its commit only."""

from __future__ import annotations

import asyncio

import pytest

from hiwallet.core.db import after_commit, committing


async def test_callbacks_run_after_the_block_once_when_asked_once_and_never_after_an_error() -> None:
    ran: list[str] = []

    def wake() -> None:
        ran.append("wake")

    async with committing():
        after_commit(wake, once=True)
        after_commit(wake, once=True)
        after_commit(lambda: ran.append("count"))
        assert ran == []  # nothing before the block ends
    assert ran == ["wake", "count"]

    ran.clear()
    with pytest.raises(RuntimeError):
        async with committing():
            after_commit(wake)
            raise RuntimeError("rolled back")
    assert ran == []


async def test_outside_a_tracked_transaction_it_runs_at_once() -> None:
    ran: list[int] = []
    after_commit(lambda: ran.append(1))
    assert ran == [1]


async def test_a_failing_callback_neither_undoes_nor_stops_the_others() -> None:
    ran: list[int] = []

    def boom() -> None:
        raise ValueError("a metric that failed")

    async with committing():
        after_commit(boom)
        after_commit(lambda: ran.append(2))
    assert ran == [2]


async def test_concurrent_tasks_keep_their_own_callbacks() -> None:
    ran: list[str] = []
    all_inside = asyncio.Barrier(3)

    async def unit(name: str, fail: bool) -> None:
        async with committing():
            after_commit(lambda: ran.append(name))
            async with asyncio.timeout(5):
                await all_inside.wait()  # the three units open at once
            if fail:
                raise RuntimeError(name)

    results = await asyncio.gather(
        unit("a", False), unit("b", True), unit("c", False), return_exceptions=True
    )
    assert isinstance(results[1], RuntimeError)
    assert sorted(ran) == ["a", "c"]
