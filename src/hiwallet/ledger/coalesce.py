"""Concurrent plain postings share one round trip and one commit.

When many callers post at once, each posting alone pays a round trip, a statement and a commit
(a WAL flush) that cost more than the posting itself. The coalescer queues plain postings (no
promo, hold or refund options) and a few writers drain the queue through the set-based
``ledger.post_many``, up to ``max_batch`` at a time. A caller still awaits its own answer, and
the answer is the one it would get alone (``tests/ledger/test_concurrency_and_faults.py``).

What changes for a caller: its posting commits together with its neighbours'. If the commit
fails, every posting of that batch fails with ``LedgerUnavailable``, and each may be retried
with its id, as after any failure. A posting that fails inside a batch for any reason but a
refusal makes the batch post one posting at a time, so it cannot take its neighbours down.

Why writers cannot deadlock: ``post_many`` locks every account of its batch in one statement in
(bucket, id) order, the same global order as ``ledger.post``; no lock is taken later.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence

from hiwallet.ledger.errors import LedgerError
from hiwallet.ledger.model import Posting, PostResult

BatchPoster = Callable[[Sequence[Posting]], Awaitable[list[PostResult | LedgerError]]]


class Coalescer:
    def __init__(self, post_batch: BatchPoster, *, writers: int, max_batch: int) -> None:
        assert writers >= 1 and max_batch >= 1
        self._post_batch = post_batch
        self._queue: deque[tuple[Posting, asyncio.Future[PostResult]]] = deque()
        self._max_writers = writers
        self._max_batch = max_batch
        self._active = 0  # writers draining now
        self._tasks: set[asyncio.Task[None]] = set()  # references, so none is collected mid-flight

    async def post(self, posting: Posting) -> PostResult:
        future: asyncio.Future[PostResult] = asyncio.get_running_loop().create_future()
        self._queue.append((posting, future))
        if self._active < self._max_writers:
            # Counted here and uncounted in _drain in the same step that sees the queue empty
            # (no await between): a task that has finished draining but not yet been reaped
            # must not be taken for a writer, or a posting could wait in the queue for ever.
            self._active += 1
            task = asyncio.create_task(self._drain())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await future

    async def _drain(self) -> None:
        try:
            await self._drain_queue()
        finally:
            self._active -= 1

    async def _drain_queue(self) -> None:
        while self._queue:
            batch = [self._queue.popleft() for _ in range(min(len(self._queue), self._max_batch))]
            try:
                answers = await self._post_batch([posting for posting, _ in batch])
            except Exception as exc:  # the batch's own failure (unavailable): every caller's
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, future), answer in zip(batch, answers, strict=True):
                if future.done():  # the caller gave up waiting; its posting stands
                    continue
                if isinstance(answer, LedgerError):
                    future.set_exception(answer)
                else:
                    future.set_result(answer)
