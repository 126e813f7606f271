"""The outbox and its relay against the real PostgreSQL and RabbitMQ."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import orjson
import pytest

from hiwallet.core.broker import Broker, OutgoingMessage
from hiwallet.core.ids import new_id
from hiwallet.core.logging import REQUEST_ID
from hiwallet.core.outbox import (
    Relay,
    RelayFault,
    RelayHint,
    RelayStopped,
    enqueue,
    enqueue_many,
    outbox_lag,
    outbox_row,
    outbox_table_sql,
    purge_sent,
)
from hiwallet.core.settings import get_settings
from tests.core import spine
from tests.faultproxy import FaultProxy
from tests.waiting import stays, until


def _message(names: spine.Names, key: str = "0421:w:1") -> OutgoingMessage:
    return OutgoingMessage(
        message_id=new_id(),
        exchange=names.exchange,
        routing_key=key,
        type="TopupRecorded",
        body=orjson.dumps({"payment_id": new_id(), "amount_minor": 1000}),
        correlation_id="pay-1",
    )


async def _enqueue(database: str, *messages: OutgoingMessage) -> None:
    conn = await spine.owner_connect(database)
    try:
        async with conn.transaction():
            for m in messages:
                await enqueue(conn, m, table=spine.OUTBOX)
    finally:
        await conn.close()


async def _lag(database: str) -> tuple[int, float]:
    conn = await spine.owner_connect(database)
    try:
        return await outbox_lag(conn, spine.OUTBOX)
    finally:
        await conn.close()


def _connector(database: str, name: str = "relay") -> Callable[[], Awaitable[asyncpg.Connection]]:
    async def connect() -> asyncpg.Connection:
        dsn = spine.dsn_via(database, 5432)
        return await asyncpg.connect(dsn, timeout=5, server_settings={"application_name": name})

    return connect


@asynccontextmanager
async def _running(relay: Relay) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(relay.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, RelayStopped):
            await task


async def _older_than(database: str, age_s: float) -> tuple[int, float] | None:
    lag = await _lag(database)
    return lag if lag[1] > age_s else None


async def _sessions(database: str, application_name: str, *, not_pid: int) -> int:
    conn = await spine.owner_connect(database)
    try:
        found: int = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND pid <> $2",
            application_name,
            not_pid,
        )
        return found
    finally:
        await conn.close()


async def _all_sent(database: str) -> bool:
    return (await _lag(database))[0] == 0


class _Passes(RelayFault):
    """The relay's test hook, counting its batches (published or refused) without stopping it."""

    async def after_publish(self, message_ids: Sequence[str]) -> None:
        self.published.extend(message_ids)


def _relay(database: str, broker: Broker, **kwargs: object) -> Relay:
    options: dict[str, object] = {
        "connect": _connector(database),
        "broker": broker,
        "table": spine.OUTBOX,
        "channel": spine.CHANNEL,
        "lock_key": random.randrange(1, 2**62),
        "poll_interval_s": 5.0,
        "takeover_poll_s": 0.1,
    }
    options.update(kwargs)
    return Relay(**options)  # type: ignore[arg-type]


async def test_a_committed_row_leaves_within_milliseconds(
    spine_db: str, broker: Broker, names: spine.Names
) -> None:
    published: list[int] = []
    relay = _relay(spine_db, broker, on_published=published.append)
    async with _running(relay):
        await until(lambda: relay._worked, what="the relay's first pass (it listens)")
        message = _message(names)
        token = REQUEST_ID.set("req-outbox")
        try:
            await _enqueue(spine_db, message)
        finally:
            REQUEST_ID.reset(token)
        committed = time.monotonic()
        (got,) = await spine.collect(broker, names.queues, 1, timeout_s=10)
        took_s = time.monotonic() - committed
        await until(lambda: sum(published) == 1)
    # The notify, not the 5 s poll, woke the relay (a generous bound: a loaded machine).
    assert took_s < 1.5, took_s
    assert got.message_id == message.message_id
    assert got.type == "TopupRecorded"
    assert got.correlation_id == "pay-1"
    assert (got.headers or {})["x-request-id"] == "req-outbox"
    assert "x-hiwallet-correlation-id" not in (got.headers or {})
    assert orjson.loads(got.body) == orjson.loads(message.body)
    assert await _lag(spine_db) == (0, 0.0)


async def test_rows_committed_before_the_relay_starts_are_sent_in_order(
    spine_db: str, broker: Broker, names: spine.Names
) -> None:
    messages = [_message(names, key="same-wallet") for _ in range(25)]
    await _enqueue(spine_db, *messages)
    marked: list[int] = []
    relay = _relay(spine_db, broker, batch_size=10, on_published=marked.append)
    async with _running(relay):
        got = await spine.collect(broker, names.queues, 25)
        await until(lambda: sum(marked) == 25)
    assert marked == [10, 10, 5]
    # One key, one partition queue: the outbox's order.
    assert [m.message_id for m in got] == [m.message_id for m in messages]
    assert (await _lag(spine_db))[0] == 0


async def test_enqueue_many_writes_each_as_enqueue_does_in_order(
    spine_db: str, broker: Broker, names: spine.Names
) -> None:
    alone = _message(names, key="same-wallet")
    many = [_message(names, key="same-wallet") for _ in range(7)]
    conn = await spine.owner_connect(spine_db)
    token = REQUEST_ID.set("req-many")
    try:
        async with conn.transaction():
            await enqueue_many(conn, [], table=spine.OUTBOX)  # nothing: no statement
            await enqueue(conn, alone, table=spine.OUTBOX)
            await enqueue_many(conn, many, table=spine.OUTBOX)
        rows = await conn.fetch(
            f"SELECT message_id, routing_key, message_type, headers, body FROM {spine.OUTBOX} ORDER BY id"
        )
        with pytest.raises(ValueError, match="must be JSON"):
            bad = OutgoingMessage(
                message_id=new_id(), exchange=names.exchange, routing_key="k", type="T", body=b"{"
            )
            await enqueue_many(conn, [many[0], bad], table=spine.OUTBOX)
    finally:
        REQUEST_ID.reset(token)
        await conn.close()
    assert [r["message_id"] for r in rows] == [m.message_id for m in [alone, *many]]
    # The same columns as enqueue's: the headers carry the request and correlation ids.
    first, second = (orjson.loads(rows[i]["headers"]) for i in (0, 1))
    assert first == second == {"x-request-id": "req-many", "x-hiwallet-correlation-id": "pay-1"}
    assert [orjson.loads(r["body"]) for r in rows] == [orjson.loads(m.body) for m in [alone, *many]]
    marked: list[int] = []
    relay = _relay(spine_db, broker, on_published=marked.append)
    async with _running(relay):
        got = await spine.collect(broker, names.queues, 8)
        await until(lambda: sum(marked) == 8)
    assert [m.message_id for m in got] == [m.message_id for m in [alone, *many]]
    assert all(m.correlation_id == "pay-1" for m in got)


def test_outbox_row_is_the_row_enqueue_writes() -> None:
    """outbox_row: the columns enqueue writes (a service's own SQL function inserts them): the
    body checked to be JSON, the request id (unless the message names its own) and the
    correlation id in the headers, the JSON as text."""
    message = OutgoingMessage(
        message_id="m-1", exchange="x", routing_key="K", type="T", body=b'{"a": 1}', correlation_id="c-1"
    )
    token = REQUEST_ID.set("req-1")
    try:
        row = outbox_row(message)
        own = outbox_row(
            OutgoingMessage(
                message_id="m-2",
                exchange="x",
                routing_key="K",
                type="T",
                body=b"{}",
                headers={"x-request-id": "r"},
            )
        )
    finally:
        REQUEST_ID.reset(token)
    assert row[:4] == ("m-1", "x", "K", "T")
    assert orjson.loads(row[4]) == {"x-request-id": "req-1", "x-hiwallet-correlation-id": "c-1"}
    assert orjson.loads(row[5]) == {"a": 1}
    assert orjson.loads(own[4]) == {"x-request-id": "r"}  # the message's own, no correlation id
    assert orjson.loads(outbox_row(message)[4]) == {"x-hiwallet-correlation-id": "c-1"}  # no request
    with pytest.raises(ValueError, match="must be JSON"):
        outbox_row(OutgoingMessage(message_id="m", exchange="x", routing_key="K", type="T", body=b"{"))


async def test_stopped_between_publish_and_mark_publishes_again(
    spine_db: str, broker: Broker, names: spine.Names
) -> None:
    message = _message(names)
    await _enqueue(spine_db, message)
    fault = RelayFault()
    with pytest.raises(RelayStopped):
        await asyncio.wait_for(_relay(spine_db, broker, fault=fault).run(), 10)
    assert fault.published == [message.message_id]
    (first,) = await spine.collect(broker, names.queues, 1)
    assert (await _lag(spine_db))[0] == 1  # out, but not marked

    marked: list[int] = []
    async with _running(_relay(spine_db, broker, on_published=marked.append)):
        (second,) = await spine.collect(broker, names.queues, 1)
        await until(lambda: sum(marked) == 1)
    # At least once: the same message again, for the consumer to recognise.
    assert first.message_id == second.message_id == message.message_id
    assert (await _lag(spine_db))[0] == 0


async def test_broker_unreachable_rows_wait_then_catch_up(
    spine_db: str, broker: Broker, names: spine.Names
) -> None:
    proxy = FaultProxy(upstream_port=5672)
    await proxy.start()
    url = get_settings().amqp_url.get_secret_value().replace("localhost:5672", f"127.0.0.1:{proxy.port}")
    url = url.replace("127.0.0.1:5672", f"127.0.0.1:{proxy.port}")
    flaky = Broker(
        url, client_name="relay-via-proxy", connect_timeout_s=1, confirm_timeout_s=1, reconnect_interval_s=0.2
    )
    await flaky.start()
    relay = _relay(spine_db, flaky, poll_interval_s=0.5, backoff_cap_s=0.5)
    messages = [_message(names, key=f"w{i}") for i in range(5)]
    try:
        async with _running(relay):
            await until(lambda: relay.leader)
            async with proxy.down():
                await _enqueue(spine_db, *messages)
                # The relay's passes fail meanwhile (its poll is 0.5 s): kept, not lost.
                lag = await until(
                    lambda: _older_than(spine_db, 1.0), what="the rows unsent for over a second"
                )
                assert lag[0] == 5
            got = await spine.collect(broker, names.queues, 5, timeout_s=20)
            assert sorted(m.message_id or "" for m in got) == sorted(m.message_id for m in messages)
            await until(lambda: flaky.connected)
            await until(lambda: _all_sent(spine_db), what="every row marked sent")
    finally:
        await flaky.close()
        await proxy.close()


async def test_two_relays_one_leads_the_other_takes_over(
    spine_db: str, broker: Broker, names: spine.Names
) -> None:
    key = random.randrange(1, 2**62)
    a = _relay(spine_db, broker, lock_key=key, connect=_connector(spine_db, "relay-a"), poll_interval_s=0.5)
    b = _relay(spine_db, broker, lock_key=key, connect=_connector(spine_db, "relay-b"), poll_interval_s=0.5)
    async with _running(a), _running(b):
        await until(lambda: a.leader or b.leader)
        # Exactly one: the other, polling for the lock every 0.1 s, never gets it.
        await stays(lambda: a.leader != b.leader, 0.5, "exactly one leader")
        leader, leader_name = (a, "relay-a") if a.leader else (b, "relay-b")
        first = _message(names)
        await _enqueue(spine_db, first)
        assert [m.message_id for m in await spine.collect(broker, names.queues, 1)] == [first.message_id]
        # marked (the confirm comes before the mark's commit)
        await until(lambda: _all_sent(spine_db), what="the first row marked sent")

        admin = await spine.owner_connect(spine_db)
        try:
            killed = await admin.fetch(
                "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
                leader_name,
            )
        finally:
            await admin.close()
        assert len(killed) == 1
        other = b if leader is a else a
        await until(lambda: other.leader and not leader.leader, timeout_s=10)
        second = _message(names)
        await _enqueue(spine_db, second)
        got = await spine.collect(broker, names.queues, 2, timeout_s=5)
        # The new leader sent the new row; nothing twice (the first was marked before the kill).
        assert [m.message_id for m in got] == [second.message_id]
        # The old leader comes back (a session again) as the standby.
        await until(
            lambda: _sessions(spine_db, leader_name, not_pid=killed[0]["pid"]),
            what=f"{leader_name} connected again",
        )
        await stays(lambda: a.leader != b.leader, 0.3, "exactly one leader")
        assert other.leader


async def test_lag_and_purge(spine_db: str, broker: Broker, names: spine.Names) -> None:
    await _enqueue(spine_db, *[_message(names) for _ in range(7)])
    unsent, oldest_s = await _lag(spine_db)
    assert unsent == 7 and oldest_s >= 0
    marked: list[int] = []
    async with _running(_relay(spine_db, broker, on_published=marked.append)):
        await spine.collect(broker, names.queues, 7)
        await until(lambda: sum(marked) == 7)
    conn = await spine.owner_connect(spine_db)
    try:
        assert (await outbox_lag(conn, spine.OUTBOX))[0] == 0
        assert await purge_sent(conn, spine.OUTBOX, older_than_s=3600, batch=5) == 0  # too recent
        assert await purge_sent(conn, spine.OUTBOX, older_than_s=0, batch=5) == 5  # bounded
        assert await purge_sent(conn, spine.OUTBOX, older_than_s=0, batch=5) == 2
        assert await conn.fetchval(f"SELECT count(*) FROM {spine.OUTBOX}") == 0
    finally:
        await conn.close()


async def test_a_refused_row_stays_unsent_and_its_batch_is_not_repeated(
    spine_db: str, broker: Broker, names: spine.Names
) -> None:
    good = [_message(names, key=f"w{i}") for i in range(2)]
    # The dead-letter exchange is direct: a key nothing is bound with routes nowhere.
    bad = OutgoingMessage(new_id(), names.dlx, "no-such-key", "TopupRecorded", b"{}")
    await _enqueue(spine_db, good[0], bad, good[1])
    marked: list[int] = []
    passes = _Passes()
    relay = _relay(spine_db, broker, on_published=marked.append, backoff_cap_s=0.2, fault=passes)
    async with _running(relay):
        await until(lambda: sum(marked) == 2)
        # several refused passes: the bad row alone, each time
        await until(lambda: passes.published.count(bad.message_id) >= 4, what="four refused passes")
        got = await spine.collect(broker, names.queues, 10, timeout_s=1)
    assert sorted(m.message_id or "" for m in got) == sorted(m.message_id for m in good)  # once each
    assert (await _lag(spine_db))[0] == 1


async def test_a_relay_without_its_table_keeps_trying(
    spine_db: str, broker: Broker, names: spine.Names
) -> None:
    sessions: list[int] = []
    connect = _connector(spine_db)

    async def counting() -> asyncpg.Connection:
        sessions.append(1)
        return await connect()

    relay = _relay(
        spine_db,
        broker,
        table="spine.outbox_missing",
        backoff_cap_s=0.2,
        poll_interval_s=0.1,
        connect=counting,
    )
    async with _running(relay) as task:
        # a defect is logged and retried (a session again each time), the task does not end
        await until(lambda: len(sessions) >= 4 or task.done(), what="four sessions")
        assert not task.done()


QUIET = "spine.quiet_outbox"
QUIET_CHANNEL = "spine_quiet"


async def _quiet_outbox(database: str) -> None:
    """An outbox without the NOTIFY trigger: its writers wake the relay themselves."""
    conn = await spine.owner_connect(database)
    try:
        await conn.execute(outbox_table_sql(QUIET, QUIET_CHANNEL, notify_trigger=False))
        assert not await conn.fetchval(
            "SELECT count(*) FROM pg_trigger WHERE tgrelid = $1::regclass AND NOT tgisinternal", QUIET
        )
    finally:
        await conn.close()


async def _enqueue_quiet(database: str, message: OutgoingMessage) -> None:
    conn = await spine.owner_connect(database)
    try:
        async with conn.transaction():
            await enqueue(conn, message, table=QUIET)
    finally:
        await conn.close()


async def test_without_the_trigger_the_hint_after_commit_wakes_a_relay_elsewhere(
    spine_db: str, broker: Broker, names: spine.Names
) -> None:
    await _quiet_outbox(spine_db)
    published: list[int] = []
    relay = _relay(spine_db, broker, table=QUIET, channel=QUIET_CHANNEL, on_published=published.append)
    pool = await asyncpg.create_pool(spine.dsn_via(spine_db, 5432), min_size=1, max_size=2)
    hint = RelayHint(pool, QUIET_CHANNEL)  # no relay of its own: the one above is "elsewhere"
    try:
        async with _running(relay):
            await until(lambda: relay._worked, what="the relay's first pass (it listens)")
            message = _message(names)
            await _enqueue_quiet(spine_db, message)
            committed = time.monotonic()
            hint.committed()
            (got,) = await spine.collect(broker, names.queues, 1, timeout_s=10)
            took_s = time.monotonic() - committed
            await until(lambda: sum(published) == 1)
    finally:
        await hint.aclose()
        await pool.close()
    assert took_s < 1.5, took_s  # the hint, not the 5 s poll
    assert got.message_id == message.message_id
    assert hint.sent == 1


async def test_the_hint_is_coalesced_and_never_loses_a_wake_up(spine_db: str) -> None:
    pool = await asyncpg.create_pool(spine.dsn_via(spine_db, 5432), min_size=1, max_size=1)
    listener = await spine.owner_connect(spine_db)
    heard: list[str] = []
    await listener.add_listener(QUIET_CHANNEL, lambda *args: heard.append(args[2]))
    hint = RelayHint(pool, QUIET_CHANNEL)
    try:
        # Many commits before the hint goes out: one NOTIFY, sent after all of them, covers all.
        for _ in range(20):
            hint.committed()
        await hint.aclose()
        assert hint.sent == 1
        # A commit while one is in flight: exactly one more after it (the one in flight may
        # have reached the relay before that commit).
        async with pool.acquire():  # the hint waits for the pool's one connection: in flight
            hint.committed()
            # One turn of the loop (a yield, not a wait): the hint's task starts its round trip
            # (and blocks on the pool); the commits below come while it is in flight.
            await asyncio.sleep(0)
            hint.committed()
            hint.committed()
        await hint.aclose()
        assert hint.sent == 3
        await until(lambda: len(heard) == 3)
    finally:
        await listener.close()
        await pool.close()


async def test_the_hint_wakes_the_relay_of_its_own_process_directly(
    spine_db: str, broker: Broker, names: spine.Names
) -> None:
    await _quiet_outbox(spine_db)
    relay = _relay(spine_db, broker, table=QUIET, channel=QUIET_CHANNEL)
    pool = await asyncpg.create_pool(spine.dsn_via(spine_db, 5432), min_size=1, max_size=2)
    hint = RelayHint(pool, QUIET_CHANNEL, relay=relay)
    try:
        assert not relay.wake()  # not leading (not running): a NOTIFY would be sent instead
        async with _running(relay):
            await until(lambda: relay.leader)
            message = _message(names)
            await _enqueue_quiet(spine_db, message)
            committed = time.monotonic()
            hint.committed()
            (got,) = await spine.collect(broker, names.queues, 1, timeout_s=10)
            took_s = time.monotonic() - committed
    finally:
        await hint.aclose()
        await pool.close()
    assert took_s < 1.5, took_s
    assert got.message_id == message.message_id
    assert hint.sent == 0  # no round trip


async def test_under_a_stream_of_wake_ups_passes_are_spaced_a_lone_row_is_not_held(
    spine_db: str, broker: Broker, names: spine.Names
) -> None:
    at: list[float] = []
    relay = _relay(
        spine_db, broker, min_pass_interval_s=0.4, on_published=lambda n: at.append(time.monotonic())
    )
    # When each pass starts: the pacing is between passes' starts. (Between the publishes' ends
    # it is not: a first publish slowed by a loaded machine ends closer to the next one.)
    starts: list[float] = []
    drain = relay._drain

    async def timed_drain(conn: Any) -> Any:
        starts.append(time.monotonic())
        return await drain(conn)

    relay._drain = timed_drain  # type: ignore[method-assign]
    async with _running(relay):
        await until(lambda: relay._worked, what="the relay's first pass")
        # Quiet for the pacing interval after that pass (the behaviour under test, not a
        # synchronisation): the next wake-up passes at once.
        await asyncio.sleep(0.4)
        committed = time.monotonic()
        await _enqueue(spine_db, _message(names))  # the trigger wakes the relay
        await until(lambda: len(at) == 1)
        assert at[0] - committed < 1.5  # not the 5 s poll, and not held
        await _enqueue(spine_db, _message(names))  # right behind it: the next pass waits
        await until(lambda: len(at) == 2)
        await spine.collect(broker, names.queues, 2, timeout_s=10)
    assert len(starts) >= 3, starts
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert min(gaps) >= 0.4 - 0.02, gaps  # the event loop's timer may wake a hair early
    with pytest.raises(ValueError, match="min_pass_interval_s"):
        _relay(spine_db, broker, min_pass_interval_s=2.0)
