"""Helpers of the asynchronous spine's tests (broker, outbox, consumer, jobs): a fresh database
with the spine's tables made from their DDL strings, and RabbitMQ objects under a unique prefix."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Sequence

import aio_pika.abc
import asyncpg

from hiwallet.core import db
from hiwallet.core.broker import Broker, Topology, partition_queues, partitioned_topology
from hiwallet.core.consumer import processed_events_sql
from hiwallet.core.outbox import outbox_table_sql
from hiwallet.core.settings import get_settings
from tests import pgtemplate

OUTBOX = "spine.outbox"
CHANNEL = "spine_outbox"
PROCESSED = "spine.processed_events"


async def make_database() -> str:
    """A fresh database with ``spine.outbox`` and ``spine.processed_events`` (as the owner)."""
    name = f"hwt_spine_{uuid.uuid4().hex[:12]}"
    await pgtemplate.drop_database(name)
    await db.ensure_database(name)
    conn = await owner_connect(name)
    try:
        await conn.execute("CREATE SCHEMA spine")
        await conn.execute(outbox_table_sql(OUTBOX, CHANNEL))
        await conn.execute(processed_events_sql(PROCESSED))
        # What a handler writes in the tests: its effect, in the message's transaction.
        await conn.execute("CREATE TABLE spine.effects (message_id text PRIMARY KEY, n int NOT NULL)")
    finally:
        await conn.close()
    return name


async def owner_connect(database: str, port: int | None = None) -> asyncpg.Connection:
    dsn = db.owner_dsn(database, get_settings())
    if port is not None:
        dsn = dsn.replace("localhost:5432", f"127.0.0.1:{port}").replace(
            "127.0.0.1:5432", f"127.0.0.1:{port}"
        )
    return await asyncpg.connect(dsn, timeout=5)


def dsn_via(database: str, port: int) -> str:
    dsn = db.owner_dsn(database, get_settings())
    for host in ("localhost:5432", "127.0.0.1:5432"):
        dsn = dsn.replace(host, f"127.0.0.1:{port}")
    return dsn


class Names:
    """One test's exchange and queues: ``<prefix>.topups`` over two partitions, and its dead
    letters."""

    def __init__(self, partitions: int = 2) -> None:
        self.prefix = f"hwtest.{uuid.uuid4().hex[:10]}"
        self.exchange = f"{self.prefix}.topups"
        self.dlx = f"{self.prefix}.dead-letters"
        self.dead_key = f"{self.prefix}.topups"
        self.dlq = f"{self.prefix}.topups.dead"
        self.partitions = partitions
        self.queues = partition_queues(self.exchange, partitions)

    def topology(self) -> Topology:
        return partitioned_topology(
            self.exchange,
            partitions=self.partitions,
            dead_letter_exchange=self.dlx,
            dead_letter_key=self.dead_key,
            dead_letter_queue=self.dlq,
        )


async def collect(
    broker: Broker, queues: Sequence[str], count: int, timeout_s: float = 10.0, *, ack: bool = True
) -> list[aio_pika.abc.AbstractIncomingMessage]:
    """The next ``count`` messages of ``queues`` (a consumer each; quorum+SAC queues refuse
    basic.get), acked unless ``ack`` is False (then given back when the channel closes)."""
    got: list[aio_pika.abc.AbstractIncomingMessage] = []
    done = asyncio.Event()
    channel = await broker.consumer_channel(prefetch=max(1, min(count, 1000)))

    async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        got.append(message)
        if ack:
            await message.ack()
        if len(got) >= count:
            done.set()

    try:
        for name in queues:
            queue = await channel.get_queue(name, ensure=False)
            await queue.consume(on_message, no_ack=False)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), timeout_s)
    finally:
        await channel.close()
    return got


async def queue_depth(broker: Broker, queue: str) -> int:
    channel = await broker.consumer_channel()
    try:
        declared = await channel.declare_queue(queue, passive=True)
        result = declared.declaration_result
        return int(result.message_count or 0) if result is not None else 0
    finally:
        await channel.close()
