"""The broker side of a service built by core.service, and the platform's one broker-start
policy: the process serves while RabbitMQ is away; its topology is declared as soon as RabbitMQ
answers (retrying meanwhile: an outbox keeps what is to be published, a queue what is to be
taken); only then do its relays publish and its consumers consume. ``/ready`` says ``broker``
until the topology is declared and while the connection is lost.

Apart from core.service so that a service with no broker (wallet-api) or no consumer and no
relay (bank-webhook) imports none of it: a service declares ``messaging=Messaging(topology)``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import asyncpg
import structlog

from hiwallet.core.broker import Broker, BrokerError, BrokerUnavailable, Topology
from hiwallet.core.http.app import ReadyCheck
from hiwallet.core.outbox import Relay
from hiwallet.core.service import Background, OutboxSpec
from hiwallet.core.settings import Settings

__all__ = ["DECLARE_RETRY_MAX_S", "Messaging", "declare_when_reachable"]

log = structlog.get_logger(__name__)

# Declaring the topology while RabbitMQ is away: 0.5 s doubling up to this.
DECLARE_RETRY_MAX_S = 10.0


async def declare_when_reachable(
    broker: Broker, topology: Topology, *, retry_max_s: float = DECLARE_RETRY_MAX_S
) -> None:
    """Connect and declare ``topology``, retrying while RabbitMQ is away (an outbox keeps what
    is to be published meanwhile; /ready says the broker is not there)."""
    delay_s = 0.5
    while True:
        try:
            await broker.start()
            await broker.declare(topology)
            log.info("topology declared", exchanges=[e.name for e in topology.exchanges])
            return
        except BrokerError as exc:
            log.warning("cannot declare the topology yet", error=str(exc), retry_in_s=delay_s)
        await asyncio.sleep(delay_s)
        delay_s = min(retry_max_s, delay_s * 2)


@dataclass(frozen=True)
class Messaging:
    """A service's broker: the topology it declares (core.service.Messaging)."""

    topology: Topology

    def connect(self, settings: Settings, client_name: str) -> Broker:
        return Broker(settings.amqp_url.get_secret_value(), client_name=client_name)

    def start(
        self, bus: Broker, tasks: Background, checks: dict[str, ReadyCheck], then: Callable[[], None]
    ) -> None:
        declared = asyncio.Event()
        topology = self.topology

        async def broker_ready() -> None:
            if not declared.is_set():
                raise BrokerUnavailable("the topology is not declared yet")
            await bus.check()

        async def declare_then_work() -> None:
            # Publishing before the exchanges exist would only be refused (unroutable), and a
            # queue must exist before it is consumed.
            await declare_when_reachable(bus, topology)
            declared.set()
            then()

        checks["broker"] = broker_ready
        tasks.start("broker", declare_then_work, forever=False)

    def relay(
        self,
        connect: Callable[[], Awaitable[asyncpg.Connection]],
        bus: Broker,
        outbox: OutboxSpec,
        *,
        batch_size: int,
        poll_interval_s: float,
        min_pass_interval_s: float,
        on_published: Callable[[int], None] | None,
    ) -> Relay:
        return Relay(
            connect=connect,
            broker=bus,
            table=outbox.table,
            channel=outbox.channel,
            lock_key=outbox.lock_key,
            batch_size=batch_size,
            poll_interval_s=poll_interval_s,
            min_pass_interval_s=min_pass_interval_s,
            on_published=on_published,
        )

    async def close(self, bus: Broker) -> None:
        await bus.close()
