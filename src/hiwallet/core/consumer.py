"""The inbox side: consuming messages exactly once in effect.

RabbitMQ delivers at least once (the outbox relay may publish a message twice; a consumer killed
before its ack gets it again). The consumer makes the effect happen once: each message's effect
and a ``processed_events`` row for its message_id commit in ONE database transaction, and the
message is acked only after that commit. A repeat finds the row and is acked without calling
the handler; a crash between the commit and the ack is such a repeat.

What goes wrong, and what happens then:

- A transient error (the database is down or restarting, :func:`core.db.is_transient`, or what
  the service counts as transient): not the message's fault. The message stays unacked (prefetch
  1: nothing else is delivered on that queue meanwhile), every queue of this consumer stops
  taking messages, and the database is probed with a capped back-off until it answers; then the
  same message is tried again. No attempt is counted: a PostgreSQL restart dead-letters nothing.
- :class:`Unprocessable` (the handler's "this can never be handled") or any other error: tried
  again a few times in-process with a short back-off (an unknown error may be a race that
  passes), then published to the dead-letter exchange with its reason (confirmed), then acked.
  ``hiwallet dead-letters replay`` puts it back once its cause is fixed.
- A message that kills the process every time: the queue's own ``x-delivery-limit``
  dead-letters it (core/broker.py).

Batches in order (``batch_handler``, docs/spine.md): with a prefetch of N, a worker per queue
takes the messages already delivered (up to ``max_batch``, never waiting for more) and handles
them in ONE transaction: one statement claims all their ids in processed_events (returning the
new ones), the batch handler handles the new ones in delivery order, one statement stores their
outcomes, COMMIT, then one ack (``multiple``) up to the last. Order holds as with prefetch 1:
the queue is single-active-consumer, each queue has its own channel (delivery tags in the
queue's order), the deliveries reach the worker's buffer in that order (each callback appends
first thing, and asyncio runs the callbacks' tasks in the order they were created), one worker
per queue handles one batch at a time in that order, and acks only after its commit. A
transient error pauses and retries the whole batch (nothing acked, nothing counted); any other
failure of the batch rolls it back and its messages go one at a time through the single path
above, so only the guilty one is retried and dead-lettered.

Concurrently, out of order (``concurrency`` N > 1, the single path): for a queue whose order does
not matter (the withdrawal saga's: its state, under a row lock, decides what a message means),
with a prefetch of at least N the queue's worker starts a handler for each delivery while fewer
than N are in hand. Each message is exactly the single path above: its own transaction with its
own processed_events claim, its own ack after its own commit (never ``multiple``: another
message's ack must not settle it), its own attempts and dead letter. A transient error pauses
the consumer as above: the handlers in hand finish what they are doing (a commit that still
succeeds is acked; one that fails too waits for the same probe, not a second pause once the
database answered after its attempt began), no new attempt starts until the probe succeeds,
and then each tries its own message again. :meth:`Consumer.stop` takes no new delivery and
waits for every handler in hand. A queue whose order matters (single-active-consumer, the
top-ups' partitions) keeps 1: refused with a batch handler, and for a single-active-consumer
queue this process's broker declared.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aio_pika.abc
import asyncpg
import orjson
import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from hiwallet.core import db, tracing
from hiwallet.core.broker import BROKER_FAILURES, REQUEST_ID_HEADER, Broker, BrokerError, OutgoingMessage
from hiwallet.core.logging import REQUEST_ID
from hiwallet.core.queries import checked_identifier, load_queries
from hiwallet.core.timeouts import within
from hiwallet.core.uow import unit_of_work

__all__ = [
    "CONSUMER_PRIVILEGES",
    "DEAD_ATTEMPTS_HEADER",
    "DEAD_AT_HEADER",
    "DEAD_CONSUMER_HEADER",
    "DEAD_HEADERS",
    "DEAD_ORIGINAL_EXCHANGE_HEADER",
    "DEAD_ORIGINAL_QUEUE_HEADER",
    "DEAD_ORIGINAL_ROUTING_KEY_HEADER",
    "DEAD_REASON_HEADER",
    "MAX_BATCH",
    "MAX_CONCURRENCY",
    "PROCESSED_EVENTS_SQL",
    "BatchHandler",
    "Consumer",
    "ConsumerMetrics",
    "Handler",
    "IncomingMessage",
    "Unprocessable",
    "batched_or_concurrent",
    "processed_events_sql",
]

log = structlog.get_logger(__name__)

_QUERIES = load_queries(Path(__file__).parent / "sql" / "consumer.sql")

DEAD_REASON_HEADER = "x-hiwallet-dead-reason"
DEAD_ORIGINAL_EXCHANGE_HEADER = "x-hiwallet-original-exchange"
DEAD_ORIGINAL_ROUTING_KEY_HEADER = "x-hiwallet-original-routing-key"
DEAD_ATTEMPTS_HEADER = "x-hiwallet-attempts"
DEAD_ORIGINAL_QUEUE_HEADER = "x-hiwallet-original-queue"
DEAD_CONSUMER_HEADER = "x-hiwallet-consumer"
DEAD_AT_HEADER = "x-hiwallet-dead-at"
DEAD_HEADERS = frozenset(
    {
        DEAD_REASON_HEADER,
        DEAD_ORIGINAL_EXCHANGE_HEADER,
        DEAD_ORIGINAL_ROUTING_KEY_HEADER,
        DEAD_ATTEMPTS_HEADER,
        DEAD_ORIGINAL_QUEUE_HEADER,
        DEAD_CONSUMER_HEADER,
        DEAD_AT_HEADER,
    }
)
# A reason is for an operator's eye: bounded, one line.
REASON_MAX_CHARS = 500

# In-process attempts of a failing message: a short back-off, doubling.
ATTEMPT_BACKOFF_FIRST_S = 0.05
ATTEMPT_BACKOFF_CAP_S = 1.0
# The database probe while paused: doubling from the first to the cap.
PROBE_BACKOFF_FIRST_S = 0.1
PROBE_BACKOFF_CAP_S = 5.0
PROBE_TIMEOUT_S = 2.0
# A message that could not be dead-lettered (the broker is unavailable) goes back to its queue
# after this long, rather than at once in a tight loop.
REQUEUE_DELAY_S = 1.0
# The most messages one transaction handles (the claim's and the outcomes' arrays).
MAX_BATCH = 1000
# The most messages of one consumer handled at once (each holds a database connection).
MAX_CONCURRENCY = 256
# How often the consumer asks the broker how many messages wait in its queues (a passive
# declare each, on a channel of its own: one round trip per queue), and how long it waits for
# an answer. The gauge is
# what an operator's "queue growing" alert reads (deploy/prometheus/alerts.yml).
DEPTH_INTERVAL_S = 15.0
DEPTH_TIMEOUT_S = 5.0
_SUBSCRIBE_FAILURES: tuple[type[BaseException], ...] = (BrokerError, *BROKER_FAILURES)


def batched_or_concurrent(batch_handler: BatchHandler, max_batch: int, concurrency: int) -> dict[str, Any]:
    """:class:`Consumer`'s keyword arguments for a queue whose order does not matter (the
    withdrawal saga's): up to ``max_batch`` messages a transaction through ``batch_handler``,
    with a prefetch of twice that (the next batch is delivered while one is handled); or, with
    ``max_batch`` 0, ``concurrency`` single transactions at once. A negative ``max_batch`` is
    refused by the Consumer, as any other bound out of range."""
    if max_batch == 0:
        return {"prefetch": concurrency, "concurrency": concurrency}
    return {"batch_handler": batch_handler, "max_batch": max_batch, "prefetch": 2 * max_batch}


def processed_events_sql(table: str = "processed_events") -> str:
    """The DDL of ``table`` (e.g. ``wallet.processed_events``). A database whose services
    consume copies it into a migration."""
    table = checked_identifier(table)
    bare = table.rpartition(".")[2]
    return f"""\
-- What each consumer has processed (core/consumer.py): written in the same transaction as the
-- message's effect, so a redelivered message is recognised and acked without a second effect.
CREATE TABLE {table} (
    consumer     text        NOT NULL,
    message_id   text        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    outcome      jsonb       NOT NULL DEFAULT '{{}}',
    CONSTRAINT {bare}_pkey PRIMARY KEY (consumer, message_id)
);
"""


PROCESSED_EVENTS_SQL = processed_events_sql()
# What the application role may do to its processed_events (its grants.sql says it; the shared
# tables' test holds every database to it): claim a message id, store its outcome, read.
CONSUMER_PRIVILEGES = frozenset({"SELECT", "INSERT", "UPDATE (outcome)"})


class Unprocessable(Exception):
    """The handler's answer "this message can never be handled" (malformed, refers to nothing):
    after the bounded attempts it is dead-lettered with ``reason``. Never personal data in it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class IncomingMessage:
    message_id: str
    type: str
    routing_key: str
    body: dict[str, Any]  # the parsed JSON object
    headers: Mapping[str, Any]
    redelivered: bool
    delivery_count: int  # x-delivery-count: earlier deliveries of this message (quorum queues)
    correlation_id: str | None = None
    queue: str = ""
    exchange: str = ""


# The handler's effect runs on ``conn`` inside the transaction that also records the message;
# what it returns is stored as the outcome (JSON).
Handler = Callable[[asyncpg.Connection, IncomingMessage], Awaitable[Mapping[str, Any]]]

# The batch mode's handler: the new messages of a batch (repeats taken out), in delivery order,
# handled on ``conn`` inside the transaction that also records them; it answers one outcome per
# message, in the same order. It raises if it cannot handle the batch (any message's
# Unprocessable, a defect): the batch is rolled back and its messages go one at a time through
# the single ``Handler``, so it need not find out which message was guilty. A transient error
# (the database, the service's "unavailable") is raised as it is: the batch is retried whole.
BatchHandler = Callable[
    [asyncpg.Connection, Sequence[IncomingMessage]], Awaitable[Sequence[Mapping[str, Any]]]
]


class ConsumerMetrics:
    """The consumer's metrics, in the service's registry. No label holds an id."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.messages = Counter(
            "hiwallet_consumer_messages",
            "Messages consumed, by queue and outcome (processed, duplicate, dead_lettered, requeued)",
            ["queue", "outcome"],
            registry=self.registry,
        )
        self.redeliveries = Counter(
            "hiwallet_consumer_redeliveries",
            "Messages received that the broker had delivered before",
            ["queue"],
            registry=self.registry,
        )
        self.dead_letters = Counter(
            "hiwallet_dead_letters",
            "Messages sent to the dead-letter exchange, by reason (unprocessable, error, malformed)",
            ["reason"],
            registry=self.registry,
        )
        # Every reason from 0: an alert's increase() then sees the first dead letter too.
        for reason in ("unprocessable", "error", "malformed"):
            self.dead_letters.labels(reason)
        self.pauses = Counter(
            "hiwallet_consumer_pauses",
            "Times the consumer stopped taking messages because the database was unavailable",
            registry=self.registry,
        )
        self.batch_size = Histogram(
            "hiwallet_consumer_batch_size",
            "Messages handled in one transaction (batch mode)",
            ["queue"],
            buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000),
            registry=self.registry,
        )
        self.batch_fallbacks = Counter(
            "hiwallet_consumer_batch_fallbacks",
            "Batches that failed as a whole and went one message at a time",
            ["queue"],
            registry=self.registry,
        )
        self.queue_messages = Gauge(
            "hiwallet_consumer_queue_messages",
            "Messages ready in the queue, as the broker last reported them (every consumer of a "
            "queue reports the same figure)",
            ["queue"],
            registry=self.registry,
        )


class _Malformed(Exception):
    """The delivery itself is unusable (no message id, not a JSON object): no handler can help."""


@dataclass
class _Queue:
    name: str
    channel: aio_pika.abc.AbstractChannel
    queue: aio_pika.abc.AbstractQueue
    tag: str = ""
    # Batch mode: the deliveries not yet taken, in delivery order, and the queue's worker.
    buffer: asyncio.Queue[aio_pika.abc.AbstractIncomingMessage] = field(default_factory=asyncio.Queue)
    worker: asyncio.Task[None] | None = None


@dataclass
class _Failure:
    kind: str  # "unprocessable" | "error"
    reason: str
    attempts: int = 0
    last: BaseException | None = field(default=None, repr=False)


def _probe_backoff_s(transient_streak: int) -> float:
    """The pause after the ``transient_streak``-th transient failure in a row (from the second):
    doubling, capped; the exponent bounded too (a long outage counts thousands of failures)."""
    return float(min(PROBE_BACKOFF_CAP_S, PROBE_BACKOFF_FIRST_S * 2 ** min(transient_streak - 2, 32)))


class Consumer:
    def __init__(
        self,
        *,
        broker: Broker,
        pool: asyncpg.Pool,
        queues: Sequence[str],
        consumer_name: str,
        handler: Handler,
        dead_letter_exchange: str,
        dead_letter_key: str,
        max_attempts: int = 5,
        is_transient: Callable[[BaseException], bool] = db.is_transient,
        metrics: ConsumerMetrics | None = None,
        transient_errors: tuple[type[BaseException], ...] = (),
        table: str = "processed_events",
        prefetch: int = 1,
        batch_handler: BatchHandler | None = None,
        max_batch: int = 100,
        batch_turns: bool = False,
        concurrency: int = 1,
    ) -> None:
        if not queues:
            raise ValueError("a consumer needs at least one queue")
        if not 1 <= max_attempts <= 100:
            raise ValueError(f"max_attempts must be 1..100, not {max_attempts}")
        if not 1 <= max_batch <= MAX_BATCH:
            raise ValueError(f"max_batch must be 1..{MAX_BATCH}, not {max_batch}")
        if not 1 <= concurrency <= MAX_CONCURRENCY:
            raise ValueError(f"concurrency must be 1..{MAX_CONCURRENCY}, not {concurrency}")
        if concurrency > 1 and batch_handler is not None:
            # Batches are handled in the queue's order; concurrent handlers finish in any order.
            raise ValueError("concurrency > 1 is for the single path: not with a batch handler")
        if concurrency > 1 and prefetch < concurrency:
            raise ValueError(f"concurrency {concurrency} needs a prefetch of as many or more, not {prefetch}")
        self._broker = broker
        self._pool = pool
        self.queues = list(queues)
        self.consumer_name = consumer_name
        self._handler = handler
        self.dead_letter_exchange = dead_letter_exchange
        self.dead_letter_key = dead_letter_key
        self.max_attempts = max_attempts
        # What pauses the consumer instead of counting an attempt: is_transient (the database's
        # own errors by default) or an instance of transient_errors (a service's "unavailable",
        # e.g. the ledger's LedgerUnavailable), anywhere on the cause chain.
        self._is_transient_error = is_transient
        self._transient_errors = transient_errors
        self.metrics = metrics or ConsumerMetrics()
        self.table = checked_identifier(table)
        self.prefetch = prefetch
        self._batch_handler = batch_handler
        # A worker per queue whenever more than one message may be in hand (a prefetch above 1
        # or a batch handler): the deliveries wait in its buffer and are handled in order, one
        # batch (or, without a batch handler, one message) at a time.
        self.pipelined = prefetch > 1 or batch_handler is not None
        self.max_batch = max_batch if batch_handler is not None else 1
        # batch_turns: one worker for all the queues, one transaction at a time, taking what
        # every queue's buffer holds (up to max_batch of each). For handlers whose batches of
        # different queues lock the same rows (wallet-consumer: a bucket's clearing
        # sub-account, which wallets of every partition share): a worker per queue waited on
        # the others' locks until each commit; one transaction for all waits on nobody, and
        # pays one commit where there were one per queue.
        self.batch_turns = batch_turns and batch_handler is not None
        self._arrived = asyncio.Event()  # batch_turns: a delivery is in some buffer
        self._turns_worker: asyncio.Task[None] | None = None
        # concurrency: up to this many messages in hand at once (the single path), each its own
        # task; the slots bound them, the set lets a stop past its timeout cancel them.
        self.concurrency = concurrency
        self._slots = asyncio.Semaphore(concurrency)
        self._handlers: set[asyncio.Task[None]] = set()
        self._refuse_ordered()
        self._claim = _QUERIES["claim_event"].format(table=self.table)
        self._store = _QUERIES["store_outcome"].format(table=self.table)
        self._claim_many = _QUERIES["claim_events"].format(table=self.table)
        self._store_many = _QUERIES["store_outcomes"].format(table=self.table)
        self._consuming: list[_Queue] = []
        self._in_hand = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._stop = asyncio.Event()
        self._started = asyncio.Event()
        # Set while the database answers; cleared by a transient error until a probe succeeds.
        self._database_up = asyncio.Event()
        self._database_up.set()
        self._probe_lock = asyncio.Lock()
        # How many times a probe saw the database come back: a handler whose attempt began
        # before the last of them failed because of the outage that probe already waited out.
        self._resumed = 0
        self._tag_suffix = f"{socket.gethostname()}.{os.getpid()}.{uuid.uuid4().hex[:6]}"

    @property
    def paused(self) -> bool:
        """Whether the consumer waits for the database (takes no message meanwhile)."""
        return not self._database_up.is_set()

    async def wait_started(self) -> None:
        await self._started.wait()

    async def run(self) -> None:
        """Consume until :meth:`stop` (or cancellation, which stops the same way): one channel
        per queue (prefetch 1, or a prefetch of N handled in order by the queue's worker: the
        queue's order is the handling order), a consumer tag naming
        this consumer and process. On a single-active-consumer queue only one of the consumers
        gets messages; the others are standbys the broker switches to when it goes away."""
        try:
            backoff_s = PROBE_BACKOFF_FIRST_S
            while not await self._subscribe():
                # RabbitMQ is not there (yet): wait, as for the database, until it is or stop.
                with contextlib.suppress(TimeoutError):
                    await within(self._stop.wait(), backoff_s)
                if self._stop.is_set():
                    return
                backoff_s = min(PROBE_BACKOFF_CAP_S, backoff_s * 2)
            log.info("consumer started", consumer=self.consumer_name, queues=self.queues)
            self._started.set()
            depths = asyncio.create_task(self._measure_depths(), name="consumer-depths")
            try:
                await self._stop.wait()
            finally:
                depths.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await depths
        finally:
            await asyncio.shield(self._shutdown())

    async def _subscribe(self) -> bool:
        """A channel and a consumer per queue; False (nothing left open) if the broker fails."""
        self._refuse_ordered()
        try:
            if self.batch_turns:
                self._turns_worker = asyncio.create_task(self._work_turns(), name="consumer-turns")
            for name in self.queues:
                channel = await self._broker.consumer_channel(self.prefetch)
                # A passive declare, not get_queue(ensure=False): the robust channel restores
                # (declares and consumes again) only the queues declared through it, so after
                # a reconnect a queue taken with get_queue would be consumed no more
                # (tests/e2e: RabbitMQ unreachable for a while).
                queue = await channel.declare_queue(name, passive=True)
                entry = _Queue(name, channel, queue)
                self._consuming.append(entry)
                if self.pipelined and not self.batch_turns:
                    entry.worker = asyncio.create_task(self._work(entry), name=f"consumer-{name}")
                entry.tag = await queue.consume(
                    self._buffer_of(entry) if self.pipelined else self._on_message_of(name),
                    no_ack=False,
                    consumer_tag=f"{self.consumer_name}.{name}.{self._tag_suffix}",
                )
        except _SUBSCRIBE_FAILURES as exc:
            log.warning("consumer cannot subscribe; trying again", error=type(exc).__name__)
            await self._close_all()
            return False
        return True

    async def _measure_depths(self) -> None:
        """Every DEPTH_INTERVAL_S, the messages ready in each queue (a passive declare) into the
        gauge, until cancelled. On a channel of its own: an AMQP call that times out closes its
        channel, which must never be one that consumes. Only a measure: a failure is logged, the
        gauge keeps its last figure and the next round opens a new channel."""
        channel: aio_pika.abc.AbstractChannel | None = None
        try:
            while True:
                try:
                    if channel is None or channel.is_closed:
                        channel = await within(self._broker.consumer_channel(), DEPTH_TIMEOUT_S)
                    # The plain channel under the robust one: a passive declare through the
                    # robust channel would be remembered and declared again at each reconnect.
                    amqp = await within(channel.get_underlay_channel(), DEPTH_TIMEOUT_S)
                    for name in self.queues:
                        declared = await amqp.queue_declare(name, passive=True, timeout=DEPTH_TIMEOUT_S)
                        if declared.message_count is not None:
                            self.metrics.queue_messages.labels(name).set(declared.message_count)
                except Exception as exc:  # any failure of a measure is only logged
                    log.debug("queue depths not measured", error=type(exc).__name__)
                    closing, channel = channel, None
                    if closing is not None:
                        with contextlib.suppress(Exception):
                            await within(closing.close(), DEPTH_TIMEOUT_S)
                await asyncio.sleep(DEPTH_INTERVAL_S)
        finally:
            if channel is not None:
                with contextlib.suppress(Exception):
                    await within(channel.close(), DEPTH_TIMEOUT_S)

    def _refuse_ordered(self) -> None:
        """concurrency > 1 on a queue whose order matters is a defect: refused for every
        single-active-consumer queue the broker declared (a queue declared elsewhere is the
        caller's to know: docs/spine.md)."""
        if self.concurrency == 1:
            return
        ordered: set[str] = getattr(self._broker, "single_active_queues", set())
        for name in self.queues:
            if name in ordered:
                raise ValueError(
                    f"queue {name!r} is single-active-consumer (its order matters): concurrency must be 1"
                )

    async def _close_all(self) -> None:
        # Past the stop's timeout: the handlers still in hand are cancelled; their messages,
        # unacked, go back with the channel.
        for task in list(self._handlers):
            task.cancel()
        for task in list(self._handlers):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for entry in self._consuming:
            with contextlib.suppress(Exception):
                await within(entry.channel.close(), 5.0)
            if entry.worker is not None:
                entry.worker.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await entry.worker
        worker, self._turns_worker = self._turns_worker, None
        if worker is not None:
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await worker
        self._consuming.clear()

    @property
    def started(self) -> bool:
        """Subscribed to every queue and not stopped (for /ready, with :attr:`paused`)."""
        return self._started.is_set() and not self._stop.is_set()

    async def stop(self) -> None:
        """Take no new message (or batch), finish the one in hand, close the channels."""
        self._stop.set()

    async def _shutdown(self, finish_timeout_s: float = 30.0) -> None:
        for entry in self._consuming:
            if entry.tag:
                with contextlib.suppress(Exception):
                    await within(entry.queue.cancel(entry.tag), 5.0)
        # The message in hand is finished (or, if it waits for the database, given back).
        with contextlib.suppress(TimeoutError):
            await within(self._idle.wait(), finish_timeout_s)
        # The deliveries still in a buffer go back to their queue with the channel.
        await self._close_all()
        log.info("consumer stopped", consumer=self.consumer_name)

    def _on_message_of(self, queue: str) -> Callable[[aio_pika.abc.AbstractIncomingMessage], Awaitable[None]]:
        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            self._in_hand += 1
            self._idle.clear()
            try:
                await self._handle(queue, message)
            except asyncio.CancelledError:
                raise
            except Exception:
                # Nothing may escape into aio-pika's task (it would only be logged there); the
                # message stays unacked and comes back when the channel closes.
                log.exception("consumer: unexpected failure around a message", queue=queue)
            finally:
                self._in_hand -= 1
                if self._in_hand == 0:
                    self._idle.set()

        return on_message

    def _buffer_of(self, entry: _Queue) -> Callable[[aio_pika.abc.AbstractIncomingMessage], Awaitable[None]]:
        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            # First thing, without an await: the buffer's order is the delivery order.
            entry.buffer.put_nowait(message)
            self._arrived.set()

        return on_message

    async def _work(self, entry: _Queue) -> None:
        """The queue's worker: one batch at a time, in delivery order, until stopped."""
        while True:
            message = await entry.buffer.get()
            if self._stop.is_set():
                return  # what is left goes back to the queue with the channel
            batch = [message]
            # What is there already, and no more: a batch never waits for messages to come.
            while len(batch) < self.max_batch and not entry.buffer.empty():
                batch.append(entry.buffer.get_nowait())
            if self.concurrency > 1:
                await self._start_concurrently(entry.name, message)
            elif self._batch_handler is None:
                await self._guarded(self._handle(entry.name, message), [(entry.name, batch)])
            else:
                await self._guarded(self._handle_groups([(entry.name, batch)]), [(entry.name, batch)])

    async def _start_concurrently(self, queue: str, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        """concurrency: wait for a free slot, then the message's handler in a task of its own;
        counted in hand from here (before the task runs), so a stop waits for it."""
        await self._slots.acquire()
        if self._stop.is_set():
            self._slots.release()
            return  # it goes back to the queue with the channel
        self._in_hand += 1
        self._idle.clear()
        task = asyncio.create_task(self._concurrent(queue, message), name=f"consumer-{queue}-handler")
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    async def _concurrent(self, queue: str, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        try:
            await self._guarded(self._handle(queue, message), [(queue, [message])])
        finally:
            self._slots.release()
            self._in_hand -= 1
            if self._in_hand == 0:
                self._idle.set()

    async def _work_turns(self) -> None:
        """batch_turns: the one worker of all the queues. Each round takes what every queue's
        buffer holds (up to max_batch of each, in delivery order) and handles it in one
        transaction; a queue's messages are taken only here, so each queue's batches still
        follow one another in its delivery order."""
        while True:
            await self._arrived.wait()
            if self._stop.is_set():
                return  # what is left goes back to the queues with the channels
            self._arrived.clear()  # before taking: a delivery from now on sets it again
            groups: list[tuple[str, list[aio_pika.abc.AbstractIncomingMessage]]] = []
            for entry in self._consuming:
                batch: list[aio_pika.abc.AbstractIncomingMessage] = []
                while len(batch) < self.max_batch and not entry.buffer.empty():
                    batch.append(entry.buffer.get_nowait())
                if batch:
                    groups.append((entry.name, batch))
                if not entry.buffer.empty():
                    self._arrived.set()  # more than max_batch waited: the next round takes it
            if groups:
                await self._guarded(self._handle_groups(groups), groups)

    async def _guarded(
        self,
        handling: Awaitable[None],
        groups: list[tuple[str, list[aio_pika.abc.AbstractIncomingMessage]]],
    ) -> None:
        self._in_hand += 1
        self._idle.clear()
        try:
            await handling
        except asyncio.CancelledError:
            raise
        except Exception:
            # A defect around the batch (not its handling, which is caught). Its unsettled
            # messages are given back now rather than left unacked: a later batch's ack
            # (multiple) would otherwise settle them unhandled.
            log.exception("consumer: unexpected failure around a batch", queues=[q for q, _ in groups])
            for _, batch in groups:
                for unsettled in batch:
                    with contextlib.suppress(Exception):  # settled already (acked, dead-lettered)
                        await unsettled.reject(requeue=True)
        finally:
            self._in_hand -= 1
            if self._in_hand == 0:
                self._idle.set()

    async def _handle_groups(
        self, groups: list[tuple[str, list[aio_pika.abc.AbstractIncomingMessage]]]
    ) -> None:
        """One transaction for the batches of one queue or, with batch_turns, of several:
        (queue, its messages in delivery order) each."""
        queues = [queue for queue, _ in groups]
        size = 0
        for queue, messages in groups:
            size += len(messages)
            self.metrics.batch_size.labels(queue).observe(len(messages))
            for message in messages:
                if message.redelivered:
                    self.metrics.redeliveries.labels(queue).inc()
        try:
            incoming = [_incoming(queue, message) for queue, messages in groups for message in messages]
        except _Malformed:
            # The single path dead-letters the malformed one, in its place in the order.
            for queue, messages in groups:
                await self._one_at_a_time(queue, messages)
            return
        transient_streak = 0
        while True:
            if self._stop.is_set() and not self._database_up.is_set():
                return  # stopping while paused: the batch goes back with the channel
            await self._database_up.wait()
            try:
                outcomes = await self._process_batch(incoming)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._is_transient(exc):
                    # Not the batch's fault: nothing acked, no attempt counted; the same batch
                    # again once the database answers.
                    log.warning(
                        "consumer paused: database unavailable",
                        queue=queues[0] if len(queues) == 1 else queues,
                        batch=size,
                        error=type(exc).__name__,
                        **db_fields(exc),
                    )
                    await self._probe_until_up()
                    if self._stop.is_set():
                        return
                    transient_streak += 1
                    if transient_streak > 1:
                        await asyncio.sleep(
                            min(
                                PROBE_BACKOFF_CAP_S,
                                PROBE_BACKOFF_FIRST_S * 2 ** min(transient_streak - 2, 32),
                            )
                        )
                    continue
                # Rolled back: one at a time, each message finds out for itself, and only a
                # guilty one is retried and dead-lettered.
                log.warning(
                    "consumer: batch failed; its messages go one at a time",
                    queue=queues[0] if len(queues) == 1 else queues,
                    batch=size,
                    error=type(exc).__name__,
                )
                for queue, messages in groups:
                    self.metrics.batch_fallbacks.labels(queue).inc()
                    await self._one_at_a_time(queue, messages)
                return
            offset = 0
            for queue, messages in groups:  # each queue's on its own channel
                await self._ack_batch(queue, messages, outcomes[offset : offset + len(messages)])
                offset += len(messages)
            return

    async def _one_at_a_time(self, queue: str, messages: list[aio_pika.abc.AbstractIncomingMessage]) -> None:
        for message in messages:
            if self._stop.is_set():
                return  # the rest go back with the channel
            await self._handle(queue, message, counted=True)

    async def _process_batch(self, incoming: list[IncomingMessage]) -> list[str]:
        """One transaction: claim every id, handle the new ones, store their outcomes."""
        if self._batch_handler is None:
            raise RuntimeError("no batch handler")
        async with unit_of_work(self._pool) as conn:
            rows = await conn.fetch(self._claim_many, self.consumer_name, [m.message_id for m in incoming])
            new = {row["message_id"] for row in rows}
            fresh: list[IncomingMessage] = []
            outcomes: list[str] = []
            for message in incoming:
                if message.message_id in new:
                    new.discard(message.message_id)  # a second copy in the batch is a repeat
                    fresh.append(message)
                    outcomes.append("processed")
                else:
                    outcomes.append("duplicate")
            if fresh:
                tracer = tracing.STATE.tracer
                if tracer is None:
                    answers = list(await self._batch_handler(conn, fresh))
                else:
                    with tracing.batch_consumer_spans(tracer, fresh):
                        answers = list(await self._batch_handler(conn, fresh))
                if len(answers) != len(fresh):
                    raise RuntimeError(f"the batch handler answered {len(answers)} outcomes for {len(fresh)}")
                await conn.execute(
                    self._store_many,
                    self.consumer_name,
                    [m.message_id for m in fresh],
                    [orjson.dumps(dict(a or {}), default=str).decode() for a in answers],
                )
        return outcomes

    async def _ack_batch(
        self, queue: str, messages: list[aio_pika.abc.AbstractIncomingMessage], outcomes: list[str]
    ) -> None:
        """After the commit: one ack up to the last message when they share a channel (every
        earlier delivery of that channel is settled: one batch at a time), else one each (a
        reconnect in between: the old channel's acks fail and those come back as repeats)."""
        last = messages[-1]
        try:
            channel = last.channel
            one_channel = all(m.channel is channel for m in messages)
        except Exception:
            one_channel = False
        if not one_channel:
            for message, outcome in zip(messages, outcomes, strict=True):
                await self._ack(queue, message, outcome)
            return
        try:
            await last.ack(multiple=True)
        except Exception as exc:
            log.warning("consumer: ack failed; the batch will come back as repeats", error=type(exc).__name__)
            return
        for outcome in outcomes:
            self.metrics.messages.labels(queue, outcome).inc()

    async def _handle(
        self, queue: str, message: aio_pika.abc.AbstractIncomingMessage, *, counted: bool = False
    ) -> None:
        tracer = tracing.STATE.tracer
        if tracer is None:
            await self._handle_one(queue, message, counted=counted)
            return
        # Tracing on: the handling is a CONSUMER span, its parent the producer's (core.tracing).
        with tracing.consumer_span(
            tracer, message.headers, queue, message.routing_key or "", message.message_id or ""
        ):
            await self._handle_one(queue, message, counted=counted)

    async def _handle_one(
        self, queue: str, message: aio_pika.abc.AbstractIncomingMessage, *, counted: bool
    ) -> None:
        if message.redelivered and not counted:
            self.metrics.redeliveries.labels(queue).inc()
        request_id = (message.headers or {}).get(REQUEST_ID_HEADER)
        token = REQUEST_ID.set(request_id if isinstance(request_id, str) else Ellipsis)
        try:
            try:
                incoming = _incoming(queue, message)
            except _Malformed as exc:
                await self._dead_letter(queue, message, _Failure("malformed", str(exc), attempts=1))
                return
            failure: _Failure | None = None
            attempt = 0
            transient_streak = 0
            while True:
                if self._stop.is_set() and not self._database_up.is_set():
                    return  # stopping while paused: the message goes back with the channel
                await self._database_up.wait()
                resumed = self._resumed
                try:
                    outcome = await self._process(incoming)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    if self._is_transient(exc):
                        # Not the message's fault: no attempt counted, wait for the database.
                        log.warning(
                            "consumer paused: database unavailable",
                            queue=queue,
                            error=type(exc).__name__,
                            **db_fields(exc),
                        )
                        await self._probe_until_up(since=resumed)
                        if self._stop.is_set():
                            return
                        transient_streak += 1
                        if transient_streak > 1:
                            # The database answers but this message keeps failing transiently
                            # (a lock or statement timeout): still not its fault, never
                            # dead-lettered for it, but not retried in a tight loop either.
                            await asyncio.sleep(
                                min(
                                    PROBE_BACKOFF_CAP_S,
                                    PROBE_BACKOFF_FIRST_S * 2 ** min(transient_streak - 2, 32),
                                )
                            )
                        continue
                    attempt += 1
                    failure = _failure_of(exc, attempt)
                    log.warning(
                        "consumer: message failed",
                        queue=queue,
                        message_id=incoming.message_id,
                        type=incoming.type,
                        attempt=attempt,
                        kind=failure.kind,
                        error=type(exc).__name__,
                    )
                    if attempt >= self.max_attempts:
                        break
                    await asyncio.sleep(
                        min(ATTEMPT_BACKOFF_CAP_S, ATTEMPT_BACKOFF_FIRST_S * 2 ** min(attempt - 1, 32))
                    )
                    continue
                await self._ack(queue, message, outcome)
                return
            await self._dead_letter(queue, message, failure)
        finally:
            REQUEST_ID.reset(token)

    def _is_transient(self, exc: BaseException) -> bool:
        if self._is_transient_error(exc):
            return True
        seen: BaseException | None = exc
        for _ in range(8):  # a bounded walk of the cause chain
            if seen is None:
                return False
            if isinstance(seen, self._transient_errors):
                return True
            seen = seen.__cause__
        return False

    async def _process(self, incoming: IncomingMessage) -> str:
        async with unit_of_work(self._pool) as conn:
            is_new = await conn.fetchval(self._claim, self.consumer_name, incoming.message_id)
            if not is_new:
                return "duplicate"
            outcome = await self._handler(conn, incoming)
            await conn.execute(
                self._store,
                self.consumer_name,
                incoming.message_id,
                orjson.dumps(dict(outcome or {}), default=str).decode(),
            )
        return "processed"

    async def _ack(self, queue: str, message: aio_pika.abc.AbstractIncomingMessage, outcome: str) -> None:
        try:
            await message.ack()
        except Exception as exc:
            # Committed but not acked (the channel is gone): the message comes back and is
            # acked then as a repeat.
            log.warning(
                "consumer: ack failed; the message will come back as a repeat", error=type(exc).__name__
            )
            return
        self.metrics.messages.labels(queue, outcome).inc()
        log.debug("consumer: message done", queue=queue, outcome=outcome)

    async def _probe_until_up(self, since: int | None = None) -> None:
        """Pause every queue of this consumer, probe the database until it answers. ``since``:
        the resumes counted when the failed attempt began; if a probe has seen the database
        come back since (a concurrent handler's), this failure was that outage's: no new pause,
        the message is tried again at once."""
        if since is not None and since != self._resumed:
            return
        self._database_up.clear()
        async with self._probe_lock:
            if self._database_up.is_set():
                return  # another queue's probe saw it come back
            self.metrics.pauses.inc()
            backoff_s = PROBE_BACKOFF_FIRST_S
            started = time.monotonic()
            while not self._stop.is_set():
                try:
                    async with asyncio.timeout(PROBE_TIMEOUT_S), self._pool.acquire() as conn:
                        await conn.fetchval(_QUERIES["probe"])
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.debug("consumer: database still unavailable", error=type(exc).__name__)
                    with contextlib.suppress(TimeoutError):
                        await within(self._stop.wait(), backoff_s)
                    backoff_s = min(PROBE_BACKOFF_CAP_S, backoff_s * 2)
                    continue
                log.info("consumer resumed: database answers", paused_s=round(time.monotonic() - started, 3))
                self._resumed += 1
                break
            self._database_up.set()

    async def _dead_letter(
        self, queue: str, message: aio_pika.abc.AbstractIncomingMessage, failure: _Failure | None
    ) -> None:
        failure = failure or _Failure("error", "unknown", attempts=self.max_attempts)
        headers = {
            k: v for k, v in (message.headers or {}).items() if isinstance(v, str) and k not in DEAD_HEADERS
        }
        headers.update(
            {
                DEAD_REASON_HEADER: failure.reason[:REASON_MAX_CHARS],
                DEAD_ORIGINAL_EXCHANGE_HEADER: message.exchange or "",
                DEAD_ORIGINAL_ROUTING_KEY_HEADER: message.routing_key or "",
                DEAD_ORIGINAL_QUEUE_HEADER: queue,
                DEAD_ATTEMPTS_HEADER: str(failure.attempts),
                DEAD_CONSUMER_HEADER: self.consumer_name,
                DEAD_AT_HEADER: datetime.now(UTC).isoformat(),
            }
        )
        dead = OutgoingMessage(
            message_id=message.message_id or f"unidentified-{uuid.uuid4()}",
            exchange=self.dead_letter_exchange,
            routing_key=self.dead_letter_key,
            type=message.type or "",
            body=message.body,
            headers=headers,
            correlation_id=message.correlation_id,
        )
        try:
            # Confirmed before the ack: a dead letter is never lost between the two queues (at
            # worst it is in both, and the dead-letter queue holds it twice).
            await self._broker.publish([dead])
        except BrokerError as exc:
            log.error(
                "consumer: could not dead-letter a message; it goes back to its queue",
                queue=queue,
                error=str(exc),
            )
            await asyncio.sleep(REQUEUE_DELAY_S)
            with contextlib.suppress(Exception):
                await message.reject(requeue=True)
            self.metrics.messages.labels(queue, "requeued").inc()
            return
        self.metrics.dead_letters.labels(failure.kind).inc()
        log.error(
            "consumer: message dead-lettered",
            queue=queue,
            message_id=message.message_id,
            type=message.type,
            kind=failure.kind,
            reason=failure.reason[:REASON_MAX_CHARS],
            attempts=failure.attempts,
        )
        await self._ack(queue, message, "dead_lettered")


def db_fields(exc: BaseException) -> dict[str, Any]:
    state = getattr(exc, "sqlstate", None)
    return {"sqlstate": state} if isinstance(state, str) else {}


def _failure_of(exc: BaseException, attempts: int) -> _Failure:
    if isinstance(exc, Unprocessable):
        return _Failure("unprocessable", exc.reason, attempts, exc)
    # An unknown error's message may quote data (a database error quotes values): the reason
    # names its type only; the log line of each attempt has the rest (without locals).
    return _Failure("error", f"error: {type(exc).__module__}.{type(exc).__qualname__}", attempts, exc)


def _incoming(queue: str, message: aio_pika.abc.AbstractIncomingMessage) -> IncomingMessage:
    if not message.message_id:
        raise _Malformed("malformed: the message has no message_id")
    try:
        body = orjson.loads(message.body)
    except orjson.JSONDecodeError as exc:
        raise _Malformed("malformed: the body is not JSON") from exc
    if not isinstance(body, dict):
        raise _Malformed("malformed: the body is not a JSON object")
    headers = dict(message.headers or {})
    count = headers.get("x-delivery-count", 0)
    return IncomingMessage(
        message_id=message.message_id,
        type=message.type or "",
        routing_key=message.routing_key or "",
        body=body,
        headers=headers,
        redelivered=bool(message.redelivered),
        delivery_count=count if isinstance(count, int) else 0,
        correlation_id=message.correlation_id,
        queue=queue,
        exchange=message.exchange or "",
    )
