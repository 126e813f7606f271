"""RabbitMQ, through aio-pika: the topology, publishing with confirms, channels for consumers.

Every aio-pika / aiormq error is translated here (``raise ... from exc``) into one of two
answers a caller can act on:

- :class:`BrokerUnavailable`: the connection or channel is lost, or a confirm did not arrive in
  time. A retry cures it; for the outbox relay it means "keep the rows unsent and back off".
- :class:`PublishRefused`: the broker nacked a message, or could not route it (every publish
  is *mandatory*: a message no queue would receive is returned, not silently dropped). A
  defect (a missing binding, a wrong exchange), never "retry later".

One robust connection per :class:`Broker` (aio-pika reconnects it and restores its channels
and consumers); publishing shares one channel in confirm mode, and each consumer gets its own
channel (:meth:`Broker.consumer_channel`).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aio_pika
import aio_pika.abc
import aiormq
import aiormq.exceptions
import pamqp.constants
import pamqp.exceptions
import pamqp.frame
import structlog
from aiormq.abc import ChannelFrame, DeliveredMessage
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

from hiwallet.core import tracing
from hiwallet.core.logging import REQUEST_ID
from hiwallet.core.timeouts import within

__all__ = [
    "BROKER_FAILURES",
    "REQUEST_ID_HEADER",
    "Broker",
    "BrokerError",
    "BrokerUnavailable",
    "ExchangeSpec",
    "OutgoingMessage",
    "PublishRefused",
    "QueueSpec",
    "Topology",
    "dead_letter_topology",
    "partition_queues",
    "partitioned_topology",
]

log = structlog.get_logger(__name__)

# The header that carries the HTTP request id from the edge to every message it caused.
REQUEST_ID_HEADER = "x-request-id"
# How often a message may be delivered before the queue itself dead-letters it (a consumer that
# crashes on it every time: kill -9, OOM). Our consumer dead-letters a poison message long before.
DELIVERY_LIMIT = 10


class BrokerError(Exception):
    """Base of the broker's errors."""


class BrokerUnavailable(BrokerError):
    """The connection or channel is lost, or a confirm did not arrive in time: a retry cures it.
    A message whose confirm timed out may still have been delivered (at least once)."""


class PublishRefused(BrokerError):
    """The broker nacked a message or could not route it (mandatory): a defect, not "retry".

    ``message_ids`` names the refused messages of the batch when every other one was confirmed
    (the caller may count those as sent); empty when that is not known."""

    def __init__(self, message: str, message_ids: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.message_ids: tuple[str, ...] = tuple(message_ids)


@dataclass(frozen=True)
class OutgoingMessage:
    message_id: str
    exchange: str
    routing_key: str
    type: str
    body: bytes  # JSON
    # Carried as AMQP headers; "x-request-id" is taken from the current request if absent.
    headers: Mapping[str, str] = field(default_factory=dict)
    correlation_id: str | None = None


@dataclass(frozen=True)
class ExchangeSpec:
    name: str
    type: str  # "direct", "topic", "x-consistent-hash", ...
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class QueueSpec:
    name: str
    arguments: Mapping[str, Any]
    bindings: tuple[tuple[str, str], ...]  # (exchange, routing key); a weight for consistent-hash


@dataclass(frozen=True)
class Topology:
    exchanges: tuple[ExchangeSpec, ...]
    queues: tuple[QueueSpec, ...]

    def __add__(self, other: Topology) -> Topology:
        return Topology(self.exchanges + other.exchanges, self.queues + other.queues)


def partition_queues(exchange: str, partitions: int) -> list[str]:
    """The partition queues of a consistent-hash exchange: ``<exchange>.p0`` ... ``p<n-1>``."""
    return [f"{exchange}.p{i}" for i in range(partitions)]


def dead_letter_topology(dead_letter_exchange: str, dead_queue: str, dead_key: str) -> Topology:
    """The dead-letter exchange (direct) and one dead-letter queue bound with ``dead_key``.

    The queue is quorum but *not* single-active-consumer: RabbitMQ 3.10 refuses basic.get on
    a quorum queue with SAC, and `hiwallet dead-letters list` reads it while the consumers run.
    It has no delivery limit either: listing returns each message to the queue, which counts
    as a delivery, and a dead letter must never be dropped for being looked at."""
    return Topology(
        exchanges=(ExchangeSpec(dead_letter_exchange, "direct"),),
        queues=(
            QueueSpec(
                dead_queue,
                {"x-queue-type": "quorum"},
                ((dead_letter_exchange, dead_key),),
            ),
        ),
    )


def partitioned_topology(
    exchange: str,
    *,
    partitions: int,
    dead_letter_exchange: str,
    dead_letter_key: str,
    dead_letter_queue: str,
    delivery_limit: int = DELIVERY_LIMIT,
) -> Topology:
    """A consistent-hash exchange over ``partitions`` quorum queues, each with a single active
    consumer (one key's messages are handled in order, by one consumer at a time), a delivery
    limit, and the dead-letter exchange and queue. The tests pass their own names."""
    if not 1 <= partitions <= 64:
        raise ValueError(f"partitions must be 1..64, not {partitions}")
    queue_arguments = {
        "x-queue-type": "quorum",
        "x-single-active-consumer": True,
        "x-delivery-limit": delivery_limit,
        "x-dead-letter-exchange": dead_letter_exchange,
        "x-dead-letter-routing-key": dead_letter_key,
    }
    partitioned = Topology(
        exchanges=(ExchangeSpec(exchange, "x-consistent-hash"),),
        queues=tuple(
            # Weight "1" each: the hash ring splits the keys evenly.
            QueueSpec(name, dict(queue_arguments), ((exchange, "1"),))
            for name in partition_queues(exchange, partitions)
        ),
    )
    return partitioned + dead_letter_topology(dead_letter_exchange, dead_letter_queue, dead_letter_key)


# What a lost connection or channel looks like from aio-pika and aiormq (for modules that use an
# aio-pika channel from consumer_channel directly: translate these as BrokerUnavailable).
BROKER_FAILURES: tuple[type[BaseException], ...] = (
    aiormq.exceptions.AMQPConnectionError,
    aiormq.exceptions.ChannelInvalidStateError,
    aiormq.exceptions.ChannelClosed,
    aiormq.exceptions.AMQPError,
    pamqp.exceptions.PAMQPException,
    ConnectionError,
    OSError,
    TimeoutError,
    RuntimeError,  # aio-pika's "channel/connection closed" states
)


def _properties_headers(message: OutgoingMessage) -> dict[str, Any]:
    headers: dict[str, Any] = dict(message.headers)
    if REQUEST_ID_HEADER not in headers:
        request_id = REQUEST_ID.get()
        if isinstance(request_id, str):
            headers[REQUEST_ID_HEADER] = request_id
    tracer = tracing.STATE.tracer
    if tracer is not None and tracing.TRACEPARENT_HEADER not in headers:
        # Published from inside a trace (not relayed: an outbox row carries its writer's).
        tracing.inject_producer(
            tracer, headers, message.exchange, message.routing_key, message.correlation_id
        )
    return headers


# A published message's frames, marshalled here rather than by pamqp: its generic encoder (a
# type looked up per property and per header value) was ~19 µs of CPU a message, the largest
# part of a relay's per-message work (topup-webhook's relay: docs/performance.md, top-ups,
# 2026-12-06). This writes the same bytes (tests/core/test_broker_frames.py compares them with
# pamqp's for every shape) for what this module publishes: a persistent JSON message whose
# header values are all text. Anything else (a header value of another type, a text past its
# AMQP length, an exchange name pamqp refuses) is left to pamqp, which encodes or refuses it.
_FRAME = struct.Struct(">BHI")
_FRAME_END = pamqp.constants.FRAME_END_CHAR
_PUBLISH_METHOD = struct.pack(">IH", aiormq.spec.Basic.Publish.index, 0)  # the method, ticket 0
_MANDATORY = b"\x01"  # the bits after the routing key: mandatory, not immediate
_CONTENT_HEADER = struct.Struct(">HHQH")  # class, weight, body size, property flags
_PROPERTY_FLAGS = aiormq.spec.Basic.Properties.flags
_TIMESTAMP = struct.Struct(">Q")
_LONG = struct.Struct(">I")
_EXCHANGE_NAME = pamqp.constants.DOMAIN_REGEX["exchange-name"]
_JSON = b"\x10application/json"
_PERSISTENT = b"\x02"


class _NotOurs(Exception):
    """A message this module's encoder leaves to pamqp."""


def _shortstr(text: str) -> bytes:
    raw = text.encode()
    if len(raw) > 255:
        raise _NotOurs
    return bytes((len(raw),)) + raw


def _header_table(headers: Mapping[str, Any]) -> bytes:
    parts = []
    for key, value in sorted(headers.items()):
        if not isinstance(value, str) or not isinstance(key, str) or len(key.encode()) > 128:
            raise _NotOurs  # pamqp encodes other types, and truncates a long key with a warning
        raw = value.encode()
        parts.append(_shortstr(key) + b"S" + _LONG.pack(len(raw)) + raw)
    table = b"".join(parts)
    return _LONG.pack(len(table)) + table


def _frame(kind: int, channel: int, payload: bytes) -> bytes:
    return _FRAME.pack(kind, channel, len(payload)) + payload + _FRAME_END


def publish_frames(
    channel: int,
    message: OutgoingMessage,
    headers: Mapping[str, Any],
    timestamp_s: int,
    app_id: str,
    max_content_size: int,
) -> bytes:
    """``message``'s Basic.Publish (mandatory), content header and body frames on ``channel``,
    as pamqp marshals them for :meth:`Broker._properties` (``timestamp_s``: its timestamp's
    whole seconds, as pamqp encodes it)."""
    try:
        if len(message.exchange) > 127 or not _EXCHANGE_NAME.fullmatch(message.exchange):
            raise _NotOurs  # pamqp refuses it (ValueError), as before
        method = _PUBLISH_METHOD + _shortstr(message.exchange) + _shortstr(message.routing_key) + _MANDATORY
        # The properties in pamqp's order, each present unless None or empty, as pamqp omits them.
        flags = (
            _PROPERTY_FLAGS["content_type"] | _PROPERTY_FLAGS["headers"] | _PROPERTY_FLAGS["delivery_mode"]
        )
        parts = [_JSON, _header_table(headers), _PERSISTENT]
        if message.correlation_id:
            flags |= _PROPERTY_FLAGS["correlation_id"]
            parts.append(_shortstr(message.correlation_id))
        if message.message_id:
            flags |= _PROPERTY_FLAGS["message_id"]
            parts.append(_shortstr(message.message_id))
        flags |= _PROPERTY_FLAGS["timestamp"]
        parts.append(_TIMESTAMP.pack(timestamp_s))
        if message.type:
            flags |= _PROPERTY_FLAGS["message_type"]
            parts.append(_shortstr(message.type))
        if app_id:
            flags |= _PROPERTY_FLAGS["app_id"]
            parts.append(_shortstr(app_id))
    except _NotOurs:
        return _pamqp_frames(channel, message, headers, timestamp_s, app_id, max_content_size)
    body = message.body
    content = _CONTENT_HEADER.pack(aiormq.spec.Basic.frame_id, 0, len(body), flags) + b"".join(parts)
    out = [
        _frame(pamqp.constants.FRAME_METHOD, channel, method),
        _frame(pamqp.constants.FRAME_HEADER, channel, content),
    ]
    out.extend(
        _frame(pamqp.constants.FRAME_BODY, channel, body[i : i + max_content_size])
        for i in range(0, len(body), max_content_size)
    )
    return b"".join(out)


def _pamqp_frames(
    channel: int,
    message: OutgoingMessage,
    headers: Mapping[str, Any],
    timestamp_s: int,
    app_id: str,
    max_content_size: int,
) -> bytes:
    """:func:`publish_frames` by pamqp: the message's frames as the encoder above writes them,
    for what it leaves to pamqp (and for the tests' comparison)."""
    properties = aiormq.spec.Basic.Properties(
        content_type="application/json",
        delivery_mode=2,  # persistent
        message_id=message.message_id,
        correlation_id=message.correlation_id,
        message_type=message.type,
        timestamp=datetime.fromtimestamp(timestamp_s, UTC),
        headers=dict(headers),
        app_id=app_id,
    )
    body = message.body
    frames: list[Any] = [
        aiormq.spec.Basic.Publish(exchange=message.exchange, routing_key=message.routing_key, mandatory=True),
        ContentHeader(properties=properties, body_size=len(body)),
    ]
    frames.extend(ContentBody(body[i : i + max_content_size]) for i in range(0, len(body), max_content_size))
    return b"".join(pamqp.frame.marshal(frame, channel) for frame in frames)


class Broker:
    def __init__(
        self,
        url: str,
        *,
        client_name: str,
        connect_timeout_s: float = 5.0,
        confirm_timeout_s: float = 10.0,
        reconnect_interval_s: float = 1.0,
    ) -> None:
        if connect_timeout_s <= 0 or confirm_timeout_s <= 0 or reconnect_interval_s <= 0:
            raise ValueError("the broker's timeouts must be positive")
        self._url = url
        self.client_name = client_name
        self.connect_timeout_s = connect_timeout_s
        self.confirm_timeout_s = confirm_timeout_s
        # How soon the robust connection tries again after losing RabbitMQ (aio-pika: 5 s).
        self.reconnect_interval_s = reconnect_interval_s
        self._connection: aio_pika.abc.AbstractRobustConnection | None = None
        self._publish_channel: aio_pika.abc.AbstractChannel | None = None
        self._lock = asyncio.Lock()
        self._closed = False
        # The single-active-consumer queues declared through this broker: their order matters,
        # and a Consumer refuses to handle them concurrently (core/consumer.py).
        self.single_active_queues: set[str] = set()

    async def start(self) -> None:
        """Connect (bounded by connect_timeout_s) and open the publishing channel. Raises
        BrokerUnavailable if RabbitMQ cannot be reached; publish() tries again later."""
        self._closed = False
        await self._ensure()

    async def _ensure(self) -> aio_pika.abc.AbstractChannel:
        if self._closed:
            raise BrokerUnavailable("the broker connection is closed")
        async with self._lock:
            if self._connection is None:
                try:
                    self._connection = await aio_pika.connect_robust(
                        self._url,
                        timeout=self.connect_timeout_s,
                        client_properties={"connection_name": self.client_name},
                        reconnect_interval=self.reconnect_interval_s,
                    )
                except asyncio.CancelledError:
                    raise
                except BROKER_FAILURES as exc:
                    raise BrokerUnavailable(f"cannot connect to RabbitMQ: {type(exc).__name__}") from exc
            if self._publish_channel is None:
                try:
                    async with asyncio.timeout(self.connect_timeout_s):
                        # on_return_raises: an unroutable mandatory message fails its publish
                        # (PublishError) instead of going to a callback nobody watches.
                        self._publish_channel = await self._connection.channel(
                            publisher_confirms=True, on_return_raises=True
                        )
                except asyncio.CancelledError:
                    raise
                except BROKER_FAILURES as exc:
                    raise BrokerUnavailable(f"cannot open a channel: {type(exc).__name__}") from exc
            return self._publish_channel

    @property
    def connected(self) -> bool:
        connection = self._connection
        return connection is not None and not connection.is_closed and connection.connected.is_set()

    async def close(self) -> None:
        self._closed = True
        async with self._lock:
            connection, self._connection, self._publish_channel = self._connection, None, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await within(connection.close(), self.connect_timeout_s)

    async def check(self) -> None:
        """/ready: connected, and the publishing channel open. Raises BrokerUnavailable."""
        channel = await self._ensure()
        if not self.connected or channel.is_closed:
            raise BrokerUnavailable("not connected to RabbitMQ")

    async def declare(self, topology: Topology) -> None:
        """Declare exchanges, queues and bindings (idempotent). A queue that exists with other
        arguments is refused by RabbitMQ (PRECONDITION_FAILED): PublishRefused-like, a defect,
        raised as BrokerError."""
        connection = await self._connection_or_raise()
        try:
            async with asyncio.timeout(self.confirm_timeout_s * 3):
                channel = await connection.channel(publisher_confirms=False)
                try:
                    exchanges: dict[str, aio_pika.abc.AbstractExchange] = {}
                    for spec in topology.exchanges:
                        exchanges[spec.name] = await channel.declare_exchange(
                            spec.name, spec.type, durable=True, arguments=dict(spec.arguments)
                        )
                    for queue_spec in topology.queues:
                        queue = await channel.declare_queue(
                            queue_spec.name, durable=True, arguments=dict(queue_spec.arguments)
                        )
                        for exchange, key in queue_spec.bindings:
                            await queue.bind(exchanges.get(exchange, exchange), routing_key=key)
                        if queue_spec.arguments.get("x-single-active-consumer"):
                            self.single_active_queues.add(queue_spec.name)
                finally:
                    with contextlib.suppress(Exception):
                        await channel.close()
        except asyncio.CancelledError:
            raise
        except aiormq.exceptions.ChannelPreconditionFailed as exc:
            raise BrokerError(f"the topology differs from what exists: {exc}") from exc
        except BROKER_FAILURES as exc:
            raise BrokerUnavailable(f"cannot declare the topology: {type(exc).__name__}") from exc
        log.info("broker topology declared", exchanges=len(topology.exchanges), queues=len(topology.queues))

    async def delete(self, topology: Topology) -> None:
        """Delete the queues and exchanges of ``topology`` (tests, and nothing else)."""
        connection = await self._connection_or_raise()
        channel = await connection.channel(publisher_confirms=False)
        try:
            underlay = await channel.get_underlay_channel()
            for queue_spec in topology.queues:
                await underlay.queue_delete(queue_spec.name)
            for spec in topology.exchanges:
                await underlay.exchange_delete(spec.name)
        finally:
            with contextlib.suppress(Exception):
                await channel.close()

    async def _connection_or_raise(self) -> aio_pika.abc.AbstractRobustConnection:
        await self._ensure()
        connection = self._connection
        if connection is None or not self.connected:
            raise BrokerUnavailable("not connected to RabbitMQ")
        return connection

    async def consumer_channel(self, prefetch: int = 1) -> aio_pika.abc.AbstractChannel:
        """A channel of its own for a consumer, with ``prefetch`` unacknowledged messages at
        most (robust: restored, with its consumers, after a reconnect)."""
        if not 1 <= prefetch <= 65_535:
            raise ValueError(f"prefetch must be 1..65535, not {prefetch}")
        connection = await self._connection_or_raise()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
                await channel.set_qos(prefetch_count=prefetch)
        except asyncio.CancelledError:
            raise
        except BROKER_FAILURES as exc:
            raise BrokerUnavailable(f"cannot open a consumer channel: {type(exc).__name__}") from exc
        return channel

    async def publish(self, messages: Sequence[OutgoingMessage]) -> None:
        """Publish ``messages`` (persistent, mandatory) and wait until the broker confirmed
        every one: returns only then. Raises PublishRefused if any was nacked or unroutable,
        BrokerUnavailable if the connection failed or a confirm did not arrive within
        confirm_timeout_s. After an error, any of the messages may or may not have been
        delivered: the caller publishes them all again (consumers deduplicate by message_id)."""
        if not messages:
            return
        channel = await self._ensure()
        if not self.connected or channel.is_closed:
            # A robust connection that is reconnecting would make the publish wait for it;
            # answer at once instead, and let the caller back off.
            raise BrokerUnavailable("not connected to RabbitMQ")
        started = time.monotonic()
        try:
            async with asyncio.timeout(self.confirm_timeout_s):
                underlay = await channel.get_underlay_channel()
                if isinstance(underlay, aiormq.Channel) and underlay.publisher_confirms:
                    results = await self._publish_batch(underlay, messages)
                else:  # not aiormq's own channel: its public API, a write per message
                    results = await asyncio.gather(
                        *(self._publish_one(underlay, m) for m in messages), return_exceptions=True
                    )
        except TimeoutError as exc:
            raise BrokerUnavailable(
                f"no confirm within {self.confirm_timeout_s} s for {len(messages)} messages"
            ) from exc
        except asyncio.CancelledError:
            raise
        except BROKER_FAILURES as exc:
            raise BrokerUnavailable(f"publishing failed: {type(exc).__name__}") from exc
        # The first unavailability wins (nothing is known to be confirmed then); refusals alone
        # name their messages: every other message of the batch was confirmed.
        refused: list[str] = []
        first_refusal: PublishRefused | None = None
        for message, result in zip(messages, results, strict=True):
            if not isinstance(result, BaseException):
                continue
            try:
                self._raise_translated(result)
            except PublishRefused as exc:
                refused.append(message.message_id)
                first_refusal = first_refusal or exc
        if first_refusal is not None:
            raise PublishRefused(
                f"{len(refused)} of {len(messages)} refused: {first_refusal}", refused
            ) from (first_refusal.__cause__ or first_refusal)
        log.debug(
            "published", messages=len(messages), confirm_ms=round((time.monotonic() - started) * 1000, 2)
        )

    @staticmethod
    def _raise_translated(exc: BaseException) -> None:
        if isinstance(exc, PublishRefused | BrokerUnavailable):
            raise exc
        if isinstance(exc, aiormq.exceptions.PublishError):
            raise PublishRefused("a message was returned unroutable (mandatory)") from exc
        if isinstance(exc, aiormq.exceptions.DeliveryError):
            raise PublishRefused("the broker nacked a message") from exc
        if isinstance(exc, aiormq.exceptions.ChannelNotFoundEntity):
            raise PublishRefused(f"no such exchange: {exc}") from exc
        if isinstance(exc, asyncio.CancelledError):
            raise exc
        if isinstance(exc, BROKER_FAILURES):
            raise BrokerUnavailable(f"publishing failed: {type(exc).__name__}") from exc
        raise exc

    def _properties(self, message: OutgoingMessage) -> aiormq.spec.Basic.Properties:
        return aiormq.spec.Basic.Properties(
            content_type="application/json",
            delivery_mode=2,  # persistent
            message_id=message.message_id,
            correlation_id=message.correlation_id,
            message_type=message.type,
            timestamp=datetime.now(UTC),
            headers=_properties_headers(message),
            app_id=self.client_name,
        )

    async def _publish_batch(
        self, underlay: aiormq.Channel, messages: Sequence[OutgoingMessage]
    ) -> list[object]:
        """Every message's frames in one write, then every confirm: one result per message
        (the broker's Ack, or the exception its confirmation got: PublishError for a return,
        DeliveryError for a nack, the channel's close for a missing exchange).

        aiormq's ``basic_publish`` queues each message to the connection's writer and waits
        for that write and drain under the channel's lock before the next message may go:
        a system call and several task switches per message, about a third of
        topup-webhook's CPU under load. This does what it does for a whole batch: under the
        same lock, number the messages (delivery tags), register each one's confirmation
        where the channel's reader resolves it (acks, nacks, returns by message id), queue
        one marshalled payload, wait for it to be written. Written against aiormq 7.2
        (requirements.lock); tests/core/test_broker.py holds what it must keep."""
        # One timestamp for the batch: AMQP's is in whole seconds.
        now_s = int(time.time())
        payload = b"".join(
            publish_frames(
                underlay.number,
                message,
                _properties_headers(message),
                now_s,
                self.client_name,
                underlay.max_content_size,
            )
            for message in messages
        )
        confirmations: list[asyncio.Future[Any]] = []
        async with underlay.lock:
            first_tag = underlay.delivery_tag + 1
            for offset, message in enumerate(messages):
                tag = first_tag + offset
                confirmation = underlay.create_future()
                underlay.confirmations[tag] = confirmation
                underlay.message_id_delivery_tag[message.message_id] = tag
                confirmation.add_done_callback(_forget_message_id(underlay, message.message_id, tag))
                confirmations.append(confirmation)
            underlay.delivery_tag = first_tag + len(messages) - 1
            written = underlay.create_future()
            queued = False
            try:
                await underlay.write_queue.put(
                    ChannelFrame(payload=payload, should_close=False, drain_future=written)
                )
                queued = True
                await written
            except BaseException as exc:
                if not queued:
                    # The broker has not seen them: give the delivery tags back (still under
                    # the lock), as basic_publish does.
                    underlay.delivery_tag = first_tag - 1
                    for offset in range(len(messages)):
                        underlay.confirmations.pop(first_tag + offset, None)
                for confirmation in confirmations:
                    confirmation.cancel()
                written.cancel()
                if not isinstance(exc, Exception):
                    raise  # cancelled (the confirm timeout, a stop): as it came
                # The channel failed before the write: each message's answer, as basic_publish
                # would have raised it for each.
                return [exc] * len(messages)
        results: list[object] = []
        for message, result in zip(
            messages, await asyncio.gather(*confirmations, return_exceptions=True), strict=True
        ):
            if not isinstance(result, BaseException):
                try:
                    _check_confirmation(result, message)
                except PublishRefused as refused:
                    result = refused
            results.append(result)
        return results

    async def _publish_one(self, underlay: aiormq.abc.AbstractChannel, message: OutgoingMessage) -> None:
        result = await underlay.basic_publish(
            message.body,
            exchange=message.exchange,
            routing_key=message.routing_key,
            properties=self._properties(message),
            mandatory=True,
        )
        _check_confirmation(result, message)


def _check_confirmation(result: object, message: OutgoingMessage) -> None:
    if isinstance(result, DeliveredMessage):  # returned (if on_return_raises were off)
        raise PublishRefused(f"unroutable: exchange {message.exchange!r}")
    if result is not None and not isinstance(result, aiormq.spec.Basic.Ack):
        raise PublishRefused(f"not acknowledged: {type(result).__name__}")


def _forget_message_id(
    underlay: aiormq.Channel, message_id: str, tag: int
) -> Callable[[asyncio.Future[Any]], None]:
    """Once a confirmation is settled, the channel no longer needs to find its delivery tag by
    message id (for a return); a later publish of the same id may have taken the entry."""

    def forget(_: asyncio.Future[Any]) -> None:
        if underlay.message_id_delivery_tag.get(message_id) == tag:
            underlay.message_id_delivery_tag.pop(message_id)

    return forget
