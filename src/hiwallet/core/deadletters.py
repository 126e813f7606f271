"""Dead letters: look at them without losing any, and replay them once their cause is fixed.

A dead-letter queue holds what consumers gave up on (core/consumer.py: with the reason and the
original exchange and routing key in ``x-hiwallet-*`` headers) and what the queues themselves
dead-lettered after their delivery limit (RabbitMQ's ``x-death`` / ``x-first-death-*``
headers).

Reading is consuming with manual acks on a channel of its own: :func:`list_dead_letters` takes
up to ``limit`` messages without acking any and closes the channel, which gives every one back
to the queue. Nothing is removed by looking. :func:`replay_dead_letters` publishes each chosen
message to its original exchange and routing key (same message_id, type, body; confirmed) and
only then acks it in the dead-letter queue: a crash between the two leaves it in both places,
and the consumer's processed_events absorbs the repeat. Never the other way round.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aio_pika.abc
import aiormq.exceptions
import structlog

from hiwallet.core.broker import BROKER_FAILURES, Broker, BrokerError, BrokerUnavailable, OutgoingMessage
from hiwallet.core.consumer import (
    DEAD_AT_HEADER,
    DEAD_ATTEMPTS_HEADER,
    DEAD_HEADERS,
    DEAD_ORIGINAL_EXCHANGE_HEADER,
    DEAD_ORIGINAL_QUEUE_HEADER,
    DEAD_ORIGINAL_ROUTING_KEY_HEADER,
    DEAD_REASON_HEADER,
)
from hiwallet.core.timeouts import within

__all__ = ["DeadLetter", "list_dead_letters", "replay_dead_letters"]

log = structlog.get_logger(__name__)

# How long to wait for the next message once the queue's count is not reached (a message
# another reader holds is not delivered to us): bounded, so a read always ends.
IDLE_WAIT_S = 1.0
MAX_READ = 10_000
# Headers RabbitMQ adds when it dead-letters or redelivers: not carried into a replay.
_BROKER_HEADERS = frozenset({"x-death", "x-delivery-count", "x-first-death-exchange", "x-first-death-queue",
                             "x-first-death-reason", "x-last-death-exchange", "x-last-death-queue",
                             "x-last-death-reason"})  # fmt: skip


@dataclass(frozen=True)
class DeadLetter:
    message_id: str
    type: str
    reason: str
    original_exchange: str
    original_routing_key: str
    original_queue: str
    attempts: str
    dead_at: str
    body_bytes: int
    replayed: bool = False


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return "" if value is None else str(value)


def _origin(headers: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """(exchange, routing key, queue, reason) from our headers, else from RabbitMQ's x-death."""
    exchange = _text(headers.get(DEAD_ORIGINAL_EXCHANGE_HEADER))
    key = _text(headers.get(DEAD_ORIGINAL_ROUTING_KEY_HEADER))
    queue = _text(headers.get(DEAD_ORIGINAL_QUEUE_HEADER))
    reason = _text(headers.get(DEAD_REASON_HEADER))
    if exchange or key:
        return exchange, key, queue, reason
    deaths = headers.get("x-death")
    if isinstance(deaths, list) and deaths and isinstance(deaths[0], Mapping):
        death = deaths[0]
        keys = death.get("routing-keys") or []
        return (
            _text(death.get("exchange")),
            _text(keys[0]) if keys else "",
            _text(death.get("queue")),
            f"broker: {_text(death.get('reason'))}",
        )
    return "", "", "", reason


def _describe(message: aio_pika.abc.AbstractIncomingMessage, replayed: bool = False) -> DeadLetter:
    headers = dict(message.headers or {})
    exchange, key, queue, reason = _origin(headers)
    return DeadLetter(
        message_id=message.message_id or "",
        type=message.type or "",
        reason=reason,
        original_exchange=exchange,
        original_routing_key=key,
        original_queue=queue,
        attempts=_text(headers.get(DEAD_ATTEMPTS_HEADER)),
        dead_at=_text(headers.get(DEAD_AT_HEADER)),
        body_bytes=len(message.body),
        replayed=replayed,
    )


async def _read(
    broker: Broker, queue_name: str, limit: int
) -> tuple[aio_pika.abc.AbstractChannel, list[aio_pika.abc.AbstractIncomingMessage]]:
    """Up to ``limit`` messages of the queue, delivered and not acked, on a channel of their
    own (the caller closes it: every message not acked goes back)."""
    if not 1 <= limit <= MAX_READ:
        raise ValueError(f"limit must be 1..{MAX_READ}, not {limit}")
    channel = await broker.consumer_channel(prefetch=limit)
    try:
        try:
            queue = await channel.declare_queue(queue_name, passive=True)
        except aiormq.exceptions.ChannelNotFoundEntity as exc:
            raise BrokerError(f"no queue {queue_name!r}") from exc
        except BROKER_FAILURES as exc:
            raise BrokerUnavailable(f"cannot read {queue_name!r}: {type(exc).__name__}") from exc
        result = queue.declaration_result
        # The count stops the read early once reached. It is only a hint: messages another
        # reader just gave back (a channel closing) may not be counted yet, so a count of 0
        # still waits IDLE_WAIT_S for a first message.
        count = (result.message_count or 0) if result is not None else 0
        expected = min(limit, count) if count else limit
        taken: list[aio_pika.abc.AbstractIncomingMessage] = []
        async with queue.iterator(no_ack=False) as messages:
            while len(taken) < expected:
                try:
                    message = await within(messages.__anext__(), IDLE_WAIT_S)
                except (TimeoutError, StopAsyncIteration):
                    break
                taken.append(message)
            # Leaving the iterator cancels the consumer; what it holds stays unacked until the
            # channel closes.
        return channel, taken
    except BaseException:
        with contextlib.suppress(Exception):
            await channel.close()
        raise


async def list_dead_letters(broker: Broker, queue: str, *, limit: int = 100) -> list[DeadLetter]:
    """The first ``limit`` dead letters of ``queue``, all left in it."""
    channel, taken = await _read(broker, queue, limit)
    try:
        return [_describe(m) for m in taken]
    finally:
        # Closing the channel gives back every unacked message (in quorum queues, ahead of the
        # rest), none removed.
        with contextlib.suppress(Exception):
            await channel.close()


def _replay_message(
    message: aio_pika.abc.AbstractIncomingMessage, exchange: str, key: str
) -> OutgoingMessage:
    headers = {
        k: v
        for k, v in (message.headers or {}).items()
        if isinstance(v, str) and k not in DEAD_HEADERS and k not in _BROKER_HEADERS
    }
    return OutgoingMessage(
        message_id=message.message_id or "",
        exchange=exchange,
        routing_key=key,
        type=message.type or "",
        body=message.body,
        headers=headers,
        correlation_id=message.correlation_id,
    )


async def replay_dead_letters(
    broker: Broker,
    queue: str,
    *,
    limit: int = 100,
    message_id: str | None = None,
    scan_limit: int = 1_000,
) -> list[DeadLetter]:
    """Replay up to ``limit`` dead letters of ``queue`` (only ``message_id`` if given, looked
    for among the first ``scan_limit``): each is published to its original exchange and routing
    key with confirms, then acked here. Returns what was replayed; one whose origin is unknown
    is left in the queue (and listed with replayed=False)."""
    if limit < 1:
        raise ValueError("limit must be at least 1")
    channel, taken = await _read(broker, queue, scan_limit if message_id else limit)
    done: list[DeadLetter] = []
    try:
        for message in taken:
            if len([d for d in done if d.replayed]) >= limit:
                break
            if message_id is not None and message.message_id != message_id:
                continue
            headers = dict(message.headers or {})
            exchange, key, _, _ = _origin(headers)
            if not exchange or not message.message_id:
                log.warning("dead letter without an origin: left in its queue", message_id=message.message_id)
                done.append(_describe(message))
                continue
            await broker.publish([_replay_message(message, exchange, key)])
            try:
                await message.ack()
            except Exception as exc:
                # Published, not acked: it stays a dead letter too (a repeat the consumer absorbs).
                raise BrokerUnavailable(f"replayed {message.message_id} but could not ack it") from exc
            log.info("dead letter replayed", message_id=message.message_id, exchange=exchange)
            done.append(_describe(message, replayed=True))
    finally:
        with contextlib.suppress(Exception):
            await channel.close()
    return done
