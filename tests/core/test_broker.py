"""core.broker against the real RabbitMQ: confirms, mandatory publishing, translated errors."""

from __future__ import annotations

import asyncio

import pytest

from hiwallet.core.broker import Broker, BrokerUnavailable, OutgoingMessage, PublishRefused
from hiwallet.core.ids import new_id
from hiwallet.core.logging import REQUEST_ID
from tests.core import spine
from tests.servers import free_port  # no server is started on it: closed
from tests.waiting import until


def _message(names: spine.Names, key: str, **extra: str) -> OutgoingMessage:
    return OutgoingMessage(
        message_id=new_id(),
        exchange=names.exchange,
        routing_key=key,
        type="TestMessage",
        body=b'{"n": 1}',
        headers=extra,
        correlation_id="corr-1",
    )


async def test_publish_waits_for_confirms_and_carries_the_request_id(
    broker: Broker, names: spine.Names
) -> None:
    batch = [_message(names, f"wallet-{i}") for i in range(20)]
    token = REQUEST_ID.set("req-abc")
    try:
        await broker.publish(batch)
    finally:
        REQUEST_ID.reset(token)
    got = await spine.collect(broker, names.queues, 20)
    assert sorted(m.message_id or "" for m in got) == sorted(m.message_id for m in batch)
    first = got[0]
    assert first.type == "TestMessage"
    assert first.correlation_id == "corr-1"
    assert first.content_type == "application/json"
    assert first.delivery_mode == 2  # persistent
    assert (first.headers or {})["x-request-id"] == "req-abc"


async def test_an_explicit_request_id_header_wins(broker: Broker, names: spine.Names) -> None:
    token = REQUEST_ID.set("from-context")
    try:
        await broker.publish([_message(names, "k", **{"x-request-id": "from-outbox"})])
    finally:
        REQUEST_ID.reset(token)
    (got,) = await spine.collect(broker, names.queues, 1)
    assert (got.headers or {})["x-request-id"] == "from-outbox"


async def test_unroutable_is_refused(broker: Broker, names: spine.Names) -> None:
    # The dead-letter exchange is direct: a key nothing is bound with routes nowhere.
    lost = OutgoingMessage(new_id(), names.dlx, "no-such-key", "TestMessage", b"{}")
    with pytest.raises(PublishRefused) as caught:
        await broker.publish([lost])
    assert caught.value.__cause__ is not None
    # The channel survives a return: the next publish works.
    await broker.publish([_message(names, "after")])
    assert len(await spine.collect(broker, names.queues, 1)) == 1


async def test_one_unroutable_message_in_a_batch_is_named_and_the_others_are_confirmed(
    broker: Broker, names: spine.Names
) -> None:
    # A batch goes out in one write; each message still gets its own answer.
    batch = [_message(names, f"wallet-{i}") for i in range(6)]
    lost = OutgoingMessage(new_id(), names.dlx, "no-such-key", "TestMessage", b"{}")
    batch.insert(3, lost)
    with pytest.raises(PublishRefused) as caught:
        await broker.publish(batch)
    assert caught.value.message_ids == (lost.message_id,)
    got = await spine.collect(broker, names.queues, 6)
    assert sorted(m.message_id or "" for m in got) == sorted(m.message_id for m in batch if m is not lost)


async def test_bodies_larger_than_a_frame_and_concurrent_batches_arrive_whole(
    broker: Broker, names: spine.Names
) -> None:
    # 300 kB: split over several body frames (frame_max 128 kB), each batch's frames written
    # together while another batch is written on the same channel.
    big = b'{"pad": "' + b"x" * 300_000 + b'"}'
    batches = [
        [
            OutgoingMessage(new_id(), names.exchange, f"k-{b}-{i}", "T", big if i == 1 else b'{"n": 1}')
            for i in range(3)
        ]
        for b in range(4)
    ]
    await asyncio.gather(*(broker.publish(batch) for batch in batches))
    got = await spine.collect(broker, names.queues, 12)
    sent = {m.message_id: m.body for batch in batches for m in batch}
    assert {m.message_id: m.body for m in got} == sent


async def test_a_missing_exchange_is_refused_and_the_broker_recovers(
    broker: Broker, names: spine.Names
) -> None:
    with pytest.raises(PublishRefused):
        await broker.publish([OutgoingMessage(new_id(), "hwtest.no-such-exchange", "k", "T", b"{}")])

    # RabbitMQ closed the publishing channel (404); the robust channel is reopened.
    async def published() -> bool:
        try:
            await broker.publish([_message(names, "after")])
        except BrokerUnavailable:
            return False
        return True

    await until(published, 5, "a publish after the channel reopened", interval_s=0.1)
    assert len(await spine.collect(broker, names.queues, 1)) == 1


async def test_unreachable_broker_is_unavailable() -> None:
    broker = Broker(f"amqp://guest:guest@127.0.0.1:{free_port()}/", client_name="t", connect_timeout_s=1.0)
    with pytest.raises(BrokerUnavailable):
        await broker.start()
    with pytest.raises(BrokerUnavailable):
        await broker.publish([OutgoingMessage(new_id(), "x", "k", "T", b"{}")])
    with pytest.raises(BrokerUnavailable):
        await broker.check()
    await broker.close()


async def test_declare_is_idempotent_and_check_passes(broker: Broker, names: spine.Names) -> None:
    await broker.declare(names.topology())
    await broker.check()
