"""Concurrent requests share one round trip and one commit.

When many callers write at once, each write alone pays a round trip, a statement and a commit
(a WAL flush); on this kind of machine each round trip also costs a few system calls on both
sides, which cost more than a small write itself. A coalescer queues the callers' items and a
few writers drain the queue through one batch call, up to ``max_batch`` items at a time. A
caller still awaits its own answer: the batch call returns one answer per item, a result or an
exception instance, and each caller gets its own (the ledger's plain postings,
``hiwallet.ledger.store``; wallet-api's transfers, ``hiwallet.wallet_api.transfers``).

What changes for a caller: its write commits together with its neighbours'. If the batch call
itself fails, every item of that batch gets that exception, and each may be retried, as after
any failure.

``conflict_key`` keeps two items with the same key out of one batch (the second waits for a
later batch), for batch calls that must see such items one after the other.

``spare_after_s`` keeps batches big without letting one stuck batch hold everyone back: one
writer drains (the next batch gathers while one runs: the biggest batches), and another starts
only when a batch has been in flight that long with items waiting, up to ``writers``. A batch
waiting on a lock held elsewhere then no longer holds back the rest; once no batch is stalled,
the extra writers leave after their batch.

``linger_s`` keeps closed-loop callers in one batch: before taking a batch, a writer waits (at
most ``linger_s``, and only while fewer items wait than were outstanding at once since the last
batch was taken) for the callers just answered to come back. Without it, callers each sending
again after their answer split into two alternating halves (one in flight, the other gathering),
every half paying the batch call's fixed cost: wallet-api's transfers at 8 clients came in
batches of about 4. A lone caller, or as many waiting as lately, is taken at once.
``linger_batch`` caps what the wait gathers: a batch that size already spreads the call's fixed
cost, and waiting for the last of many callers leaves the database idle meanwhile (wallet-api at
32 clients: 0.89 of the throughput without the linger, docs/performance.md).

``parts`` with ``share_keys`` (without ``spare_after_s``) splits what a writer took into up to
``parts`` batches sent at once, each on its own connection, never two items that share a key
(the rows they lock) in different batches: the parts never wait on each other's locks, and
items that all share one key stay one batch. Clients that each wait for their answer before
sending again (a closed loop: callers under load, a benchmark) all arrive in the
same turn of the event loop, before any writer runs: the first writer takes the whole burst and
the others find nothing, so without parts one batch was ever in flight, the server's second
core idle beside it (measured at 32 such clients: batches of 32, one at a time).

:func:`whole_or_each` is what a batch call does when its one statement fails: the whole batch
again while a retry may cure it (a deadlock, a race), every item the same answer when none
would fare better alone (the server away), else each item alone, so that one item's content
cannot fail its neighbours (a store's batch call, each store naming its own failures).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

Item = TypeVar("Item")
# A part smaller than this is not worth its own round trip and commit.
MIN_PART = 8
Result = TypeVar("Result")


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Timer(Protocol):
    """What starts the stall timer: ``loop.call_later`` by default; a test passes a clock it
    advances by hand, so that when a batch counts as stalled does not depend on the machine."""

    def __call__(self, delay: float, callback: Callable[..., object], *args: Any) -> Cancellable: ...


class _Stall:
    """Whether a batch in flight has been taken for stalled (its timer fired)."""

    __slots__ = ("stalled",)

    def __init__(self) -> None:
        self.stalled = False


class Coalescer(Generic[Item, Result]):
    def __init__(
        self,
        call_batch: Callable[[Sequence[Item]], Awaitable[Sequence[Result | BaseException]]],
        *,
        writers: int,
        max_batch: int,
        conflict_key: Callable[[Item], Hashable] | None = None,
        spare_after_s: float | None = None,
        call_later: Timer | None = None,
        parts: int = 1,
        share_keys: Callable[[Item], Iterable[Hashable]] | None = None,
        linger_s: float | None = None,
        linger_batch: int | None = None,
    ) -> None:
        if writers < 1 or max_batch < 1:
            raise ValueError(f"a coalescer needs writers >= 1 and max_batch >= 1: {writers}, {max_batch}")
        if spare_after_s is not None and spare_after_s <= 0:
            raise ValueError(f"spare_after_s must be positive or None: {spare_after_s}")
        # Parts need the keys that keep items apart, and are not for spares (a spare is the answer
        # to a stalled batch there): asked for otherwise, they would be silently one batch.
        if parts < 1 or (parts > 1 and (share_keys is None or spare_after_s is not None)):
            raise ValueError(f"parts > 1 needs share_keys and no spare_after_s: parts={parts}")
        self._call_batch = call_batch
        self._queue: deque[tuple[Item, asyncio.Future[Result]]] = deque()
        self._max_writers = writers
        self._max_batch = max_batch
        self._conflict_key = conflict_key
        self._spare_after_s = spare_after_s
        self._call_later = call_later
        self._parts = parts
        self._share_keys = share_keys
        self._calling = 0  # batch calls in flight
        self._active = 0  # writers draining now
        self._stalled = 0  # batches in flight for longer than spare_after_s
        self._tasks: set[asyncio.Task[None]] = set()  # references, so none is collected mid-flight
        # Linger: before taking a batch, wait (at most linger_s) until as many items wait as were
        # outstanding at once since the last batch was taken, so closed-loop callers whose answers
        # just went out join the next batch instead of splitting into two halves.
        self._linger_s = linger_s
        self._linger_batch = max_batch if linger_batch is None else max(1, min(linger_batch, max_batch))
        self._outstanding = 0  # items submitted and not yet answered to their caller
        self._peak = 0  # the most outstanding at once since the last take
        self._enough: asyncio.Future[None] | None = None
        self._want = 0

    async def submit(self, item: Item) -> Result:
        """``item``'s answer from the batch it joined; an exception answer is raised."""
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        self._outstanding += 1
        if self._outstanding > self._peak:
            self._peak = self._outstanding
        enough = self._enough
        if enough is not None and len(self._queue) >= self._want and not enough.done():
            enough.set_result(None)
        if self._active < self._writers_wanted():
            self._start_writer()
        try:
            return await future
        finally:
            self._outstanding -= 1

    async def _linger(self) -> None:
        """Wait (at most ``linger_s``) for as many items as were outstanding at once lately."""
        want = min(self._linger_batch, self._peak)
        self._peak = self._outstanding
        if self._linger_s is None or self._enough is not None or len(self._queue) >= want:
            return
        loop = asyncio.get_running_loop()
        enough: asyncio.Future[None] = loop.create_future()
        self._enough, self._want = enough, want
        timer = (self._call_later or loop.call_later)(self._linger_s, _settle, enough)
        try:
            await enough
        finally:
            timer.cancel()
            self._enough = None

    def _writers_wanted(self) -> int:
        if self._spare_after_s is None:
            return self._max_writers
        # One, and a spare beside each stalled batch.
        return min(self._max_writers, 1 + self._stalled)

    def _start_writer(self) -> None:
        # Counted here and uncounted in _drain in the same step that sees the queue empty (no
        # await between): a task that has finished draining but not yet been reaped must not
        # be taken for a writer, or an item could wait in the queue for ever.
        self._active += 1
        task = asyncio.create_task(self._drain())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _on_stall(self, stall: _Stall) -> None:
        """A batch has been in flight for ``spare_after_s``: the items waiting get a writer of
        their own, if one is allowed."""
        stall.stalled = True
        self._stalled += 1
        if self._queue and self._active < self._writers_wanted():
            self._start_writer()

    async def _drain(self) -> None:
        try:
            await self._drain_queue()
        finally:
            self._active -= 1

    def _take(self) -> list[tuple[Item, asyncio.Future[Result]]]:
        if self._conflict_key is None:
            return [self._queue.popleft() for _ in range(min(len(self._queue), self._max_batch))]
        batch: list[tuple[Item, asyncio.Future[Result]]] = []
        later: list[tuple[Item, asyncio.Future[Result]]] = []
        keys: set[Hashable] = set()
        # Bounded: at most max_batch taken and at most max_batch put back per batch.
        while self._queue and len(batch) < self._max_batch and len(later) < self._max_batch:
            entry = self._queue.popleft()
            key = self._conflict_key(entry[0])
            if key in keys:
                later.append(entry)
            else:
                keys.add(key)
                batch.append(entry)
        self._queue.extendleft(reversed(later))  # first in the queue again, in their order
        return batch

    def _split(
        self, batch: list[tuple[Item, asyncio.Future[Result]]]
    ) -> list[list[tuple[Item, asyncio.Future[Result]]]]:
        """``batch`` in up to ``parts`` batches (no more than the writers' calls left free, at
        least MIN_PART items each), items sharing a key in one; in the queue's order within
        each."""
        k = min(self._parts, self._max_writers - self._calling, len(batch) // MIN_PART)
        if k < 2 or self._share_keys is None:
            return [batch]
        # Items joined by a shared key are one group (union-find over the keys' first items).
        parent = list(range(len(batch)))

        def root(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        first: dict[Hashable, int] = {}
        for i, (item, _) in enumerate(batch):
            for key in self._share_keys(item):
                j = first.setdefault(key, i)
                if j != i:
                    parent[root(i)] = root(j)
        groups: dict[int, list[int]] = {}
        for i in range(len(batch)):
            groups.setdefault(root(i), []).append(i)
        if len(groups) == 1:
            return [batch]
        # The biggest groups first, each into the part with the fewest items so far.
        bins: list[list[int]] = [[] for _ in range(k)]
        for group in sorted(groups.values(), key=len, reverse=True):
            min(bins, key=len).extend(group)
        return [[batch[i] for i in sorted(b)] for b in bins if b]

    async def _call(self, batch: list[tuple[Item, asyncio.Future[Result]]]) -> None:
        """One batch call, its answers to its callers."""
        self._calling += 1
        try:
            answers = await self._call_batch([item for item, _ in batch])
        except Exception as exc:  # the batch's own failure (unavailable): every caller's
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        finally:
            self._calling -= 1
        for (_, future), answer in zip(batch, answers, strict=True):
            if future.done():  # the caller gave up waiting; its write stands
                continue
            if isinstance(answer, BaseException):
                future.set_exception(answer)
            else:
                future.set_result(answer)

    async def _drain_queue(self) -> None:
        spares = self._spare_after_s is not None and self._max_writers > 1
        while self._queue:
            if spares and self._active > self._writers_wanted():
                return  # more writers than the stalled batches call for: the others go on
            if self._linger_s is not None:
                await self._linger()
            batch = self._take()
            if self._parts > 1:
                await asyncio.gather(*(self._call(part) for part in self._split(batch)))
                continue
            stall = _Stall()
            timer = (
                (self._call_later or asyncio.get_running_loop().call_later)(
                    self._spare_after_s, self._on_stall, stall
                )
                if spares and self._spare_after_s is not None
                else None
            )
            try:
                await self._call(batch)
            finally:
                if timer is not None:
                    timer.cancel()
                if stall.stalled:
                    self._stalled -= 1


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@dataclass(frozen=True, slots=True)
class WholeOrEach:
    """How :func:`whole_or_each` answers a failure of the whole batch's call.

    - ``again``: what a retry of the whole may cure (a deadlock, a race): the whole again after
      ``backoff_s`` × the attempt, ``on_again(attempt, error)`` first (a log line), up to
      ``attempts`` calls in all, then each item alone;
    - ``shared(error)``: whether each item alone would meet the same (the server away, a
      timeout): every item answers ``answer(error)``;
    - ``refused``: the batch refused (its content, say): each item alone; a batch of one
      answers ``answer(error)``, which it would meet again alone. Any other failure is raised:
      a defect, every caller's;
    - ``own``: what an item's own call may fail with: that item's answer, not its neighbours'
      (anything else raised stops the batch: a defect)."""

    attempts: int
    again: tuple[type[Exception], ...]
    shared: Callable[[Exception], bool]
    refused: tuple[type[Exception], ...]
    own: tuple[type[Exception], ...]
    answer: Callable[[Exception], Exception]
    on_again: Callable[[int, Exception], None]
    backoff_s: float = 0.005

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"whole_or_each needs attempts >= 1: {self.attempts}")


async def whole_or_each(
    items: Sequence[Item],
    whole: Callable[[], Awaitable[Sequence[Result]]],
    alone: Callable[[Item], Awaitable[Result]],
    how: WholeOrEach,
) -> list[Result | Exception]:
    """``whole()``'s answers (one per item, in order: a batch call for :class:`Coalescer`), or,
    when it fails, what ``how`` says: the whole again, one answer for all, or ``alone(item)``
    for each item in order, its own failure (``how.own``) its answer."""
    for attempt in range(1, how.attempts + 1):
        try:
            return list(await whole())
        except Exception as exc:
            if isinstance(exc, how.again):
                if attempt == how.attempts:
                    break  # still deadlocking: alone, each finds its own way
                how.on_again(attempt, exc)
                await asyncio.sleep(how.backoff_s * attempt)
                continue
            if how.shared(exc):  # each alone would meet the same
                return [how.answer(exc)] * len(items)
            if not isinstance(exc, how.refused):
                raise  # not the refusal of this batch: a defect, for every caller
            if len(items) == 1:
                return [how.answer(exc)]
            break
    return await _each_alone(items, alone, how.own)


async def _each_alone(
    items: Sequence[Item], alone: Callable[[Item], Awaitable[Result]], own: tuple[type[Exception], ...]
) -> list[Result | Exception]:
    answers: list[Result | Exception] = []
    for item in items:
        try:
            answer: Result | Exception = await alone(item)
        except own as failure:  # this one's own failure: its answer alone
            answer = failure
        answers.append(answer)
    return answers
