"""Bring a running broker's queues to the topology's declaration without losing a message: a
queue declared otherwise (a classic queue of a deployment made before the queues were quorum,
one declared by hand) cannot be changed in place, RabbitMQ refuses the new arguments
(PRECONDITION_FAILED), so it is moved through a holding queue and declared again.

AMQP only (no management plugin): a queue is "as declared" when declaring it with the
topology's arguments succeeds; otherwise RabbitMQ's refusal names the first argument that
differs (a classic queue differs at least in ``x-queue-type``).

For one queue ``Q`` (holding queue ``Q.moving``, a plain quorum queue):

1. ``Q`` differs: declare the holding queue, move ``Q``'s messages into it, bind it like ``Q``
   (the topology's bindings), unbind ``Q``, move what arrived meanwhile, delete ``Q`` once it is
   empty and unused (a queue with consumers is refused: stop them and run again).
2. Declare ``Q`` as the topology says (unbound), move the holding queue's messages back, bind
   ``Q``, unbind the holding queue, move what arrived meanwhile, delete the holding queue.

A message is moved by basic.get, published to the default exchange (mandatory, confirmed) with
its properties (less a quorum queue's x-delivery-count), and acknowledged on the source only
once confirmed: bounded batches, in order, so a partition's order survives. A crash leaves
each message in one queue or, if it fell between the confirm and the ack, in both (consumers
deduplicate by message id). Every step is idempotent, so running it again finishes the job:
the queues' states say where it stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import aiormq
import aiormq.abc
import aiormq.exceptions
import structlog
from aiormq import spec

from hiwallet.core.broker import BROKER_FAILURES, BrokerError, BrokerUnavailable, QueueSpec, Topology
from hiwallet.core.timeouts import within

__all__ = [
    "HOLDING_SUFFIX",
    "QueueMoveRefused",
    "QueueReport",
    "holding_queue",
    "move_to_declared",
]

log = structlog.get_logger(__name__)

HOLDING_SUFFIX = ".moving"
# A queue that keeps refilling (a publisher still running) is drained again at most this often
# before its deletion is given up: the operator stops the publishers and runs it again.
MAX_DELETE_ATTEMPTS = 5

Outcome = Literal["as declared", "created", "moved", "would create", "would move", "would finish"]
# (queue, messages moved so far for it): for a progress bar.
Progress = Callable[[str, int], None]
# (stage, queue), awaited after each step ("moved-batch", the source; "source-deleted", the
# queue): the tests stop the move midway with it.
Fault = Callable[[str, str], Awaitable[None]]


class QueueMoveRefused(BrokerError):
    """A queue cannot be moved now (consumers attached, it keeps refilling, an exchange of the
    topology exists with another type): nothing was lost; fix it and run again."""


@dataclass(frozen=True)
class QueueReport:
    queue: str
    outcome: Outcome
    moved: int = 0
    # RabbitMQ's refusal of the declared arguments: what differed (the first argument).
    reason: str = ""


def holding_queue(name: str) -> str:
    return name + HOLDING_SUFFIX


@dataclass(frozen=True)
class _Probe:
    exists: bool
    messages: int = 0
    consumers: int = 0


async def _noop_fault(stage: str, queue: str) -> None:
    return None


class _Mover:
    def __init__(
        self,
        connection: aiormq.abc.AbstractConnection,
        *,
        batch: int,
        timeout_s: float,
        on_progress: Progress | None,
        fault: Fault,
    ) -> None:
        self.connection = connection
        self.batch = batch
        self.timeout_s = timeout_s
        self.on_progress = on_progress
        self.fault = fault

    @contextlib.asynccontextmanager
    async def _channel(self, *, confirms: bool = False) -> AsyncIterator[aiormq.abc.AbstractChannel]:
        # A refused declare closes its channel: every probe and step gets a fresh one.
        channel = await within(
            self.connection.channel(publisher_confirms=confirms, on_return_raises=True), self.timeout_s
        )
        try:
            yield channel
        finally:
            if not channel.is_closed:
                with contextlib.suppress(*BROKER_FAILURES):
                    await within(channel.close(), self.timeout_s)

    async def passive(self, name: str) -> _Probe:
        try:
            async with self._channel() as channel:
                ok = await within(channel.queue_declare(name, passive=True), self.timeout_s)
        except aiormq.exceptions.ChannelNotFoundEntity:
            return _Probe(False)
        return _Probe(True, ok.message_count or 0, ok.consumer_count or 0)

    async def differs(self, queue: QueueSpec) -> str:
        """ "" when ``queue`` exists as declared (or was just created so), else RabbitMQ's
        refusal of the declared arguments."""
        try:
            async with self._channel() as channel:
                await within(
                    channel.queue_declare(queue.name, durable=True, arguments=dict(queue.arguments)),
                    self.timeout_s,
                )
        except aiormq.exceptions.ChannelPreconditionFailed as exc:
            return str(exc) or "PRECONDITION_FAILED"
        return ""

    async def declare(self, name: str, arguments: dict[str, Any]) -> None:
        async with self._channel() as channel:
            await within(channel.queue_declare(name, durable=True, arguments=arguments), self.timeout_s)

    async def rebind(self, queue: QueueSpec, *, bind: str, unbind: str) -> None:
        """Bind ``bind`` with ``queue``'s bindings, then unbind ``unbind`` (in that order: no
        moment where a publish finds no queue; unbinding what is not bound is a no-op)."""
        async with self._channel() as channel:
            for exchange, key in queue.bindings:
                await within(channel.queue_bind(bind, exchange, routing_key=key), self.timeout_s)
            for exchange, key in queue.bindings:
                await within(channel.queue_unbind(unbind, exchange, routing_key=key), self.timeout_s)

    async def delete_when_empty(self, name: str, into: str, report: str) -> int:
        """Delete ``name`` (already unbound: nothing routes to it any more) once it is empty
        and unused; what arrived before the unbinding is moved first. Returns the messages
        moved. Quorum queues refuse queue.delete's if-empty and if-unused (NOT_IMPLEMENTED,
        which closes the connection), so both are checked just before instead."""
        moved = 0
        for _ in range(MAX_DELETE_ATTEMPTS):
            moved += await self.drain(name, into, report)
            probe = await self.passive(name)
            if probe.consumers:
                raise QueueMoveRefused(f"{name} has consumers: stop them and run again")
            if probe.messages:
                continue  # arrived since the drain: once more
            async with self._channel() as channel:
                await within(channel.queue_delete(name), self.timeout_s)
            return moved
        raise QueueMoveRefused(f"{name} keeps refilling: stop the publishers and run again")

    async def drain(self, source: str, into: str, report: str, limit: int | None = None) -> int:
        """Move ``source``'s messages to ``into`` in order, in batches, each confirmed before
        it is acknowledged on ``source``; at most ``limit`` (None: until it is empty)."""
        moved = 0
        async with self._channel(confirms=True) as channel:
            while limit is None or moved < limit:
                size = self.batch if limit is None else min(self.batch, limit - moved)
                got: list[aiormq.abc.DeliveredMessage] = []
                async with asyncio.timeout(self.timeout_s * 3):
                    while len(got) < size:
                        message = await channel.basic_get(source, no_ack=False)
                        if not isinstance(message.delivery, spec.Basic.GetOk):
                            break  # GetEmpty
                        got.append(message)
                    if not got:
                        return moved
                    # One task per message, started in order: the channel's lock is FIFO, so
                    # they go out in order; each waits for its own confirm.
                    confirms = await asyncio.gather(
                        *(
                            channel.basic_publish(
                                m.body, exchange="", routing_key=into,
                                properties=_unqueued(m.header.properties), mandatory=True,
                            )
                            for m in got
                        )
                    )  # fmt: skip
                    for confirm in confirms:
                        if not isinstance(confirm, spec.Basic.Ack):
                            raise BrokerError(f"{into} refused a moved message: {type(confirm).__name__}")
                    await channel.basic_ack(_tag(got[-1]), multiple=True)
                moved += len(got)
                if self.on_progress is not None:
                    self.on_progress(report, moved)
                await self.fault("moved-batch", source)
        return moved

    async def converge(self, queue: QueueSpec, *, dry_run: bool) -> QueueReport:
        name, holding = queue.name, holding_queue(queue.name)
        found, held = await self.passive(name), await self.passive(holding)
        # Only an existing queue is probed (declaring a missing one would create it); a probe
        # of an existing one changes nothing, whether it succeeds or is refused.
        reason = await self.differs(queue) if found.exists else ""
        if dry_run:
            if reason:
                return QueueReport(name, "would move", found.messages, reason)
            if held.exists:
                return QueueReport(name, "would finish", held.messages)
            return QueueReport(name, "as declared" if found.exists else "would create")
        if not reason and not held.exists:
            if not found.exists:
                await self.declare(name, dict(queue.arguments))
            await self.rebind(queue, bind=name, unbind=holding)
            return QueueReport(name, "as declared" if found.exists else "created")
        moved = 0
        if reason:
            if found.consumers:
                raise QueueMoveRefused(f"{name} has {found.consumers} consumers: stop them and run again")
            log.info("queue moving to its declaration", queue=name, reason=reason, messages=found.messages)
            await self.declare(holding, {"x-queue-type": "quorum"})
            moved += await self.drain(name, holding, name, limit=found.messages)
            await self.rebind(queue, bind=holding, unbind=name)
            moved += await self.delete_when_empty(name, holding, name)
            await self.fault("source-deleted", name)
        # The holding queue holds the messages: the queue as declared, filled back in order.
        await self.declare(name, dict(queue.arguments))
        moved += await self.drain(holding, name, name)
        await self.rebind(queue, bind=name, unbind=holding)
        moved += await self.delete_when_empty(holding, name, name)
        log.info("queue moved to its declaration", queue=name, moved=moved)
        return QueueReport(name, "moved", moved, reason)


def _unqueued(properties: spec.Basic.Properties) -> spec.Basic.Properties:
    """The properties as published: without the header a quorum queue adds to each delivery
    (x-delivery-count), which the next queue counts afresh."""
    headers = properties.headers
    if headers and "x-delivery-count" in headers:
        properties.headers = {k: v for k, v in headers.items() if k != "x-delivery-count"}
    return properties


def _tag(message: aiormq.abc.DeliveredMessage) -> int:
    delivery = message.delivery
    if not isinstance(delivery, spec.Basic.GetOk) or delivery.delivery_tag is None:
        raise BrokerError("a moved message has no delivery tag")
    return delivery.delivery_tag


async def move_to_declared(
    url: str,
    topology: Topology,
    *,
    batch: int = 200,
    dry_run: bool = False,
    timeout_s: float = 10.0,
    on_progress: Progress | None = None,
    fault: Fault | None = None,
) -> list[QueueReport]:
    """Bring every queue of ``topology`` to its declaration on the broker at ``url``, moving
    the messages of any declared otherwise (see the module). ``dry_run``: only say what it
    would do (it declares nothing). Raises QueueMoveRefused (fix and run again: nothing is
    lost), BrokerUnavailable, BrokerError."""
    if not 1 <= batch <= 10_000:
        raise ValueError(f"batch must be 1..10000, not {batch}")
    try:
        connection = await within(
            aiormq.connect(url, client_properties={"connection_name": "hiwallet queue move"}), timeout_s
        )
    except BROKER_FAILURES as exc:
        raise BrokerUnavailable(f"cannot connect to RabbitMQ: {type(exc).__name__}") from exc
    mover = _Mover(
        connection, batch=batch, timeout_s=timeout_s, on_progress=on_progress, fault=fault or _noop_fault
    )
    try:
        if not dry_run:
            async with mover._channel() as channel:
                for exchange in topology.exchanges:
                    await within(
                        channel.exchange_declare(
                            exchange.name,
                            exchange_type=exchange.type,
                            durable=True,
                            arguments=dict(exchange.arguments),
                        ),
                        timeout_s,
                    )
        seen: set[str] = set()
        reports = []
        for queue in topology.queues:
            if queue.name not in seen:
                seen.add(queue.name)
                reports.append(await mover.converge(queue, dry_run=dry_run))
        return reports
    except aiormq.exceptions.ChannelPreconditionFailed as exc:
        raise QueueMoveRefused(f"the topology differs from what exists: {exc}") from exc
    except (QueueMoveRefused, BrokerError):
        raise
    except asyncio.CancelledError:
        raise
    except BROKER_FAILURES as exc:
        raise BrokerUnavailable(f"the move stopped: {type(exc).__name__}: {exc}") from exc
    finally:
        with contextlib.suppress(*BROKER_FAILURES):
            await within(connection.close(), timeout_s)
