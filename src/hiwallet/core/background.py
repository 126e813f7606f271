"""What every long-running service does around its work, in one copy: keep a background task
alive, repeat a small task on an interval, declare its broker topology once RabbitMQ answers, and
wait until a consumer consumes. topup-webhook, wallet-consumer, withdrawal-orchestrator and
bank-adapter run their relays, consumers, jobs and gauges through these."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

from hiwallet.core.broker import Broker, BrokerError, Topology
from hiwallet.core.consumer import Consumer

__all__ = [
    "DECLARE_RETRY_MAX_S",
    "RESTART_DELAY_S",
    "consumer_started",
    "declare_when_reachable",
    "every",
    "supervised",
]

log = structlog.get_logger(__name__)

# A background task that stopped on an error starts again after this long: long enough not to
# spin on a fault that persists (each start logs its traceback), short enough that a relay or a
# consumer is back within a second of the database or broker.
RESTART_DELAY_S = 1.0
# Declaring the topology while RabbitMQ is away: 0.5 s doubling up to this.
DECLARE_RETRY_MAX_S = 10.0


async def supervised(
    name: str, work: Callable[[], Awaitable[None]], *, restart_delay_s: float = RESTART_DELAY_S
) -> None:
    """``work`` for as long as the process runs: started again if it stops on an error (a
    cancellation, the process stopping, is not an error)."""
    while True:
        try:
            await work()
            return
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("background task stopped; starting it again", task=name)
        await asyncio.sleep(restart_delay_s)


async def every(interval_s: float, name: str, work: Callable[[], Awaitable[None]]) -> None:
    """``work`` once every ``interval_s`` (gauges, counts): a round that fails is logged by its
    error's class and the next round tries again. Unlike core.jobs.PeriodicJob there is no
    advisory lock: every instance does it (what it refreshes is the instance's own)."""
    while True:
        try:
            await work()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the next round tries again
            log.warning("background work failed", work=name, error=type(exc).__name__)
        await asyncio.sleep(interval_s)


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


async def consumer_started(consumer: Consumer, task: asyncio.Task[None], timeout_s: float) -> None:
    """Wait until ``consumer`` (running as ``task``) consumes every one of its queues; its
    failure to start is raised, and not starting within ``timeout_s`` is a TimeoutError."""
    started = asyncio.ensure_future(consumer.wait_started())
    try:
        done, _ = await asyncio.wait({started, task}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        started.cancel()
    if task in done:
        task.result()  # raises what stopped it
        raise RuntimeError("the consumer stopped as it started")
    if not done:
        raise TimeoutError(f"the consumer did not start within {timeout_s} s")
