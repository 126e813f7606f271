"""core.consumer's batch mode (a prefetch of N, a worker per queue, one transaction a batch)
against the real PostgreSQL and RabbitMQ: repeats, a poison message among good ones, a database
outage mid-batch, order across batches, and a graceful stop."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import asyncpg
import pytest

from hiwallet.core.broker import Broker
from hiwallet.core.consumer import Consumer, ConsumerMetrics, IncomingMessage, Unprocessable
from tests.core import spine
from tests.core.test_consumer import (
    CONSUMER,
    EFFECTS,
    PROCESSED,
    Effects,
    _consuming,
    _count,
    _dead_lettered,
    _message,
    _metric,
    _pool,
    _until_count,
)
from tests.faultproxy import FaultProxy
from tests.waiting import until

# One wallet's messages: one key, hence one partition (one queue, one worker).
KEY = "0421:w:batch"


class BatchEffects(Effects):
    """Effects, in batches too; both ways log the handling order in spine.seen (committed with
    the effect), and a test may hold a batch (``hold``) until released."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[int]] = []
        self.hold: asyncio.Event | None = None
        self.inside = asyncio.Event()

    async def __call__(self, conn: asyncpg.Connection, message: IncomingMessage) -> Mapping[str, Any]:
        outcome = await super().__call__(conn, message)
        await conn.execute("INSERT INTO spine.seen (n) VALUES ($1)", message.body["n"])
        return outcome

    async def batch(
        self, conn: asyncpg.Connection, messages: Sequence[IncomingMessage]
    ) -> list[Mapping[str, Any]]:
        self.batches.append([m.body["n"] for m in messages])
        self.calls.extend(m.message_id for m in messages)
        if self.hold is not None and not self.hold.is_set():
            self.inside.set()
            await self.hold.wait()
        await conn.execute(
            "INSERT INTO spine.effects (message_id, n) SELECT * FROM unnest($1::text[], $2::int[])",
            [m.message_id for m in messages],
            [m.body["n"] for m in messages],
        )
        await conn.execute(
            "INSERT INTO spine.seen (n) SELECT unnest($1::int[])", [m.body["n"] for m in messages]
        )
        if self.fail is not None:
            for m in messages:
                self.fail(m)
        return [{"n": m.body["n"]} for m in messages]


def _batch_consumer(
    broker: Broker, pool: asyncpg.Pool, names: spine.Names, handler: BatchEffects, **kw: Any
) -> Consumer:
    options: dict[str, Any] = {"prefetch": 100, "max_batch": 100, **kw}
    return Consumer(
        broker=broker,
        pool=pool,
        queues=names.queues,
        consumer_name=CONSUMER,
        handler=handler,
        batch_handler=handler.batch,
        dead_letter_exchange=names.dlx,
        dead_letter_key=names.dead_key,
        table=spine.PROCESSED,
        metrics=ConsumerMetrics(),
        **options,
    )


@pytest.fixture
async def seen_db(spine_db: str) -> str:
    conn = await spine.owner_connect(spine_db)
    try:
        await conn.execute("CREATE TABLE spine.seen (seq bigserial PRIMARY KEY, n int NOT NULL)")
    finally:
        await conn.close()
    return spine_db


async def _seen(database: str) -> list[int]:
    conn = await spine.owner_connect(database)
    try:
        return [int(r["n"]) for r in await conn.fetch("SELECT n FROM spine.seen ORDER BY seq")]
    finally:
        await conn.close()


async def _queues_empty(broker: Broker, names: spine.Names) -> int:
    return sum([await spine.queue_depth(broker, q) for q in names.queues])


async def test_a_batch_with_repeats_inside_handles_each_message_once(
    seen_db: str, broker: Broker, names: spine.Names
) -> None:
    handler = BatchEffects()
    handler.hold = asyncio.Event()
    first = _message(names, key=KEY, n=0)
    rest = [_message(names, key=KEY, n=i) for i in range(1, 8)]
    async with _pool(seen_db) as pool:
        consumer = _batch_consumer(broker, pool, names, handler)
        async with _consuming(consumer):
            await broker.publish([first])
            await asyncio.wait_for(handler.inside.wait(), 10)
            # While the first batch is held, the next one gathers: new messages, one of them
            # twice, and the first one again (processed by then).
            await broker.publish([*rest[:3], rest[1], *rest[3:], first])
            await _until_buffered(consumer, 9)
            handler.hold.set()
            await _until_count(seen_db, PROCESSED, 8)
            await until(
                lambda: (
                    _metric(
                        consumer,
                        "hiwallet_consumer_messages_total",
                        queue=_queue(consumer),
                        outcome="duplicate",
                    )
                    >= 2
                ),
                10,
                "two duplicates counted",
            )
    assert handler.batches == [[0], [1, 2, 3, 4, 5, 6, 7]]  # the repeats never reach the handler
    assert sorted(handler.calls) == sorted(m.message_id for m in [first, *rest])
    assert await _count(seen_db, EFFECTS) == 8
    assert await _seen(seen_db) == list(range(8))
    assert await _queues_empty(broker, names) == 0


async def _until_buffered(consumer: Consumer, count: int) -> None:
    """Until ``count`` deliveries wait in the consumer's buffers (delivered, not yet taken)."""
    await until(
        lambda: sum(entry.buffer.qsize() for entry in consumer._consuming) == count,
        10,
        f"{count} deliveries buffered",
    )


def _queue(consumer: Consumer) -> str:
    for metric in consumer.metrics.registry.collect():
        for sample in metric.samples:
            if sample.name == "hiwallet_consumer_messages_total":
                return str(sample.labels["queue"])
    return "none"


@pytest.mark.parametrize("batch_turns", [False, True])
async def test_a_poison_message_is_dead_lettered_alone_and_its_neighbours_credited_in_order(
    seen_db: str, broker: Broker, names: spine.Names, batch_turns: bool
) -> None:
    handler = BatchEffects()
    handler.hold = asyncio.Event()

    def poison(message: IncomingMessage) -> None:
        if message.body["n"] == 5:
            raise Unprocessable("n=5 can never be handled")

    handler.fail = poison
    messages = [_message(names, key=KEY, n=i) for i in range(10)]
    async with _pool(seen_db) as pool:
        consumer = _batch_consumer(broker, pool, names, handler, max_attempts=2, batch_turns=batch_turns)
        async with _consuming(consumer):
            await broker.publish(messages[:1])
            await asyncio.wait_for(handler.inside.wait(), 10)
            await broker.publish(messages[1:])
            await _until_buffered(consumer, 9)
            handler.hold.set()
            await _until_count(seen_db, PROCESSED, 9)
            await until(lambda: _dead_lettered(broker, names.dlq), 10, "dead-lettered", interval_s=0.05)
            fallbacks = _metric(consumer, "hiwallet_consumer_batch_fallbacks_total", queue=_queue(consumer))
    assert handler.batches == [[0], list(range(1, 10))]
    assert fallbacks == 1
    # The batch rolled back; one at a time, the neighbours went through in order, n=5 alone was
    # tried max_attempts times and dead-lettered.
    assert await _seen(seen_db) == [0, 1, 2, 3, 4, 6, 7, 8, 9]
    assert await spine.queue_depth(broker, names.dlq) == 1
    dead = await spine.collect(broker, [names.dlq], 1)
    assert dead[0].message_id == messages[5].message_id
    assert dead[0].headers["x-hiwallet-dead-reason"] == "n=5 can never be handled"
    assert await _queues_empty(broker, names) == 0


@pytest.mark.parametrize("batch_turns", [False, True])
async def test_a_database_outage_mid_batch_dead_letters_nothing_and_credits_each_once(
    seen_db: str, broker: Broker, names: spine.Names, batch_turns: bool
) -> None:
    proxy = FaultProxy()
    await proxy.start()
    handler = BatchEffects()
    handler.hold = asyncio.Event()
    messages = [_message(names, key=KEY, n=i) for i in range(12)]
    try:
        async with _pool(seen_db, proxy.port) as pool:
            consumer = _batch_consumer(broker, pool, names, handler, max_attempts=1, batch_turns=batch_turns)
            async with _consuming(consumer):
                await broker.publish(messages[:6])
                await asyncio.wait_for(handler.inside.wait(), 10)  # a batch in its transaction
                async with proxy.down():  # PostgreSQL "restarts" under it
                    handler.hold.set()
                    await broker.publish(messages[6:])
                    await until(lambda: consumer.paused, 10, "the consumer paused")
                    assert await _count(seen_db, PROCESSED) == 0
                await _until_count(seen_db, PROCESSED, 12, timeout_s=30)
                assert not consumer.paused
        assert _metric(consumer, "hiwallet_consumer_pauses_total") >= 1
        assert await spine.queue_depth(broker, names.dlq) == 0  # max_attempts=1, yet nothing dead
        assert await _count(seen_db, EFFECTS) == 12
        assert await _seen(seen_db) == list(range(12))
        assert await _queues_empty(broker, names) == 0
    finally:
        await proxy.close()


async def test_order_holds_across_batch_boundaries(seen_db: str, broker: Broker, names: spine.Names) -> None:
    handler = BatchEffects()
    handler.hold = asyncio.Event()
    messages = [_message(names, key=KEY, n=i) for i in range(40)]
    async with _pool(seen_db) as pool:
        consumer = _batch_consumer(broker, pool, names, handler, max_batch=7)
        async with _consuming(consumer):
            await broker.publish(messages[:1])
            await asyncio.wait_for(handler.inside.wait(), 10)
            for i in range(1, 40, 5):  # in bursts, while the first batch is held
                await broker.publish(messages[i : i + 5])
            await _until_buffered(consumer, 39)
            handler.hold.set()
            await _until_count(seen_db, PROCESSED, 40)
    sizes = [len(b) for b in handler.batches]
    assert max(sizes) == 7 and len(sizes) >= 6, handler.batches  # batches, cut at max_batch
    assert [n for b in handler.batches for n in b] == list(range(40))
    assert await _seen(seen_db) == list(range(40))
    assert await _queues_empty(broker, names) == 0


@pytest.mark.parametrize("batch_turns", [False, True])
async def test_stop_finishes_the_batch_in_hand_and_gives_back_the_rest(
    seen_db: str, broker: Broker, names: spine.Names, batch_turns: bool
) -> None:
    handler = BatchEffects()
    handler.hold = asyncio.Event()
    messages = [_message(names, key=KEY, n=i) for i in range(6)]
    async with _pool(seen_db) as pool:
        consumer = _batch_consumer(broker, pool, names, handler, batch_turns=batch_turns)
        task = asyncio.create_task(consumer.run())
        await asyncio.wait_for(consumer.wait_started(), 10)
        await broker.publish(messages[:1])
        await asyncio.wait_for(handler.inside.wait(), 10)
        await broker.publish(messages[1:])
        await _until_buffered(consumer, 5)  # delivered into the buffer, not yet taken
        await consumer.stop()
        handler.hold.set()
        await asyncio.wait_for(task, 20)
    assert handler.batches == [[0]]
    assert await _seen(seen_db) == [0]
    # The batch in hand committed and acked; the buffered ones went back to their queue.
    assert await _queues_empty(broker, names) == 5


async def test_a_prefetch_above_one_without_a_batch_handler_keeps_the_order(
    seen_db: str, broker: Broker, names: spine.Names
) -> None:
    """The single-message API with a prefetch of N (no batch handler): the queue's worker
    handles one message at a time, in delivery order, each in its own transaction."""
    handler = BatchEffects()
    release = asyncio.Event()
    inside = asyncio.Event()
    original = handler.__call__

    async def held_first(conn: asyncpg.Connection, message: IncomingMessage) -> Mapping[str, Any]:
        if not release.is_set():
            inside.set()
            await release.wait()
        return await original(conn, message)

    messages = [_message(names, key=KEY, n=i) for i in range(20)]
    async with _pool(seen_db) as pool:
        consumer = Consumer(
            broker=broker,
            pool=pool,
            queues=names.queues,
            consumer_name=CONSUMER,
            handler=held_first,
            dead_letter_exchange=names.dlx,
            dead_letter_key=names.dead_key,
            table=spine.PROCESSED,
            prefetch=50,
        )
        assert consumer.pipelined and consumer.max_batch == 1
        async with _consuming(consumer):
            await broker.publish(messages[:1])
            await asyncio.wait_for(inside.wait(), 10)
            await broker.publish(messages[1:])
            await _until_buffered(consumer, 19)
            release.set()
            await _until_count(seen_db, PROCESSED, 20)
    assert handler.batches == []
    assert await _seen(seen_db) == list(range(20))
    assert await _queues_empty(broker, names) == 0


class OverlapEffects(BatchEffects):
    """Counts the batches in the handler at once, and which queues each batch came from."""

    def __init__(self) -> None:
        super().__init__()
        self.now_inside = 0
        self.most_inside = 0
        self.queues: set[str] = set()
        self.batch_queues: list[set[str]] = []

    async def batch(
        self, conn: asyncpg.Connection, messages: Sequence[IncomingMessage]
    ) -> list[Mapping[str, Any]]:
        self.now_inside += 1
        self.most_inside = max(self.most_inside, self.now_inside)
        self.queues.update(m.queue for m in messages)
        self.batch_queues.append({m.queue for m in messages})
        try:
            await asyncio.sleep(0.05)  # room for another queue's worker to come in
            return await super().batch(conn, messages)
        finally:
            self.now_inside -= 1


@pytest.mark.parametrize(("batch_turns", "most_inside"), [(True, 1), (False, 2)])
async def test_batch_turns_one_transaction_at_a_time_for_every_queue_and_each_keys_order(
    seen_db: str, broker: Broker, names: spine.Names, batch_turns: bool, most_inside: int
) -> None:
    # 20 wallets over the 2 partitions, 5 messages each, published in rounds.
    handler = OverlapEffects()
    keys = [f"0421:w:turns-{k}" for k in range(20)]
    messages = [_message(names, key=keys[k], n=r * 100 + k) for r in range(5) for k in range(20)]
    async with _pool(seen_db) as pool:
        consumer = _batch_consumer(broker, pool, names, handler, max_batch=10, batch_turns=batch_turns)
        async with _consuming(consumer):
            for r in range(5):
                await broker.publish(messages[r * 20 : (r + 1) * 20])
            await _until_count(seen_db, PROCESSED, 100)
    assert handler.queues == set(names.queues)  # both partitions had batches
    # In turns, never two batches at once, and a batch takes what both partitions hold (one
    # transaction for both); without, each partition's worker has its own, and they overlap.
    assert handler.most_inside == most_inside
    assert any(len(queues) == 2 for queues in handler.batch_queues) == batch_turns
    seen = await _seen(seen_db)
    for k in range(20):  # each wallet's messages in the order published
        assert [n for n in seen if n % 100 == k] == [r * 100 + k for r in range(5)]
    assert await _queues_empty(broker, names) == 0
