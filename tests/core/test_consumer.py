"""core.consumer and core.deadletters against the real PostgreSQL and RabbitMQ."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import orjson
import pytest

from hiwallet.core.broker import Broker, BrokerError, OutgoingMessage
from hiwallet.core.consumer import Consumer, ConsumerMetrics, Handler, IncomingMessage, Unprocessable
from hiwallet.core.deadletters import list_dead_letters, replay_dead_letters
from hiwallet.core.ids import new_id
from hiwallet.core.settings import get_settings
from tests.core import spine
from tests.faultproxy import FaultProxy
from tests.waiting import until

CONSUMER = "test-consumer"


def _message(
    names: spine.Names, key: str = "0421:w:1", n: int = 1, message_id: str | None = None
) -> OutgoingMessage:
    return OutgoingMessage(
        message_id=message_id or new_id(),
        exchange=names.exchange,
        routing_key=key,
        type="TopupRecorded",
        body=orjson.dumps({"n": n}),
        headers={"x-request-id": "req-consumer"},
    )


class Effects:
    """The handler of the tests: one row in spine.effects per message, in its transaction."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.fail: Callable[[IncomingMessage], None] | None = None

    async def __call__(self, conn: asyncpg.Connection, message: IncomingMessage) -> Mapping[str, Any]:
        self.calls.append(message.message_id)
        await conn.execute(
            "INSERT INTO spine.effects (message_id, n) VALUES ($1, $2)", message.message_id, message.body["n"]
        )
        if self.fail is not None:
            self.fail(message)
        return {"n": message.body["n"], "request_id": message.headers.get("x-request-id")}


@asynccontextmanager
async def _pool(database: str, port: int = 5432, *, max_size: int = 3) -> AsyncIterator[asyncpg.Pool]:
    pool = await asyncpg.create_pool(
        spine.dsn_via(database, port),
        min_size=1,
        max_size=max_size,
        command_timeout=5,
        timeout=2,
        server_settings={"application_name": "consumer-pool"},
    )
    try:
        yield pool
    finally:
        pool.terminate()


@asynccontextmanager
async def _consuming(consumer: Consumer) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(consumer.run())
    await asyncio.wait_for(consumer.wait_started(), 10)
    try:
        yield task
    finally:
        await consumer.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 40)


def _consumer(
    broker: Broker, pool: asyncpg.Pool, names: spine.Names, handler: Handler, **kw: Any
) -> Consumer:
    """The consumer of the spine's queues with ``handler`` (the tests of this module, and
    test_tracing's); ``kw`` the options a test sets (attempts, batch mode...)."""
    return Consumer(
        broker=broker,
        pool=pool,
        queues=names.queues,
        consumer_name=CONSUMER,
        handler=handler,
        dead_letter_exchange=names.dlx,
        dead_letter_key=names.dead_key,
        table=spine.PROCESSED,
        metrics=ConsumerMetrics(),
        **kw,
    )


async def _count(database: str, sql: str, *args: Any) -> int:
    conn = await spine.owner_connect(database)
    try:
        return int(await conn.fetchval(sql, *args))
    finally:
        await conn.close()


async def _until_count(database: str, sql: str, expected: int, timeout_s: float = 15.0) -> None:
    async def reached() -> bool:
        return await _count(database, sql) == expected

    await until(reached, timeout_s, f"{sql} = {expected}")


EFFECTS = "SELECT count(*) FROM spine.effects"
PROCESSED = f"SELECT count(*) FROM {spine.PROCESSED}"


async def _until_depth(broker: Broker, queue: str, expected: int, timeout_s: float = 10.0) -> None:
    async def reached() -> bool:
        return await spine.queue_depth(broker, queue) == expected

    await until(reached, timeout_s, f"{queue} holding {expected} messages", interval_s=0.05)


async def _dead_lettered(broker: Broker, queue: str) -> bool:
    return await spine.queue_depth(broker, queue) >= 1


async def _cli(*args: str) -> str:
    """`hiwallet dead-letters ...` in its own process, as an operator runs it."""
    process = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "hiwallet"),
        "dead-letters",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "COLUMNS": "400"},
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()[-2000:]
    return out.decode()


def _metric(consumer: Consumer, name: str, **labels: str) -> float:
    value = consumer.metrics.registry.get_sample_value(name, labels)
    return value or 0.0


async def test_processed_once_in_one_transaction_and_a_repeat_is_acked(
    spine_db: str, broker: Broker, names: spine.Names
) -> None:
    handler = Effects()
    messages = [_message(names, key=f"w{i}", n=i) for i in range(3)]
    async with _pool(spine_db) as pool:
        consumer = _consumer(broker, pool, names, handler)
        async with _consuming(consumer):
            await broker.publish(messages)
            await _until_count(spine_db, PROCESSED, 3)
            # The relay's at-least-once: the same message again.
            await broker.publish([messages[0]])
            await until(
                lambda: (
                    _metric(
                        consumer,
                        "hiwallet_consumer_messages_total",
                        queue=_queue_of(consumer),
                        outcome="duplicate",
                    )
                    >= 1
                ),
                10,
                "the repeat counted as a duplicate",
            )
        conn = await spine.owner_connect(spine_db)
        try:
            rows = await conn.fetch(
                f"SELECT message_id, outcome::text FROM {spine.PROCESSED} ORDER BY message_id"
            )
        finally:
            await conn.close()
    assert sorted(handler.calls) == sorted(m.message_id for m in messages)  # not called for the repeat
    assert await _count(spine_db, EFFECTS) == 3
    assert {orjson.loads(r["outcome"])["request_id"] for r in rows} == {"req-consumer"}


def _queue_of(consumer: Consumer) -> str:
    # Every key of these tests lands on some partition; the duplicate is counted on its own.
    samples = consumer.metrics.registry.collect()
    for metric in samples:
        for sample in metric.samples:
            if (
                sample.name == "hiwallet_consumer_messages_total"
                and sample.labels.get("outcome") == "duplicate"
            ):
                return sample.labels["queue"]
    return "none"


async def test_a_failed_attempt_leaves_nothing_behind(
    spine_db: str, broker: Broker, names: spine.Names
) -> None:
    handler = Effects()

    def once(message: IncomingMessage) -> None:
        if handler.calls.count(message.message_id) == 1:
            raise RuntimeError("a race that passes")

    handler.fail = once
    message = _message(names)
    async with _pool(spine_db) as pool:
        consumer = _consumer(broker, pool, names, handler)
        async with _consuming(consumer):
            await broker.publish([message])
            await _until_count(spine_db, PROCESSED, 1)
    # The first attempt's effect rolled back with its processed_events row: the second did it.
    assert handler.calls == [message.message_id, message.message_id]
    assert await _count(spine_db, EFFECTS) == 1
    assert await spine.queue_depth(broker, names.dlq) == 0


async def test_a_database_outage_pauses_without_dead_lettering(
    spine_db: str, broker: Broker, names: spine.Names
) -> None:
    proxy = FaultProxy()
    await proxy.start()
    handler = Effects()
    messages = [_message(names, key=f"w{i}", n=i) for i in range(4)]
    try:
        async with _pool(spine_db, proxy.port) as pool:
            consumer = _consumer(broker, pool, names, handler, max_attempts=2)
            async with _consuming(consumer):
                await broker.publish(messages[:1])
                await _until_count(spine_db, PROCESSED, 1)
                async with proxy.down():  # PostgreSQL "restarts": connections cut, new ones refused
                    await broker.publish(messages[1:])
                    await until(lambda: consumer.paused, 10, "the consumer paused")
                    assert await _count(spine_db, PROCESSED) == 1
                await _until_count(spine_db, PROCESSED, 4, timeout_s=20)
                assert not consumer.paused
        assert _metric(consumer, "hiwallet_consumer_pauses_total") >= 1
        assert await spine.queue_depth(broker, names.dlq) == 0  # no good message dead-lettered
        assert await _count(spine_db, EFFECTS) == 4
    finally:
        await proxy.close()


async def test_backends_terminated_mid_message_retry_it(
    spine_db: str, broker: Broker, names: spine.Names
) -> None:
    handler = Effects()
    inside = asyncio.Event()
    release = asyncio.Event()
    original = handler.__call__

    async def slow(conn: asyncpg.Connection, message: IncomingMessage) -> Mapping[str, Any]:
        outcome = await original(conn, message)
        if len(handler.calls) == 1:
            inside.set()
            await release.wait()
        return outcome

    message = _message(names)
    async with _pool(spine_db) as pool:
        consumer = Consumer(
            broker=broker,
            pool=pool,
            queues=names.queues,
            consumer_name=CONSUMER,
            handler=slow,
            dead_letter_exchange=names.dlx,
            dead_letter_key=names.dead_key,
            table=spine.PROCESSED,
            max_attempts=1,
        )
        async with _consuming(consumer):
            await broker.publish([message])
            await asyncio.wait_for(inside.wait(), 10)
            admin = await spine.owner_connect(spine_db)
            try:  # as a shutting-down server does (57P01 admin_shutdown)
                await admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE application_name = 'consumer-pool'"
                )
            finally:
                await admin.close()
            release.set()
            await _until_count(spine_db, PROCESSED, 1)
    assert handler.calls == [message.message_id, message.message_id]  # max_attempts=1, yet retried
    assert await _count(spine_db, EFFECTS) == 1
    assert await spine.queue_depth(broker, names.dlq) == 0


@pytest.mark.parametrize("via_cli", [False, True], ids=["module", "cli"])
async def test_unprocessable_is_dead_lettered_listed_and_replayed(
    spine_db: str, broker: Broker, names: spine.Names, via_cli: bool
) -> None:
    handler = Effects()
    broken = {"yes": True}

    def refuse(message: IncomingMessage) -> None:
        if broken["yes"]:
            raise Unprocessable("no clearing account for XYZ")

    handler.fail = refuse
    poison = _message(names, key="0421:w:poison", n=7)
    async with _pool(spine_db) as pool:
        consumer = _consumer(broker, pool, names, handler, max_attempts=3)
        async with _consuming(consumer):
            await broker.publish([poison])
            await until(lambda: _dead_lettered(broker, names.dlq), 15, "dead-lettered", interval_s=0.05)
            assert handler.calls == [poison.message_id] * 3  # bounded attempts
            assert await _count(spine_db, EFFECTS) == 0  # each attempt rolled back
            assert await _count(spine_db, PROCESSED) == 0
            assert _metric(consumer, "hiwallet_dead_letters_total", reason="unprocessable") == 1

            # Listing twice loses nothing.
            for _ in range(2):
                (letter,) = await list_dead_letters(broker, names.dlq, limit=10)
                assert letter.message_id == poison.message_id
                assert letter.reason == "no clearing account for XYZ"
                assert letter.original_exchange == names.exchange
                assert letter.original_routing_key == "0421:w:poison"
                assert letter.attempts == "3"
                assert letter.type == "TopupRecorded"
            await _until_depth(broker, names.dlq, 1)  # given back (asynchronously, in a quorum queue)

            # The operator's command shows it too, and leaves it.
            listed = await _cli("list", "--queue", names.dlq)
            assert poison.message_id in listed and "no clearing account for XYZ" in listed
            await _until_depth(broker, names.dlq, 1)

            broken["yes"] = False  # the cause fixed
            assert await replay_dead_letters(broker, names.dlq, message_id="not-there") == []
            if via_cli:
                replayed = await _cli("replay", "--queue", names.dlq, "--id", poison.message_id)
                assert poison.message_id in replayed
            else:
                (letter,) = await replay_dead_letters(broker, names.dlq, message_id=poison.message_id)
                assert letter.replayed
            await _until_count(spine_db, PROCESSED, 1)
        assert await spine.queue_depth(broker, names.dlq) == 0
        assert await _count(spine_db, EFFECTS) == 1


async def test_a_malformed_message_is_dead_lettered_at_once(
    spine_db: str, broker: Broker, names: spine.Names
) -> None:
    handler = Effects()
    async with _pool(spine_db) as pool:
        consumer = _consumer(broker, pool, names, handler)
        async with _consuming(consumer):
            bad = OutgoingMessage(new_id(), names.exchange, "w1", "TopupRecorded", b"not json")
            await broker.publish([bad])
            await until(lambda: _dead_lettered(broker, names.dlq), 10, "dead-lettered", interval_s=0.05)
    (letter,) = await list_dead_letters(broker, names.dlq)
    assert letter.message_id == bad.message_id
    assert letter.reason.startswith("malformed")
    assert handler.calls == []


async def test_stop_finishes_the_message_in_hand(spine_db: str, broker: Broker, names: spine.Names) -> None:
    handler = Effects()
    inside = asyncio.Event()
    original = handler.__call__

    async def slow(conn: asyncpg.Connection, message: IncomingMessage) -> Mapping[str, Any]:
        inside.set()
        # A slow handler (the behaviour under test): the message is in hand when stop comes.
        await asyncio.sleep(0.5)
        return await original(conn, message)

    async with _pool(spine_db) as pool:
        consumer = Consumer(
            broker=broker,
            pool=pool,
            queues=names.queues,
            consumer_name=CONSUMER,
            handler=slow,
            dead_letter_exchange=names.dlx,
            dead_letter_key=names.dead_key,
            table=spine.PROCESSED,
        )
        task = asyncio.create_task(consumer.run())
        await consumer.wait_started()
        await broker.publish([_message(names)])
        await asyncio.wait_for(inside.wait(), 10)
        await consumer.stop()
        await asyncio.wait_for(task, 10)
    assert await _count(spine_db, PROCESSED) == 1
    # Acked before the channels closed: nothing left in the queues.
    assert sum([await spine.queue_depth(broker, q) for q in names.queues]) == 0


class ServiceUnavailable(Exception):
    """A service's own "unavailable" (as the ledger's LedgerUnavailable)."""


async def test_a_registered_transient_error_pauses_and_retries(
    spine_db: str, broker: Broker, names: spine.Names
) -> None:
    handler = Effects()

    def unavailable_twice(message: IncomingMessage) -> None:
        if len(handler.calls) <= 2:
            raise ServiceUnavailable("the ledger is unavailable")

    handler.fail = unavailable_twice
    async with _pool(spine_db) as pool:
        consumer = _consumer(
            broker, pool, names, handler, max_attempts=1, transient_errors=(ServiceUnavailable,)
        )
        async with _consuming(consumer):
            await broker.publish([_message(names)])
            await _until_count(spine_db, PROCESSED, 1)
    assert len(handler.calls) == 3  # max_attempts=1, yet retried: no attempt counted
    assert await spine.queue_depth(broker, names.dlq) == 0


async def test_the_consumer_waits_for_rabbitmq_at_start(
    spine_db: str, broker: Broker, names: spine.Names
) -> None:
    proxy = FaultProxy(upstream_port=5672)
    await proxy.start()
    url = get_settings().amqp_url.get_secret_value()
    for host in ("localhost:5672", "127.0.0.1:5672"):
        url = url.replace(host, f"127.0.0.1:{proxy.port}")
    late = Broker(url, client_name="consumer-via-proxy", connect_timeout_s=1, reconnect_interval_s=0.2)
    handler = Effects()
    try:
        async with _pool(spine_db) as pool:
            consumer = _consumer(late, pool, names, handler)
            async with proxy.down():
                task = asyncio.create_task(consumer.run())
                await until(lambda: proxy.connections_refused >= 3, 10, "three refused connections")
                assert not consumer.started
            await asyncio.wait_for(consumer.wait_started(), 15)
            await broker.publish([_message(names)])
            await _until_count(spine_db, PROCESSED, 1)
            await consumer.stop()
            await asyncio.wait_for(task, 15)
    finally:
        await late.close()
        await proxy.close()


async def test_single_active_consumer_a_second_one_stands_by(
    spine_db: str, broker: Broker, names: spine.Names
) -> None:
    first, second = Effects(), Effects()
    async with _pool(spine_db) as pool:
        a = _consumer(broker, pool, names, first)
        b = _consumer(broker, pool, names, second)
        task_a = asyncio.create_task(a.run())
        await a.wait_started()
        async with _consuming(b):
            await broker.publish([_message(names, key=f"w{i}") for i in range(6)])
            await _until_count(spine_db, PROCESSED, 6)
            assert len(first.calls) == 6 and second.calls == []  # b stands by on every queue
            await a.stop()
            await asyncio.wait_for(task_a, 15)
            await broker.publish([_message(names, key=f"v{i}") for i in range(4)])
            await _until_count(spine_db, PROCESSED, 10)
        assert len(second.calls) == 4  # the broker switched to b when a went away


async def test_dead_letters_of_a_missing_queue_is_a_broker_error(broker: Broker) -> None:
    with pytest.raises(BrokerError, match="no queue"):
        await list_dead_letters(broker, "hwtest.no-such-queue")


async def test_after_commit_runs_after_the_handlers_commit_and_never_after_a_rollback(
    spine_db: str, broker: Broker, names: spine.Names
) -> None:
    """What a handler asks for with db.after_commit (a relay's wake-up) runs once its message's
    transaction committed, with the effect visible; a message whose transaction rolled back
    (here: Unprocessable, then dead-lettered) asks for nothing."""
    from hiwallet.core.db import after_commit

    seen_after_commit: list[int] = []
    handler = Effects()

    def fail(message: IncomingMessage) -> None:
        after_commit(lambda: seen_after_commit.append(message.body["n"]))
        if message.body["n"] == 2:
            raise Unprocessable("bad")

    handler.fail = fail
    async with _pool(spine_db) as pool:
        consumer = _consumer(broker, pool, names, handler, max_attempts=1)
        async with _consuming(consumer):
            await broker.publish([_message(names, key="w1", n=1)])
            await _until_count(spine_db, PROCESSED, 1)
            await broker.publish([_message(names, key="w2", n=2)])
            await _until_depth(broker, names.dlq, 1)
    # the good message's callback ran once; the dead-lettered one's never did
    assert seen_after_commit == [1]
    assert await _count(spine_db, EFFECTS) == 1


async def test_the_queue_depth_gauge_reports_the_messages_waiting(
    spine_db: str, broker: Broker, names: spine.Names, monkeypatch: pytest.MonkeyPatch
) -> None:
    """hiwallet_consumer_queue_messages: what the broker holds ready in the consumer's queue
    (the message in hand not counted), measured again until the queue has drained."""
    monkeypatch.setattr("hiwallet.core.consumer.DEPTH_INTERVAL_S", 0.05)
    handler = Effects()
    release = asyncio.Event()
    original = handler.__call__

    async def held(conn: asyncpg.Connection, message: IncomingMessage) -> Mapping[str, Any]:
        await asyncio.wait_for(release.wait(), 20)
        return await original(conn, message)

    await broker.publish([_message(names, key="w7", n=i) for i in range(4)])
    depths = {q: await spine.queue_depth(broker, q) for q in names.queues}
    [queue] = [q for q, n in depths.items() if n == 4]
    async with _pool(spine_db) as pool:
        consumer = _consumer(broker, pool, names, held)  # type: ignore[arg-type]
        async with _consuming(consumer):

            def depth() -> float | None:
                return consumer.metrics.registry.get_sample_value(
                    "hiwallet_consumer_queue_messages", {"queue": queue}
                )

            await until(lambda: depth() == 3, 10, "three ready, one in hand", interval_s=0.05)
            release.set()
            await _until_count(spine_db, EFFECTS, 4)
            await until(lambda: depth() == 0, 10, "the queue drained", interval_s=0.05)
