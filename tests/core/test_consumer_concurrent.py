"""core.consumer's ``concurrency`` (the single path, out of order) against the real PostgreSQL and
RabbitMQ, on a quorum queue without a single active consumer (as the withdrawal saga's)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import asyncpg
import orjson
import pytest

from hiwallet.core.broker import (
    DELIVERY_LIMIT,
    Broker,
    ExchangeSpec,
    OutgoingMessage,
    QueueSpec,
    Topology,
    dead_letter_topology,
)
from hiwallet.core.consumer import (
    MAX_BATCH,
    Consumer,
    ConsumerMetrics,
    IncomingMessage,
    Unprocessable,
    batched_or_concurrent,
)
from hiwallet.core.ids import new_id
from tests.core import spine
from tests.core.test_consumer import _consuming, _count, _dead_lettered, _metric, _pool, _until_count
from tests.faultproxy import FaultProxy
from tests.waiting import stays, until

CONSUMER = "test-concurrent"
PROCESSED = f"SELECT count(*) FROM {spine.PROCESSED}"
EFFECTS = "SELECT count(*) FROM spine.effects"


class Unordered:
    """One test's direct exchange, one quorum queue (no single active consumer) and its dead
    letters."""

    def __init__(self, names: spine.Names) -> None:
        self.exchange = f"{names.prefix}.saga"
        self.queue = f"{names.prefix}.saga.q"
        self.dlx, self.dead_key, self.dlq = names.dlx, names.dead_key, names.dlq

    def topology(self) -> Topology:
        arguments = {
            "x-queue-type": "quorum",
            "x-delivery-limit": DELIVERY_LIMIT,
            "x-dead-letter-exchange": self.dlx,
            "x-dead-letter-routing-key": self.dead_key,
        }
        own = Topology(
            exchanges=(ExchangeSpec(self.exchange, "direct"),),
            queues=(QueueSpec(self.queue, arguments, ((self.exchange, "cmd"),)),),
        )
        return own + dead_letter_topology(self.dlx, self.dlq, self.dead_key)


@pytest.fixture
async def saga(broker: Broker) -> AsyncIterator[Unordered]:
    # The dead-letter queue's name comes from a Names of its own, never declared as partitions.
    u = Unordered(spine.Names())
    await broker.declare(u.topology())
    yield u
    await broker.delete(u.topology())


def _message(u: Unordered, n: int) -> OutgoingMessage:
    return OutgoingMessage(
        message_id=new_id(),
        exchange=u.exchange,
        routing_key="cmd",
        type="Command",
        body=orjson.dumps({"n": n}),
    )


async def _effect(conn: asyncpg.Connection, message: IncomingMessage) -> Mapping[str, Any]:
    await conn.execute(
        "INSERT INTO spine.effects (message_id, n) VALUES ($1, $2)", message.message_id, message.body["n"]
    )
    return {"n": message.body["n"]}


def _consumer(broker: Broker, pool: asyncpg.Pool, u: Unordered, handler: Any, n: int, **kw: Any) -> Consumer:
    return Consumer(
        broker=broker,
        pool=pool,
        queues=[u.queue],
        consumer_name=CONSUMER,
        handler=handler,
        dead_letter_exchange=u.dlx,
        dead_letter_key=u.dead_key,
        table=spine.PROCESSED,
        metrics=ConsumerMetrics(),
        prefetch=kw.pop("prefetch", n),
        concurrency=n,
        **kw,
    )


async def test_n_messages_are_handled_at_once(spine_db: str, broker: Broker, saga: Unordered) -> None:
    # Four handlers meet at a barrier inside their transactions: one at a time, the first would
    # wait there for ever (the barrier's timeout fails its attempts, then dead-letters it).
    barrier = asyncio.Barrier(4)
    seen: list[str] = []

    async def together(conn: asyncpg.Connection, message: IncomingMessage) -> Mapping[str, Any]:
        seen.append(message.message_id)
        outcome = await _effect(conn, message)
        async with asyncio.timeout(5):
            await barrier.wait()
        return outcome

    async with _pool(spine_db, max_size=6) as pool:
        consumer = _consumer(broker, pool, saga, together, 4, max_attempts=1)
        async with _consuming(consumer):
            await broker.publish([_message(saga, i) for i in range(4)])
            await _until_count(spine_db, PROCESSED, 4)
    assert len(seen) == 4  # each once: none failed at the barrier
    assert await _count(spine_db, EFFECTS) == 4
    assert await spine.queue_depth(broker, saga.queue) == 0
    assert await spine.queue_depth(broker, saga.dlq) == 0
    assert _metric(consumer, "hiwallet_consumer_messages_total", queue=saga.queue, outcome="processed") == 4


async def test_each_message_is_acked_after_its_own_commit_in_any_order(
    spine_db: str, broker: Broker, saga: Unordered
) -> None:
    # The first message waits inside its transaction until the second one is acked: the second
    # is acked alone (not with, nor after, the first), and only once its row is committed.
    acks: list[tuple[int, int]] = []  # (n, its processed_events rows seen from outside at the ack)
    second_acked = asyncio.Event()
    first_inside = asyncio.Event()

    async def held(conn: asyncpg.Connection, message: IncomingMessage) -> Mapping[str, Any]:
        outcome = await _effect(conn, message)
        if message.body["n"] == 0:
            first_inside.set()
            async with asyncio.timeout(10):
                await second_acked.wait()
        return outcome

    class Watching(Consumer):
        async def _ack(self, queue: str, message: Any, outcome: str) -> None:
            committed = await _count(
                spine_db, f"SELECT count(*) FROM {spine.PROCESSED} WHERE message_id = $1", message.message_id
            )
            await super()._ack(queue, message, outcome)
            n = orjson.loads(message.body)["n"]
            acks.append((n, committed))
            if n == 1:
                second_acked.set()

    async with _pool(spine_db, max_size=4) as pool:
        consumer = Watching(
            broker=broker,
            pool=pool,
            queues=[saga.queue],
            consumer_name=CONSUMER,
            handler=held,
            dead_letter_exchange=saga.dlx,
            dead_letter_key=saga.dead_key,
            table=spine.PROCESSED,
            max_attempts=1,
            prefetch=2,
            concurrency=2,
        )
        async with _consuming(consumer):
            await broker.publish([_message(saga, 0)])
            await asyncio.wait_for(first_inside.wait(), 10)
            await broker.publish([_message(saga, 1)])
            await _until_count(spine_db, PROCESSED, 2)
    assert acks == [(1, 1), (0, 1)]
    assert await spine.queue_depth(broker, saga.queue) == 0
    assert await spine.queue_depth(broker, saga.dlq) == 0


async def test_an_outage_pauses_every_handler_once_and_dead_letters_nothing(
    spine_db: str, broker: Broker, saga: Unordered
) -> None:
    proxy = FaultProxy()
    await proxy.start()
    try:
        async with _pool(spine_db, proxy.port, max_size=6) as pool:
            consumer = _consumer(broker, pool, saga, _effect, 4, max_attempts=1)
            async with _consuming(consumer):
                await broker.publish([_message(saga, 0)])
                await _until_count(spine_db, PROCESSED, 1)
                async with proxy.down():
                    await broker.publish([_message(saga, i) for i in range(1, 9)])
                    await until(lambda: consumer.paused, 10, "the consumer paused")
                    # and stays so while the database is away: the other handlers' failures
                    # (the same outage) neither end the pause nor pause again
                    await stays(lambda: consumer.paused, 0.5, "paused")
                    assert await _count(spine_db, PROCESSED) == 1
                await _until_count(spine_db, PROCESSED, 9, timeout_s=20)
                assert not consumer.paused
        # Every handler in hand failed for the same outage: one pause, one probe's wait.
        assert _metric(consumer, "hiwallet_consumer_pauses_total") == 1
        assert await spine.queue_depth(broker, saga.dlq) == 0  # max_attempts=1, nothing counted
        assert await _count(spine_db, EFFECTS) == 9
    finally:
        await proxy.close()


async def test_a_bad_message_is_retried_and_dead_lettered_alone(
    spine_db: str, broker: Broker, saga: Unordered
) -> None:
    calls: dict[int, int] = {}

    async def picky(conn: asyncpg.Connection, message: IncomingMessage) -> Mapping[str, Any]:
        n = message.body["n"]
        calls[n] = calls.get(n, 0) + 1
        outcome = await _effect(conn, message)
        if n == 2:
            raise Unprocessable("n = 2 can never be handled")
        return outcome

    async with _pool(spine_db, max_size=6) as pool:
        consumer = _consumer(broker, pool, saga, picky, 4, max_attempts=3)
        async with _consuming(consumer):
            await broker.publish([_message(saga, i) for i in range(6)])
            await _until_count(spine_db, PROCESSED, 5)
            await until(lambda: _dead_lettered(broker, saga.dlq), 10, "dead-lettered", interval_s=0.05)
    assert calls == {0: 1, 1: 1, 2: 3, 3: 1, 4: 1, 5: 1}
    assert await _count(spine_db, EFFECTS) == 5  # the bad one's attempts rolled back
    assert await spine.queue_depth(broker, saga.dlq) == 1
    assert await spine.queue_depth(broker, saga.queue) == 0


async def test_stop_waits_for_every_handler_in_hand(spine_db: str, broker: Broker, saga: Unordered) -> None:
    inside = 0
    all_inside = asyncio.Event()

    async def slow(conn: asyncpg.Connection, message: IncomingMessage) -> Mapping[str, Any]:
        nonlocal inside
        outcome = await _effect(conn, message)
        inside += 1
        if inside == 3:
            all_inside.set()
        # Slow handlers (the behaviour under test): three in hand when stop comes.
        await asyncio.sleep(0.5)
        return outcome

    async with _pool(spine_db, max_size=5) as pool:
        consumer = _consumer(broker, pool, saga, slow, 3)
        task = asyncio.create_task(consumer.run())
        await asyncio.wait_for(consumer.wait_started(), 10)
        await broker.publish([_message(saga, i) for i in range(3)])
        await asyncio.wait_for(all_inside.wait(), 10)
        await consumer.stop()
        await asyncio.wait_for(task, 10)
    assert await _count(spine_db, PROCESSED) == 3
    assert await spine.queue_depth(broker, saga.queue) == 0  # all three acked before the close


async def test_concurrency_refused_where_order_matters(
    spine_db: str, broker: Broker, names: spine.Names, saga: Unordered
) -> None:
    async def batch(conn: asyncpg.Connection, messages: Any) -> list[Mapping[str, Any]]:
        return [{} for _ in messages]

    async with _pool(spine_db, max_size=2) as pool:
        with pytest.raises(ValueError, match="batch handler"):
            _consumer(broker, pool, saga, _effect, 4, batch_handler=batch)
        with pytest.raises(ValueError, match="prefetch"):
            _consumer(broker, pool, saga, _effect, 4, prefetch=2)
        with pytest.raises(ValueError, match="concurrency must be"):
            _consumer(broker, pool, saga, _effect, 0)
        # The partitions (declared by this broker) are single-active-consumer: their order matters.
        with pytest.raises(ValueError, match="single-active-consumer"):
            Consumer(
                broker=broker,
                pool=pool,
                queues=names.queues,
                consumer_name=CONSUMER,
                handler=_effect,
                dead_letter_exchange=names.dlx,
                dead_letter_key=names.dead_key,
                table=spine.PROCESSED,
                prefetch=4,
                concurrency=4,
            )
        # concurrency 1 on them is what it always was.
        Consumer(
            broker=broker,
            pool=pool,
            queues=names.queues,
            consumer_name=CONSUMER,
            handler=_effect,
            dead_letter_exchange=names.dlx,
            dead_letter_key=names.dead_key,
            table=spine.PROCESSED,
        )


async def test_batched_or_concurrent_chooses_the_path_and_a_negative_batch_is_refused(
    spine_db: str, broker: Broker, saga: Unordered
) -> None:
    """The withdrawal saga's consumers are built with batched_or_concurrent(their batch setting,
    their concurrency setting): a batch of N, the single path at 0, and a misconfigured batch
    refused at construction (the service does not start), not quietly taken as 0."""

    async def batch(conn: asyncpg.Connection, messages: Any) -> list[Mapping[str, Any]]:
        return [{} for _ in messages]

    def build(max_batch: int) -> Consumer:
        return Consumer(
            broker=broker,
            pool=pool,
            queues=[saga.queue],
            consumer_name=CONSUMER,
            handler=_effect,
            dead_letter_exchange=saga.dlx,
            dead_letter_key=saga.dead_key,
            table=spine.PROCESSED,
            **batched_or_concurrent(batch, max_batch, 16),
        )

    async with _pool(spine_db, max_size=2) as pool:
        batched = build(32)
        assert (batched.max_batch, batched.prefetch, batched.concurrency) == (32, 64, 1)
        single = build(0)
        assert (single.max_batch, single.prefetch, single.concurrency) == (1, 16, 16)
        for wrong in (-1, MAX_BATCH + 1):
            with pytest.raises(ValueError, match="max_batch"):
                build(wrong)


class ServiceUnavailable(Exception):
    """A service's own "unavailable" (registered as transient)."""


async def test_a_failure_of_an_outage_already_waited_out_does_not_pause_again(
    spine_db: str, broker: Broker, saga: Unordered
) -> None:
    # Two attempts begin together; the first fails transiently and its probe sees the database
    # answer (one pause); the second fails only then, for the same outage: it tries again at
    # once instead of pausing every handler a second time.
    barrier = asyncio.Barrier(2)
    attempts: dict[int, int] = {}
    consumer: Consumer | None = None

    async def flaky(conn: asyncpg.Connection, message: IncomingMessage) -> Mapping[str, Any]:
        n = message.body["n"]
        attempts[n] = attempts.get(n, 0) + 1
        if attempts[n] == 1:
            async with asyncio.timeout(5):
                await barrier.wait()
            if n == 1:
                assert consumer is not None
                await until(
                    lambda: _metric(consumer, "hiwallet_consumer_pauses_total") >= 1 and not consumer.paused,
                    5,
                    "the first handler's pause ended",
                    interval_s=0.01,
                )
            raise ServiceUnavailable("unavailable")
        return await _effect(conn, message)

    async with _pool(spine_db, max_size=4) as pool:
        consumer = _consumer(
            broker, pool, saga, flaky, 2, max_attempts=1, transient_errors=(ServiceUnavailable,)
        )
        async with _consuming(consumer):
            await broker.publish([_message(saga, 0), _message(saga, 1)])
            await _until_count(spine_db, PROCESSED, 2)
    assert attempts == {0: 2, 1: 2}
    assert _metric(consumer, "hiwallet_consumer_pauses_total") == 1
    assert await spine.queue_depth(broker, saga.dlq) == 0
