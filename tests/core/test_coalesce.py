"""core.coalesce: one writer gathers the biggest batches; a stalled batch gets a spare writer
for what waits behind it, and the spares leave once nothing is stalled."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from hiwallet.core.coalesce import Coalescer


class Batches:
    """A batch call that records how many batches ran at once; item -1 waits for ``release``."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.in_flight = 0
        self.most_in_flight = 0

    async def __call__(self, items: Sequence[int]) -> list[str]:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if -1 in items:
                await self.release.wait()
            await asyncio.sleep(0.002)
            return [f"answer-{i}" for i in items]
        finally:
            self.in_flight -= 1


async def stalled_then_others(coalescer: Coalescer[int, str], calls: Batches, after_s: float = 0.01) -> bool:
    """Whether items submitted ``after_s`` behind a stalled batch are answered while it is still
    stalled."""
    stalled = asyncio.ensure_future(coalescer.submit(-1))
    await asyncio.sleep(after_s)  # the stalled batch is in flight
    others = asyncio.ensure_future(asyncio.gather(*(coalescer.submit(i) for i in range(5))))
    done, _ = await asyncio.wait({others}, timeout=0.5)  # not cancelled if not done
    assert not stalled.done()
    calls.release.set()
    assert await stalled == "answer--1"
    assert await others == [f"answer-{i}" for i in range(5)]
    return others in done


@pytest.mark.parametrize("after_s", [0.01, 0.1], ids=["before it stalls", "once it has stalled"])
async def test_a_stalled_batch_gets_a_spare_writer(after_s: float) -> None:
    calls = Batches()
    coalescer = Coalescer(calls, writers=2, max_batch=10, spare_after_s=0.05)
    assert await stalled_then_others(coalescer, calls, after_s)


async def test_without_spares_one_writer_holds_the_rest_back() -> None:
    calls = Batches()
    coalescer = Coalescer(calls, writers=1, max_batch=10, spare_after_s=None)
    assert not await stalled_then_others(coalescer, calls)


async def load(coalescer: Coalescer[int, str], waves: int = 20) -> None:
    for wave in range(waves):
        items = range(wave * 8, wave * 8 + 8)
        assert await asyncio.gather(*(coalescer.submit(i) for i in items)) == [f"answer-{i}" for i in items]


async def test_with_spares_one_writer_drains_while_nothing_stalls() -> None:
    calls = Batches()
    await load(Coalescer(calls, writers=4, max_batch=3, spare_after_s=0.5))
    assert calls.most_in_flight == 1
    # The control: spares at once (no spare_after_s), several batches run together.
    calls = Batches()
    await load(Coalescer(calls, writers=4, max_batch=3))
    assert calls.most_in_flight > 1


async def test_the_spares_leave_once_the_stall_is_over() -> None:
    """Under steady load (more waiting than one batch takes), spares drain beside a stalled
    batch, and once it is over one writer drains again."""
    calls = Batches()
    coalescer = Coalescer(calls, writers=3, max_batch=2, spare_after_s=0.05)
    running = True

    async def client(k: int) -> None:
        i = 0
        while running:
            assert await coalescer.submit(1000 * k + i) == f"answer-{1000 * k + i}"
            i += 1

    clients = [asyncio.ensure_future(client(k)) for k in range(8)]
    await asyncio.sleep(0.05)
    assert calls.most_in_flight == 1
    stalled = asyncio.ensure_future(coalescer.submit(-1))
    await asyncio.sleep(0.2)
    assert calls.most_in_flight == 2  # the stalled batch and one spare
    calls.release.set()
    assert await stalled == "answer--1"
    await asyncio.sleep(0.05)  # the spare leaves after the batch it is in
    calls.most_in_flight = calls.in_flight
    await asyncio.sleep(0.2)
    running = False
    await asyncio.gather(*clients)
    assert calls.most_in_flight == 1
