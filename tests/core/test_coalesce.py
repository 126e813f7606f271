"""core.coalesce: one writer gathers the biggest batches; a stalled batch gets a spare writer
for what waits behind it, and the spares leave once nothing is stalled.

No test waits for time to pass: the stall timer runs on a clock the test advances by hand
(``call_later``), and the batch call signals when the stalled batch has started."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from hiwallet.core.coalesce import Coalescer, WholeOrEach, whole_or_each

SPARE_AFTER_S = 0.05


@dataclass
class _Timer:
    when: float
    callback: Callable[..., object]
    args: tuple[Any, ...]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """The coalescer's stall timers, fired only when the test advances the clock."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[_Timer] = []

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> _Timer:
        timer = _Timer(self.now + delay, callback, args)
        self.timers.append(timer)
        return timer

    def advance(self, seconds: float) -> None:
        self.now += seconds
        due = sorted((t for t in self.timers if t.when <= self.now and not t.cancelled), key=lambda t: t.when)
        self.timers = [t for t in self.timers if t.when > self.now and not t.cancelled]
        for timer in due:
            timer.callback(*timer.args)

    @property
    def pending(self) -> int:
        return sum(not t.cancelled for t in self.timers)


class Batches:
    """A batch call that records how many batches ran at once; item -1 signals ``stalled`` and
    waits for ``release``."""

    def __init__(self) -> None:
        self.stalled = asyncio.Event()
        self.release = asyncio.Event()
        self.in_flight = 0
        self.most_in_flight = 0
        self.done = 0
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    async def __call__(self, items: Sequence[int]) -> list[str]:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if -1 in items:
                self.stalled.set()
                await self.release.wait()
            await asyncio.sleep(0)  # a real batch call suspends at least once
            return [f"answer-{i}" for i in items]
        finally:
            self.in_flight -= 1
            self.done += 1
            for target, waiter in self._waiters:
                if self.done >= target and not waiter.done():
                    waiter.set_result(None)

    async def batches(self, n: int) -> None:
        """Until ``n`` more batches have finished."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append((self.done + n, waiter))
        async with asyncio.timeout(10):  # a bound for a test that fails, not a wait for time
            await waiter


async def settle() -> None:
    """Run every callback the event loop has ready, and those they make ready: with no I/O and
    no timer of the loop's own in play, whatever has not happened after this will not happen."""
    for _ in range(100):
        await asyncio.sleep(0)


def expected(items: Sequence[int]) -> list[str]:
    return [f"answer-{i}" for i in items]


@pytest.mark.parametrize("stalled_first", [False, True], ids=["before it stalls", "once it has stalled"])
async def test_a_stalled_batch_gets_a_spare_writer(stalled_first: bool) -> None:
    calls, clock = Batches(), ManualClock()
    coalescer = Coalescer(
        calls, writers=2, max_batch=10, spare_after_s=SPARE_AFTER_S, call_later=clock.call_later
    )
    stalled = asyncio.ensure_future(coalescer.submit(-1))
    await calls.stalled.wait()  # the stalled batch is in flight
    if stalled_first:
        clock.advance(SPARE_AFTER_S)
    others = asyncio.ensure_future(asyncio.gather(*(coalescer.submit(i) for i in range(5))))
    if not stalled_first:
        # one writer until the batch in flight has been so for spare_after_s, not a moment less
        clock.advance(SPARE_AFTER_S * 0.99)
        await settle()
        assert not others.done() and calls.most_in_flight == 1
        clock.advance(SPARE_AFTER_S * 0.01)
    async with asyncio.timeout(10):  # a bound for a test that fails
        assert await others == expected(range(5))
    assert not stalled.done() and calls.most_in_flight == 2
    calls.release.set()
    assert await stalled == "answer--1"


async def test_without_spares_one_writer_holds_the_rest_back() -> None:
    calls, clock = Batches(), ManualClock()
    coalescer = Coalescer(calls, writers=1, max_batch=10, spare_after_s=None, call_later=clock.call_later)
    stalled = asyncio.ensure_future(coalescer.submit(-1))
    await calls.stalled.wait()
    others = asyncio.ensure_future(asyncio.gather(*(coalescer.submit(i) for i in range(5))))
    clock.advance(3600)
    await settle()
    assert not others.done() and not stalled.done() and clock.timers == []
    calls.release.set()
    assert await stalled == "answer--1"
    assert await others == expected(range(5))


async def load(coalescer: Coalescer[int, str], waves: int = 20) -> None:
    for wave in range(waves):
        items = range(wave * 8, wave * 8 + 8)
        assert await asyncio.gather(*(coalescer.submit(i) for i in items)) == expected(items)


async def test_with_spares_one_writer_drains_while_nothing_stalls() -> None:
    calls, clock = Batches(), ManualClock()
    await load(Coalescer(calls, writers=4, max_batch=3, spare_after_s=0.5, call_later=clock.call_later))
    assert calls.most_in_flight == 1
    # every batch started its stall timer and cancelled it when it ended
    assert len(clock.timers) >= 20 * 8 // 3 and clock.pending == 0
    # The control: spares at once (no spare_after_s), several batches run together.
    calls = Batches()
    await load(Coalescer(calls, writers=4, max_batch=3))
    assert calls.most_in_flight > 1


async def test_the_spares_leave_once_the_stall_is_over() -> None:
    """Under steady load (more waiting than one batch takes), spares drain beside a stalled
    batch, and once it is over one writer drains again."""
    calls, clock = Batches(), ManualClock()
    coalescer = Coalescer(
        calls, writers=3, max_batch=2, spare_after_s=SPARE_AFTER_S, call_later=clock.call_later
    )
    running = True

    async def client(k: int) -> None:
        i = 0
        while running:
            assert await coalescer.submit(1000 * k + i) == f"answer-{1000 * k + i}"
            i += 1

    clients = [asyncio.ensure_future(client(k)) for k in range(8)]
    await calls.batches(20)
    assert calls.most_in_flight == 1
    stalled = asyncio.ensure_future(coalescer.submit(-1))
    await calls.stalled.wait()
    clock.advance(SPARE_AFTER_S)
    await calls.batches(20)  # drained by the spare while the stalled batch waits
    assert not stalled.done()
    assert calls.most_in_flight == 2  # the stalled batch and one spare, though 3 are allowed
    calls.release.set()
    assert await stalled == "answer--1"
    # the stalled batch's writer left as its batch ended: from here on, one writer
    calls.most_in_flight = calls.in_flight
    await calls.batches(20)
    running = False
    await asyncio.gather(*clients)
    assert calls.most_in_flight == 1


# whole_or_each: the whole batch, again while a retry may cure it, then one answer for all or each
# item alone, as WholeOrEach says.


class Busy(Exception):
    """A deadlock, a race: a retry of the whole may cure it."""


class Away(Exception):
    """The server away: each item alone would meet the same."""


class Refused(Exception):
    """The batch refused for an item's content."""


class Own(Exception):
    """An item's own failure alone: its answer."""


class Answered(Exception):
    """What an item answers for a failure of the whole (the store's own error)."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(repr(cause))
        self.cause = cause


class Calls:
    """``whole`` fails with each of ``failures`` in turn, then answers; ``alone`` answers, or
    fails with what ``alone_failures`` says for that item."""

    def __init__(
        self, items: Sequence[int], *failures: Exception, alone_failures: dict[int, Exception] | None = None
    ):
        self.items = items
        self.failures = list(failures)
        self.alone_failures = alone_failures or {}
        self.wholes = 0
        self.alone: list[int] = []
        self.again: list[tuple[int, str]] = []

    async def whole(self) -> list[str]:
        self.wholes += 1
        if self.failures:
            raise self.failures.pop(0)
        return [f"whole-{i}" for i in self.items]

    async def each(self, item: int) -> str:
        self.alone.append(item)
        if item in self.alone_failures:
            raise self.alone_failures[item]
        return f"alone-{item}"

    def how(self, attempts: int = 3) -> WholeOrEach:
        return WholeOrEach(
            attempts=attempts,
            again=(Busy,),
            shared=lambda exc: isinstance(exc, Away),
            refused=(Refused,),
            own=(Own, Answered),
            answer=Answered,
            on_again=lambda attempt, exc: self.again.append((attempt, type(exc).__name__)),
            backoff_s=0,
        )

    async def run(self, attempts: int = 3) -> list[str | Exception]:
        return await whole_or_each(self.items, self.whole, self.each, self.how(attempts))


async def test_the_whole_answers_every_item() -> None:
    calls = Calls([1, 2, 3])
    assert await calls.run() == ["whole-1", "whole-2", "whole-3"]
    assert (calls.wholes, calls.alone, calls.again) == (1, [], [])


async def test_a_busy_whole_is_sent_again_whole() -> None:
    calls = Calls([1, 2], Busy(), Busy())
    assert await calls.run() == ["whole-1", "whole-2"]
    assert (calls.wholes, calls.alone, calls.again) == (3, [], [(1, "Busy"), (2, "Busy")])


@pytest.mark.parametrize("items", [[1, 2, 3], [7]], ids=["many", "one"])
async def test_a_whole_busy_at_every_attempt_sends_each_alone(items: list[int]) -> None:
    calls = Calls(items, Busy(), Busy(), Busy())
    assert await calls.run() == [f"alone-{i}" for i in items]
    # logged before each retry, not after the last attempt
    assert (calls.wholes, calls.alone, calls.again) == (3, items, [(1, "Busy"), (2, "Busy")])


async def test_a_failure_each_alone_would_meet_answers_every_item_without_sending_any_alone() -> None:
    away = Away()
    calls = Calls([1, 2, 3], Busy(), away)
    answers = await calls.run()
    assert all(isinstance(a, Answered) and a.cause is away for a in answers) and len(answers) == 3
    assert (calls.wholes, calls.alone) == (2, [])


async def test_a_refused_batch_of_many_sends_each_alone_each_with_its_own_answer() -> None:
    own = Own()
    calls = Calls([1, 2, 3], Refused(), alone_failures={2: own})
    assert await calls.run() == ["alone-1", own, "alone-3"]  # one item cannot fail its neighbours
    assert (calls.wholes, calls.alone) == (1, [1, 2, 3])


async def test_a_refused_batch_of_one_answers_the_refusal_without_sending_it_again() -> None:
    refused = Refused()
    calls = Calls([1], refused)
    [answer] = await calls.run()
    assert isinstance(answer, Answered) and answer.cause is refused
    assert (calls.wholes, calls.alone) == (1, [])


async def test_any_other_failure_is_raised_for_every_caller() -> None:
    calls = Calls([1, 2], ValueError("a defect"))
    with pytest.raises(ValueError, match="a defect"):
        await calls.run()
    assert (calls.wholes, calls.alone) == (1, [])
    # an item's failure alone that is not its own stops the batch too
    calls = Calls([1, 2], Refused(), alone_failures={1: ValueError("a defect alone")})
    with pytest.raises(ValueError, match="a defect alone"):
        await calls.run()
    assert calls.alone == [1]


def test_whole_or_each_needs_an_attempt() -> None:
    with pytest.raises(ValueError, match="attempts >= 1"):
        Calls([1]).how(attempts=0)


class Recorded(Batches):
    """Batches that also keep what each call was given."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[int]] = []

    async def __call__(self, items: Sequence[int]) -> list[str]:
        self.calls.append(list(items))
        return await super().__call__(items)


async def test_parts_split_a_burst_into_batches_at_once_that_share_no_key() -> None:
    """A closed loop's burst (every caller sends in the same turn) is sent as ``parts`` batches
    at once, not one: and two items with a key in common are never in different batches."""
    calls = Recorded()
    # items i and i + 1 share the key i // 2: pairs (0, 1), (2, 3), ...; 20 and 21 share 99 too
    coalescer = Coalescer(
        calls,
        writers=4,
        max_batch=100,
        parts=2,
        share_keys=lambda i: [i // 2, 99] if i in (20, 21, 30) else [i // 2],
    )
    items = list(range(32))
    assert await asyncio.gather(*(coalescer.submit(i) for i in items)) == expected(items)
    assert calls.most_in_flight == 2 and len(calls.calls) == 2
    assert sorted(len(c) for c in calls.calls) == [16, 16]
    assert all(c == sorted(c) for c in calls.calls)  # the queue's order within each
    together = [{i, i + 1} for i in range(0, 32, 2)] + [{20, 21, 30}]
    for group in together:
        assert any(group <= set(c) for c in calls.calls), group


async def test_parts_keep_a_burst_on_one_key_in_one_batch() -> None:
    """Every item locks the same row (one clearing account): one batch, as without parts."""
    calls = Recorded()
    coalescer = Coalescer(calls, writers=4, max_batch=100, parts=2, share_keys=lambda i: ["hot", i])
    items = list(range(32))
    assert await asyncio.gather(*(coalescer.submit(i) for i in items)) == expected(items)
    assert calls.calls == [items]


async def test_parts_leave_small_batches_whole() -> None:
    calls = Recorded()
    coalescer = Coalescer(calls, writers=4, max_batch=100, parts=2, share_keys=lambda i: [i])
    assert await asyncio.gather(*(coalescer.submit(i) for i in range(15))) == expected(range(15))
    assert calls.calls == [list(range(15))]  # fewer than two parts of MIN_PART


@pytest.mark.parametrize(
    "options",
    [
        {"parts": 2},  # no keys to keep items that lock the same rows together
        {"parts": 2, "share_keys": lambda i: [i], "spare_after_s": 0.5},  # spares answer stalls
        {"parts": 0, "share_keys": lambda i: [i]},
    ],
)
def test_parts_it_cannot_honour_refuse_to_build(options: dict[str, Any]) -> None:
    """Asked for parts it would not make, a coalescer refuses rather than run as one batch."""
    with pytest.raises(ValueError, match="parts"):
        Coalescer(Recorded(), writers=4, max_batch=100, **options)


async def _turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_linger_waits_for_the_callers_of_the_last_batch_to_come_back() -> None:
    """Closed-loop callers answered one after another come back one after another: with
    ``linger_s`` the writer waits for as many as were outstanding at once, one batch, not two
    halves; the wait ends as soon as they are all there (no timer fires)."""
    clock = ManualClock()
    calls = Recorded()
    coalescer = Coalescer(calls, writers=1, max_batch=50, linger_s=0.002, call_later=clock.call_later)
    assert await asyncio.gather(*(coalescer.submit(i) for i in range(4))) == expected(range(4))
    first = asyncio.create_task(coalescer.submit(10))
    await _turns()
    assert calls.calls == [[0, 1, 2, 3]]  # the writer lingers for the other three
    rest = [asyncio.create_task(coalescer.submit(i)) for i in (11, 12, 13)]
    assert await asyncio.gather(first, *rest) == expected([10, 11, 12, 13])
    assert calls.calls == [[0, 1, 2, 3], [10, 11, 12, 13]]
    assert clock.pending == 0  # the timer was cancelled


async def test_linger_ends_at_its_timer_when_fewer_come_back() -> None:
    clock = ManualClock()
    calls = Recorded()
    coalescer = Coalescer(calls, writers=1, max_batch=50, linger_s=0.002, call_later=clock.call_later)
    await asyncio.gather(*(coalescer.submit(i) for i in range(4)))
    alone = asyncio.create_task(coalescer.submit(20))
    await _turns()
    assert not alone.done()
    clock.advance(0.002)
    assert await alone == "answer-20"
    assert calls.calls == [[0, 1, 2, 3], [20]]
    # Fewer callers from then on: the next batch of one does not wait.
    assert await coalescer.submit(21) == "answer-21"
    assert calls.calls[-1] == [21]


async def test_linger_gathers_at_most_linger_batch() -> None:
    """With ``linger_batch`` the writer waits for that many at most, not for every caller that
    was outstanding: six callers lately, a batch of three is sent as soon as three are back."""
    clock = ManualClock()
    calls = Recorded()
    coalescer = Coalescer(
        calls, writers=1, max_batch=50, linger_s=0.002, linger_batch=3, call_later=clock.call_later
    )
    await asyncio.gather(*(coalescer.submit(i) for i in range(6)))
    first = [asyncio.create_task(coalescer.submit(i)) for i in (30, 31)]
    await _turns()
    assert calls.calls == [list(range(6))]  # two of three: the writer lingers
    third = asyncio.create_task(coalescer.submit(32))
    # (without the cap the writer would wait for six on a clock that never moves: bounded here)
    assert await asyncio.wait_for(asyncio.gather(*first, third), 5) == expected([30, 31, 32])
    assert calls.calls[-1] == [30, 31, 32]
    assert clock.pending == 0  # no timer had to fire


async def test_without_linger_a_lone_caller_is_sent_at_once() -> None:
    calls = Recorded()
    coalescer = Coalescer(calls, writers=1, max_batch=50)
    await asyncio.gather(*(coalescer.submit(i) for i in range(4)))
    assert await coalescer.submit(10) == "answer-10"
    assert calls.calls == [[0, 1, 2, 3], [10]]
