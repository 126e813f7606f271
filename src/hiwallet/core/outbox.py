"""The transactional outbox and its relay.

A service that must tell the others about a change writes the message into its own database,
in the same transaction as the change (:func:`enqueue`): both happen or neither does. The
:class:`Relay` then publishes what is committed to RabbitMQ, with publisher confirms, and
marks each row sent only after the broker confirmed it. Delivery is therefore *at least once*:
a relay that stops between the confirm and the mark publishes the rows again when it (or
another) resumes, with the same message_id, and consumers deduplicate by it (core/consumer.py).

One relay at a time, per outbox: the leader holds a session-level PostgreSQL advisory lock on
its own dedicated connection, and does all its work (LISTEN, claim, mark) on that connection.
The lock lives exactly as long as the session: a leader whose connection dies has lost the lock
and can no longer claim or mark anything, and a standby (polling pg_try_advisory_lock every
takeover_poll_s) takes over. One leader keeps the messages in id order on the broker (the
consumer side relies on a key's messages arriving in order) and spares the database competing
claimers.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import asyncpg
import orjson
import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge

from hiwallet.core import tracing
from hiwallet.core.broker import (
    REQUEST_ID_HEADER,
    Broker,
    BrokerError,
    BrokerUnavailable,
    OutgoingMessage,
    PublishRefused,
)
from hiwallet.core.db import is_connection_error, is_transient
from hiwallet.core.logging import REQUEST_ID
from hiwallet.core.queries import checked_identifier, load_queries
from hiwallet.core.relay_hint import RelayHint
from hiwallet.core.timeouts import within

__all__ = [
    "CORRELATION_ID_KEY",
    "OUTBOX_TABLE_SQL",
    "RELAY_PRIVILEGES",
    "OutboxMetrics",
    "Relay",
    "RelayFault",
    "RelayHint",
    "RelayStopped",
    "enqueue",
    "enqueue_many",
    "outbox_keeps_unsent_sql",
    "outbox_lag",
    "outbox_row",
    "outbox_table_sql",
    "purge_sent",
]

log = structlog.get_logger(__name__)

_QUERIES = load_queries(Path(__file__).parent / "sql" / "outbox.sql")
# The outbox has no column for the AMQP correlation id: it travels in the headers document under
# this key, and the relay moves it back to the message's property (not sent as a header).
CORRELATION_ID_KEY = "x-hiwallet-correlation-id"


def _query(name: str, table: str) -> str:
    return _QUERIES[name].format(table=checked_identifier(table))


def outbox_table_sql(table: str = "outbox", channel: str = "outbox", *, notify_trigger: bool = True) -> str:
    """The outbox's DDL for ``table`` (e.g. ``topup.outbox``), whose inserts notify ``channel``
    (e.g. ``topup_outbox``). Each database that publishes copies it into a migration.

    ``notify_trigger=False`` leaves the NOTIFY trigger out: the service then wakes its relay
    itself after each commit that wrote rows (:class:`RelayHint`). A transaction that has sent
    a NOTIFY holds PostgreSQL's one notify-queue lock from its commit until the commit is
    flushed, so every writer of a trigger-notified outbox commits one after the other: fine for
    a few writes a second, the bound for a service that writes hundreds (topup-webhook)."""
    table = checked_identifier(table)
    channel = checked_identifier(channel)
    schema, _, bare = table.rpartition(".")
    function = f"{schema}.{bare}_notify" if schema else f"{bare}_notify"
    ddl = f"""\
-- The transactional outbox (core/outbox.py): messages written in the same transaction as the
-- change they announce, published by the relay, marked sent after the broker's confirm.
CREATE TABLE {table} (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id   text        NOT NULL CONSTRAINT {bare}_message_id_unique UNIQUE,
    exchange     text        NOT NULL,
    routing_key  text        NOT NULL,
    message_type text        NOT NULL,
    headers      jsonb       NOT NULL DEFAULT '{{}}',
    body         jsonb       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    sent_at      timestamptz
);
-- The relay's claim and the lag gauge read only the unsent rows: a small index, however many
-- sent rows wait for the purge.
CREATE INDEX {bare}_unsent ON {table} (id) WHERE sent_at IS NULL;
"""
    if not notify_trigger:
        return (
            ddl
            + f"""\
-- No NOTIFY trigger: the service wakes the relay itself after each commit that wrote rows
-- (core.outbox.RelayHint, on channel {channel}); the relay's poll is the safety net.
"""
        )
    return (
        ddl
        + f"""\

-- A hint to the relay that rows are due, so a message leaves within milliseconds instead of at
-- the next poll. Sent at commit (NOTIFY is transactional: a rolled-back insert wakes nobody),
-- once per statement, carrying nothing: the relay reads the rows themselves. Only a hint: a
-- relay that is not listening at that moment (reconnecting, standby) finds the rows by its
-- poll.
CREATE FUNCTION {function}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('{channel}', '');
    RETURN NULL;
END
$$;
CREATE TRIGGER {bare}_notify AFTER INSERT ON {table}
    FOR EACH STATEMENT EXECUTE FUNCTION {function}();
"""
    )


def outbox_keeps_unsent_sql(table: str) -> str:
    """The outbox's guard for ``table``: the relay may delete what it sent (:func:`purge_sent`),
    never a message still to be sent (a top-up never credited, a saga that never moves on).
    Each database that publishes copies it into a migration, after the table."""
    table = checked_identifier(table)
    schema, _, bare = table.rpartition(".")
    function = f"{schema}.{bare}_keeps_unsent" if schema else f"{bare}_keeps_unsent"
    return f"""\
CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.sent_at IS NULL THEN
        RAISE EXCEPTION 'outbox message % has not been sent; it may not be deleted', OLD.message_id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN OLD;
END $$;

CREATE TRIGGER {bare}_keeps_unsent BEFORE DELETE ON {table}
    FOR EACH ROW EXECUTE FUNCTION {function}();
"""


# What the application role may do to an outbox (its grants.sql says it; the shared tables'
# test holds every database to it): the relay claims rows (FOR UPDATE needs an UPDATE
# privilege), marks them sent and purges sent ones. A service that enqueues with
# :func:`enqueue` has INSERT too; one that writes through its SECURITY DEFINER functions has not.
RELAY_PRIVILEGES = frozenset({"SELECT", "UPDATE (sent_at)", "DELETE"})

# The documented shape (the contract's names): table ``outbox``, channel ``outbox``. A
# database's migration uses outbox_table_sql("<schema>.outbox", "<schema>_outbox").
OUTBOX_TABLE_SQL = outbox_table_sql()


def _json_text(value: object) -> str:
    return orjson.dumps(value).decode()


def outbox_row(message: OutgoingMessage) -> tuple[str, str, str, str, str, str]:
    """An outbox row's columns for ``message`` (message_id, exchange, routing_key, message_type,
    headers and body as JSON text), as :func:`enqueue` writes them: its body checked to be JSON,
    the current request id and the correlation id put into its headers. For a service whose own
    SQL function writes the row with the change it announces (one statement instead of two)."""
    try:
        body = orjson.loads(message.body)
    except orjson.JSONDecodeError as exc:
        raise ValueError("an outbox message's body must be JSON") from exc
    headers = dict(message.headers)
    request_id = REQUEST_ID.get()
    if REQUEST_ID_HEADER not in headers and isinstance(request_id, str):
        headers[REQUEST_ID_HEADER] = request_id
    tracer = tracing.STATE.tracer
    if tracer is not None:
        # The writer's trace context, stored with the row: the relay publishes it as it is.
        tracing.inject_producer(
            tracer, headers, message.exchange, message.routing_key, message.correlation_id
        )
    if message.correlation_id is not None:
        headers[CORRELATION_ID_KEY] = message.correlation_id
    return (
        message.message_id,
        message.exchange,
        message.routing_key,
        message.type,
        _json_text(headers),
        _json_text(body),
    )


async def enqueue(conn: asyncpg.Connection, message: OutgoingMessage, *, table: str) -> None:
    """Write ``message`` into the outbox, inside the caller's transaction (the caller commits
    it together with the change it announces). The current request id, if any, goes with it."""
    await conn.execute(_query("enqueue", table), *outbox_row(message))


async def enqueue_many(conn: asyncpg.Connection, messages: Sequence[OutgoingMessage], *, table: str) -> None:
    """Write ``messages`` into the outbox in one statement (a batch's commands or results), in
    their order, inside the caller's transaction, each as :func:`enqueue` writes it."""
    if not messages:
        return
    rows = [outbox_row(message) for message in messages]
    await conn.execute(_query("enqueue_many", table), *(list(column) for column in zip(*rows, strict=True)))


async def outbox_lag(conn: asyncpg.Connection, table: str) -> tuple[int, float]:
    """(unsent rows, age of the oldest unsent in seconds; 0 when none)."""
    row = await conn.fetchrow(_query("lag", table))
    if row is None:  # an aggregate always answers one row
        return 0, 0.0
    return int(row["unsent"]), float(row["oldest_age_s"])


async def purge_sent(conn: asyncpg.Connection, table: str, older_than_s: float, batch: int) -> int:
    """Delete one batch (at most ``batch`` rows, oldest first) of rows sent more than
    ``older_than_s`` ago; returns how many. A retention job calls it until it returns less than
    ``batch``."""
    if batch < 1 or older_than_s < 0:
        raise ValueError("purge_sent needs batch >= 1 and older_than_s >= 0")
    status = await conn.execute(_query("purge_sent", table), float(older_than_s), batch)
    return int(status.rsplit(" ", 1)[-1])


class OutboxMetrics:
    """The relay's and the outbox's metrics, in the service's registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.published = Counter(
            "hiwallet_relay_published", "Outbox messages published and confirmed", registry=self.registry
        )
        self.unsent = Gauge("hiwallet_outbox_unsent", "Outbox rows not yet published", registry=self.registry)
        self.oldest_age = Gauge(
            "hiwallet_outbox_oldest_age_seconds",
            "Age of the oldest unsent outbox row",
            registry=self.registry,
        )

    def on_published(self, count: int) -> None:
        self.published.inc(count)

    async def refresh(self, conn: asyncpg.Connection, table: str) -> None:
        unsent, oldest_age_s = await outbox_lag(conn, table)
        self.unsent.set(unsent)
        self.oldest_age.set(oldest_age_s)


class RelayStopped(Exception):
    """Raised by a :class:`RelayFault` to stop the relay between publishing and marking (tests)."""


class RelayFault:
    """Test hook: the relay awaits :meth:`after_publish` once a batch is confirmed, before it
    marks the rows sent. This one stops the relay there (``RelayStopped`` out of ``run``), as a
    process killed at that moment would: the rows stay unsent, the messages are out."""

    def __init__(self) -> None:
        self.published: list[str] = []  # the message ids published before the stop

    async def after_publish(self, message_ids: Sequence[str]) -> None:
        self.published.extend(message_ids)
        raise RelayStopped(f"stopped after publishing {len(message_ids)} messages, before marking them")


def _message(row: asyncpg.Record) -> OutgoingMessage:
    headers = orjson.loads(row["headers"])
    correlation_id = headers.pop(CORRELATION_ID_KEY, None)
    return OutgoingMessage(
        message_id=row["message_id"],
        exchange=row["exchange"],
        routing_key=row["routing_key"],
        type=row["message_type"],
        body=row["body"].encode(),
        headers={str(k): str(v) for k, v in headers.items()},
        correlation_id=None if correlation_id is None else str(correlation_id),
    )


# The relay's back-off when the broker is unavailable (or refuses): doubling from the first to
# the cap, reset by a successful publish. Rows wait, unsent, in the meantime.
BACKOFF_FIRST_S = 0.1
BACKOFF_CAP_S = 5.0
# After losing its database connection, before connecting again.
RECONNECT_DELAY_S = 0.5


class Relay:
    """Publishes one outbox's committed rows; one leader at a time per ``lock_key``.

    ``connect`` opens a dedicated connection (never a pooled one: the lock and the LISTEN are
    session state, and the pools here skip the reset query), used for the lock, LISTEN and
    every claim and mark. ``channel`` is the outbox trigger's NOTIFY channel. Run it as a task
    (``run``); cancel the task to stop it."""

    def __init__(
        self,
        *,
        connect: Callable[[], Awaitable[asyncpg.Connection]],
        broker: Broker,
        table: str,
        channel: str,
        lock_key: int,
        batch_size: int = 200,
        poll_interval_s: float = 1.0,
        takeover_poll_s: float = 1.0,
        on_published: Callable[[int], None] | None = None,
        fault: RelayFault | None = None,
        backoff_cap_s: float = BACKOFF_CAP_S,
        min_pass_interval_s: float = 0.0,
    ) -> None:
        if not 1 <= batch_size <= 10_000:
            raise ValueError(f"batch_size must be 1..10000, not {batch_size}")
        if poll_interval_s <= 0 or takeover_poll_s <= 0 or backoff_cap_s <= 0:
            raise ValueError("the relay's intervals must be positive")
        if not 0 <= min_pass_interval_s <= 1:
            raise ValueError(f"min_pass_interval_s must be 0..1 s, not {min_pass_interval_s}")
        self._connect = connect
        self._broker = broker
        self.table = checked_identifier(table)
        self.channel = checked_identifier(channel)
        self.lock_key = lock_key
        self.batch_size = batch_size
        self.poll_interval_s = poll_interval_s
        self.takeover_poll_s = takeover_poll_s
        self.backoff_cap_s = backoff_cap_s
        # Under a steady stream of wake-ups, passes start at most this often: each pass costs
        # round trips of its own (claim, mark, commit; the broker's confirms) whatever it sends,
        # so fewer, bigger passes send the same rows for less. A wake-up after a quiet moment
        # passes at once: a lone row still leaves within milliseconds.
        self.min_pass_interval_s = min_pass_interval_s
        self._on_published = on_published
        self._fault = fault
        self._leader = False
        self._wake: asyncio.Event | None = None  # the leading session's: set, it passes again
        self._worked = False  # a pass completed in the current session (resets the back-off)
        self._claim = _query("claim", table)
        self._mark = _query("mark_sent", table)

    @property
    def leader(self) -> bool:
        """Whether this relay holds the lock (and works) now."""
        return self._leader

    def wake(self) -> bool:
        """A hint from a writer in this process, after its commit: rows are due. True when this
        relay leads (it passes again at once, or once more after the pass it is in); False when
        it does not (another instance's relay leads, or none does this moment: a NOTIFY is
        what reaches the one elsewhere, and a new leader's first pass finds every committed
        row)."""
        wake = self._wake
        if not self._leader or wake is None:
            return False
        wake.set()
        return True

    async def run(self) -> None:
        """Forever (until cancelled): connect, wait for the lock (standby), then lead until the
        connection is lost; then connect again. Cancel the task to stop: the connection is
        closed, which releases the lock at once.

        It never gives up: a database that is away is waited for, and an error no retry is
        known to cure (a missing table or grant, a defect) is logged at error level and tried
        again after a capped back-off, for the lag gauge and the log to show, rather than the
        task ending silently inside the service while the outbox fills."""
        failures = 0
        while True:
            try:
                conn = await self._connect()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                self._log_failure("relay cannot connect to the database", exc)
                await asyncio.sleep(self._retry_delay_s(failures))
                continue
            try:
                await self._session(conn)
            except asyncio.CancelledError:
                raise
            except RelayStopped:
                raise
            except Exception as exc:
                failures += 1
                self._log_failure("relay lost its database session", exc)
            finally:
                if self._worked:
                    failures = 0  # it did its work: the next session starts afresh
                    self._worked = False
                if self._leader:
                    log.info("relay no longer leads", table=self.table)
                self._leader = False
                self._wake = None
                await _close(conn)
            await asyncio.sleep(self._retry_delay_s(failures))

    def _retry_delay_s(self, failures: int) -> float:
        # The exponent bounded: a float power past 2**1023 overflows, and a relay whose table
        # is missing fails every session for as long as it runs (the cap is reached long before).
        return min(self.backoff_cap_s, RECONNECT_DELAY_S * 2.0 ** min(max(0, failures - 1), 32))

    def _log_failure(self, event: str, exc: BaseException) -> None:
        if is_transient(exc):
            log.warning(event, table=self.table, error=type(exc).__name__)
        else:
            log.error(event, table=self.table, error=type(exc).__name__, exc_info=exc)

    async def _session(self, conn: asyncpg.Connection) -> None:
        # Every statement of this session finds its rows by key (the unsent rows' partial
        # index, the claimed ids' primary key). Without this, the plan of "id = ANY ($1)" that
        # the session keeps, made while the outbox was young and without statistics, was a scan
        # of the whole table, done again for every batch as the table grew (bench/: the saga's
        # three relays slowed minute by minute until autovacuum's first analyze).
        await conn.execute("SET enable_seqscan = off")
        # The relay's only writes are its marks (sent_at), and a lost mark costs nothing but a
        # repeat: the row is published again with the same message_id, which every consumer
        # absorbs (its processed_events) — the at-least-once this module promises anyway. So its
        # commits need not wait for the WAL to reach the disk: a crash may forget the last
        # marks (published again), never a message. The writers' own commits (the rows and the
        # change they announce) stay synchronous. bench/withdrawal_bench.py: the saga's relays
        # waited on WAL flushes (LWLock:WALWrite, IO:WALSync) between every pass, on a path of
        # six relay hops per saga.
        await conn.execute("SET synchronous_commit = off")
        # A session-level lock, not a transaction-level one: it must outlive each batch's
        # transaction, and it must end with the session (a dead leader's lock frees itself).
        while not await conn.fetchval("SELECT pg_try_advisory_lock($1)", self.lock_key):  # noqa: ASYNC110
            # Standby: another relay leads. Polled (no event tells us when a session ends).
            await asyncio.sleep(self.takeover_poll_s)
        self._leader = True
        log.info("relay leads", table=self.table, lock_key=self.lock_key)
        # Set by the NOTIFY below and by writers in this process (wake()); a commit before
        # the first pass is found by it.
        wake = self._wake = asyncio.Event()
        lost = asyncio.Event()

        def hint(*_: object) -> None:
            wake.set()

        def terminated(*_: object) -> None:
            lost.set()
            wake.set()

        conn.add_termination_listener(terminated)
        # LISTEN after taking the lock, on the same connection: rows committed before it are
        # found by the first pass below; rows committed after it notify. The notification is
        # only a hint (it carries nothing and may be missed while reconnecting); the poll every
        # poll_interval_s is what guarantees that nothing committed stays behind.
        await conn.add_listener(self.channel, hint)
        backoff_s = 0.0
        last_pass = -math.inf
        while not lost.is_set():
            gap_s = last_pass + self.min_pass_interval_s - time.monotonic()
            if gap_s > 0:
                await asyncio.sleep(gap_s)
            last_pass = time.monotonic()
            wake.clear()  # before the pass: a commit during it wakes the next one
            try:
                await self._drain(conn)
                self._worked = True
                backoff_s = 0.0
            except BrokerUnavailable as exc:
                backoff_s = min(self.backoff_cap_s, max(BACKOFF_FIRST_S, backoff_s * 2))
                log.warning(
                    "relay: broker unavailable, rows stay unsent", error=str(exc), retry_in_s=backoff_s
                )
                await asyncio.sleep(backoff_s)
                continue
            except BrokerError as exc:
                # Refused (unroutable, nacked): a defect of the topology or the message, which
                # no retry cures at once; the refused rows stay unsent until it is fixed (the
                # confirmed ones of their batch are marked, _batch).
                backoff_s = min(self.backoff_cap_s, max(BACKOFF_FIRST_S, backoff_s * 2))
                log.error("relay: publish refused, rows stay unsent", error=str(exc), retry_in_s=backoff_s)
                await asyncio.sleep(backoff_s)
                continue
            with contextlib.suppress(TimeoutError):
                await within(wake.wait(), self.poll_interval_s)
        raise ConnectionError("the relay's database connection was lost")

    async def _drain(self, conn: asyncpg.Connection) -> None:
        """Batches until one comes back short: everything due now is sent."""
        while await self._batch(conn) >= self.batch_size:
            pass

    async def _batch(self, conn: asyncpg.Connection) -> int:
        started = time.monotonic()
        async with conn.transaction():
            # FOR UPDATE SKIP LOCKED, ORDER BY id, LIMIT batch: sql/outbox.sql says why.
            rows = await conn.fetch(self._claim, self.batch_size)
            if not rows:
                return 0
            messages = [_message(row) for row in rows]
            # Publish first, mark after: a row is marked sent only once the broker confirmed
            # it. The other order would lose a message whenever the relay stops (or the broker
            # fails) between the two; this one at worst publishes it twice, which consumers
            # absorb (the same message_id). A publish error rolls the claim back: the rows stay
            # unsent and are published again.
            refused: PublishRefused | None = None
            try:
                await self._broker.publish(messages)
            except PublishRefused as exc:
                if not exc.message_ids:
                    raise  # which ones is unknown: all stay unsent
                # The others were confirmed: marking them keeps one refused row (a defect,
                # retried after a back-off) from republishing its whole batch every time.
                refused = exc
            if self._fault is not None:
                await self._fault.after_publish([m.message_id for m in messages])
            kept = frozenset(refused.message_ids if refused is not None else ())
            sent = [row["id"] for row, m in zip(rows, messages, strict=True) if m.message_id not in kept]
            if sent:
                await conn.execute(self._mark, sent)
        # Committed: only now are they "sent". If the commit itself fails, they are published
        # again by the next pass (or the next leader).
        if self._on_published is not None and sent:
            self._on_published(len(sent))
        log.debug("relay published", rows=len(sent), ms=round((time.monotonic() - started) * 1000, 2))
        if refused is not None:
            raise refused
        return len(rows)


async def _close(conn: asyncpg.Connection) -> None:
    if conn.is_closed():
        return
    try:
        await within(conn.close(), 2.0)
    except Exception as exc:
        # A connection that cannot close politely is dropped; its session (and lock) ends with
        # the socket.
        if not (is_connection_error(exc) or isinstance(exc, TimeoutError)):
            log.warning("relay connection close failed", error=type(exc).__name__)
        conn.terminate()
