"""`hiwallet broker to-quorum` (core/queue_move.py) against the real RabbitMQ, in a fresh
virtual host: the deployment's queues declared classic, as a deployment made before the queues
were quorum left them, with messages in them; the move leaves every queue as the topology
declares it (quorum), bound as declared, with every message in its order, and a run stopped
midway is finished by the next one."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from types import SimpleNamespace

import aiormq
import aiormq.exceptions
import pytest
from aiormq import spec
from pydantic import SecretStr
from rich.console import Console
from typer.testing import CliRunner

from hiwallet import broker_cli
from hiwallet.cli import app
from hiwallet.contracts.deployables import deployment_topology
from hiwallet.core.broker import QueueSpec, Topology
from hiwallet.core.queue_move import QueueMoveRefused, holding_queue, move_to_declared
from tests.e2e import harness
from tests.waiting import until

TOPOLOGY = deployment_topology()
PER_QUEUE = 23  # with batches of 5: several batches, the last one short
BATCH = 5


class Stop(Exception):
    """The fault hook's crash."""


@pytest.fixture(scope="module")
async def vhost() -> AsyncIterator[str]:
    name = f"hwq{os.getpid()}-{uuid.uuid4().hex[:8]}"
    await harness.add_vhost(name)
    yield name
    await harness.delete_vhost(name)


@pytest.fixture
async def url(vhost: str) -> AsyncIterator[str]:
    url = harness.amqp_url(vhost)
    yield url
    connection = await aiormq.connect(url)
    try:
        channel = await connection.channel()
        for q in TOPOLOGY.queues:
            await channel.queue_delete(q.name)
            await channel.queue_delete(holding_queue(q.name))
        for e in TOPOLOGY.exchanges:
            await channel.exchange_delete(e.name)
    finally:
        await connection.close()


def _classic(queue: QueueSpec) -> dict[str, object]:
    """What the old deployment declared: classic; the partitions single-active-consumer and
    the consumers' queues dead-lettering as now, but no quorum and no delivery limit."""
    return {k: v for k, v in queue.arguments.items() if k not in ("x-queue-type", "x-delivery-limit")}


async def _old_deployment(url: str) -> dict[str, list[str]]:
    """The topology with classic queues, bound as declared, PER_QUEUE messages in each
    (published to the queue, in order): the message ids per queue."""
    sent: dict[str, list[str]] = {}
    connection = await aiormq.connect(url)
    try:
        channel = await connection.channel()
        await channel.confirm_delivery()
        for e in TOPOLOGY.exchanges:
            await channel.exchange_declare(e.name, exchange_type=e.type, durable=True)
        for q in TOPOLOGY.queues:
            await channel.queue_declare(q.name, durable=True, arguments=_classic(q))
            for exchange, key in q.bindings:
                await channel.queue_bind(q.name, exchange, routing_key=key)
            sent[q.name] = [f"{q.name}#{i}" for i in range(PER_QUEUE)]
            for message_id in sent[q.name]:
                await channel.basic_publish(
                    message_id.encode(),
                    routing_key=q.name,
                    properties=spec.Basic.Properties(
                        message_id=message_id,
                        delivery_mode=2,
                        message_type="Old",
                        headers={"x-request-id": "r1"},
                    ),
                )
    finally:
        await connection.close()
    return sent


async def _read_all(url: str, queue: str, count: int) -> list[aiormq.abc.DeliveredMessage]:
    """Every message of ``queue`` by basic.consume (a single-active-consumer quorum queue
    refuses basic.get), acknowledged."""
    got: list[aiormq.abc.DeliveredMessage] = []
    connection = await aiormq.connect(url)
    try:
        channel = await connection.channel()
        await channel.basic_qos(prefetch_count=100)

        async def take(message: aiormq.abc.DeliveredMessage) -> None:
            got.append(message)
            await channel.basic_ack(message.delivery.delivery_tag)

        await channel.basic_consume(queue, take)
        await until(lambda: len(got) >= count, what=f"{count} messages from {queue}")
    finally:
        await connection.close()
    return got


async def _queue_counts(url: str, name: str) -> tuple[int, int] | None:
    connection = await aiormq.connect(url)
    try:
        channel = await connection.channel()
        try:
            ok = await channel.queue_declare(name, passive=True)
        except aiormq.exceptions.ChannelNotFoundEntity:
            return None
        return ok.message_count or 0, ok.consumer_count or 0
    finally:
        await connection.close()


async def _assert_as_declared_with(url: str, sent: dict[str, list[str]]) -> None:
    connection = await aiormq.connect(url)
    try:
        for q in TOPOLOGY.queues:
            # Declaring with the topology's arguments succeeds: quorum, as declared.
            channel = await connection.channel()
            ok = await channel.queue_declare(q.name, durable=True, arguments=dict(q.arguments))
            assert ok.message_count == len(sent[q.name])
            with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed, match="x-queue-type"):
                await (await connection.channel()).queue_declare(
                    q.name, durable=True, arguments={**q.arguments, "x-queue-type": "classic"}
                )
            assert await _queue_counts(url, holding_queue(q.name)) is None
    finally:
        await connection.close()
    for q in TOPOLOGY.queues:
        got = await _read_all(url, q.name, len(sent[q.name]))
        assert [m.header.properties.message_id for m in got] == sent[q.name]  # all, once, in order
        assert [m.body.decode() for m in got] == sent[q.name]
        first = got[0].header.properties
        assert (first.message_type, first.delivery_mode, first.headers) == ("Old", 2, {"x-request-id": "r1"})


async def _assert_bound_as_declared(url: str) -> None:
    """A message published through each binding (mandatory, confirmed) reaches its queue."""
    kinds = {e.name: e.type for e in TOPOLOGY.exchanges}
    connection = await aiormq.connect(url)
    try:
        channel = await connection.channel()
        await channel.confirm_delivery()
        for q in TOPOLOGY.queues:
            for exchange, key in q.bindings:
                routing_key = "wallet-1" if kinds[exchange] == "x-consistent-hash" else key
                before = await _partitions_total(url, exchange, q)
                confirm = await channel.basic_publish(
                    b"{}", exchange=exchange, routing_key=routing_key, mandatory=True
                )
                assert isinstance(confirm, spec.Basic.Ack)
                await until(
                    lambda q=q, exchange=exchange, before=before: _more(url, exchange, q, before),
                    what=f"{q.name} receives through {exchange} / {key}",
                )
    finally:
        await connection.close()


async def _partitions_total(url: str, exchange: str, q: QueueSpec) -> int:
    # A consistent-hash exchange routes a key to one of its partitions: count them together.
    names = [p.name for p in TOPOLOGY.queues if (exchange, "1") in p.bindings] or [q.name]
    total = 0
    for name in names:
        counts = await _queue_counts(url, name)
        total += counts[0] if counts else 0
    return total


async def _more(url: str, exchange: str, q: QueueSpec, before: int) -> bool:
    return await _partitions_total(url, exchange, q) == before + 1


async def test_classic_queues_with_messages_become_quorum_with_every_message_in_order(url: str) -> None:
    sent = await _old_deployment(url)

    dry = await move_to_declared(url, TOPOLOGY, dry_run=True)
    assert {r.outcome for r in dry} == {"would move"}
    assert all(r.moved == PER_QUEUE and "inequivalent arg" in r.reason for r in dry)
    assert await _queue_counts(url, TOPOLOGY.queues[0].name) == (PER_QUEUE, 0)  # untouched

    progress: list[tuple[str, int]] = []
    reports = await move_to_declared(
        url, TOPOLOGY, batch=BATCH, on_progress=lambda q, n: progress.append((q, n))
    )
    assert {r.queue for r in reports} == set(sent)
    assert {r.outcome for r in reports} == {"moved"}
    # out to the holding queue and back: each message moved twice
    assert all(r.moved == 2 * PER_QUEUE for r in reports)
    assert progress and all(n <= 2 * PER_QUEUE for _, n in progress)
    await _assert_as_declared_with(url, sent)
    await _assert_bound_as_declared(url)

    # Again: nothing to do.
    again = await move_to_declared(url, TOPOLOGY, batch=BATCH)
    assert {r.outcome for r in again} == {"as declared"}


@pytest.mark.parametrize(
    ("stage", "leg", "nth"),
    [
        ("moved-batch", "out", 2),  # the old queue half moved out
        ("source-deleted", "out", 1),  # the old queue gone, the messages all in the holding queue
        ("moved-batch", "back", 3),  # the queue declared anew, half moved back
    ],
)
async def test_a_move_stopped_midway_is_finished_by_the_next_run(
    url: str, stage: str, leg: str, nth: int
) -> None:
    sent = await _old_deployment(url)
    victim = next(q.name for q in TOPOLOGY.queues if q.arguments.get("x-single-active-consumer"))
    source = victim if leg == "out" else holding_queue(victim)
    seen = 0

    async def fault(at: str, queue: str) -> None:
        nonlocal seen
        if at == stage and queue == (victim if stage == "source-deleted" else source):
            seen += 1
            if seen == nth:
                raise Stop(f"{stage} {queue}")

    with pytest.raises(Stop):
        await move_to_declared(url, TOPOLOGY, batch=BATCH, fault=fault)
    # Stopped where it was meant to: the messages split as that step leaves them.
    held = await _queue_counts(url, holding_queue(victim))
    old = await _queue_counts(url, victim)
    assert held is not None
    if stage == "source-deleted":
        assert (old, held[0]) == (None, PER_QUEUE)
    elif leg == "out":
        assert (old, held[0]) == ((PER_QUEUE - nth * BATCH, 0), nth * BATCH)
    else:
        assert (old, held[0]) == ((nth * BATCH, 0), PER_QUEUE - nth * BATCH)

    reports = await move_to_declared(url, TOPOLOGY, batch=BATCH)
    assert {r.outcome for r in reports if r.queue == victim} == {"moved"}
    await _assert_as_declared_with(url, sent)


async def test_a_queue_with_a_consumer_is_refused_and_left_whole(url: str) -> None:
    sent = await _old_deployment(url)
    victim = TOPOLOGY.queues[0].name
    connection = await aiormq.connect(url)
    try:
        channel = await connection.channel()
        await channel.basic_qos(prefetch_count=1)
        await channel.basic_consume(victim, lambda message: asyncio.sleep(0))
        with pytest.raises(QueueMoveRefused, match="consumers"):
            await move_to_declared(url, Topology(TOPOLOGY.exchanges, TOPOLOGY.queues[:1]), batch=BATCH)
    finally:
        await connection.close()
    # the consumer's unacknowledged message back in the queue: every one there, nothing held
    await until(
        lambda: _counted(url, victim, (len(sent[victim]), 0)), what=f"{victim} whole, without consumer"
    )
    assert await _queue_counts(url, holding_queue(victim)) is None


async def _counted(url: str, queue: str, expected: tuple[int, int]) -> bool:
    return await _queue_counts(url, queue) == expected


async def test_the_operator_command_moves_them(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    sent = await _old_deployment(url)
    monkeypatch.setattr(broker_cli, "get_settings", lambda: SimpleNamespace(amqp_url=SecretStr(url)))
    monkeypatch.setattr(broker_cli, "console", Console(emoji=False, soft_wrap=True, width=400))

    dry = await asyncio.to_thread(CliRunner().invoke, app, ["broker", "to-quorum", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert f"dry run: {len(sent)} queues to move" in dry.output
    assert await _queue_counts(url, TOPOLOGY.queues[0].name) == (PER_QUEUE, 0)

    done = await asyncio.to_thread(CliRunner().invoke, app, ["broker", "to-quorum", "--batch", "7"])
    assert done.exit_code == 0, done.output
    assert f"every queue as declared; {2 * PER_QUEUE * len(sent)} messages moved" in done.output
    await _assert_as_declared_with(url, sent)
