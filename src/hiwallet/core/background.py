"""The broker-start policy's one step that core.service does not hold itself: declare a
topology once RabbitMQ answers (retrying while it is away), and the pause before a background
part that failed starts again. core.service runs every service's relays, consumers, jobs and
gauges (its Background keeps them running)."""

from __future__ import annotations

import asyncio

import structlog

from hiwallet.core.broker import Broker, BrokerError, Topology

__all__ = [
    "DECLARE_RETRY_MAX_S",
    "RESTART_DELAY_S",
    "declare_when_reachable",
]

log = structlog.get_logger(__name__)

# A background task that stopped on an error starts again after this long: long enough not to
# spin on a fault that persists (each start logs its traceback), short enough that a relay or a
# consumer is back within a second of the database or broker.
RESTART_DELAY_S = 1.0
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
