"""The wallet-consumer process: core's Consumer on the top-up partitions, the handler, and an
HTTP app for ``/health``, ``/ready`` (database, broker and the consumer) and ``/metrics`` only.

At start it connects to PostgreSQL as the wallet database's application role and to RabbitMQ,
declares the top-up topology itself (idempotent: whoever starts first declares it), and
consumes every partition with a prefetch of ``prefetch`` (200), handling what each queue has
delivered in batches of up to ``max_batch`` (100) in delivery order, one transaction a batch
(core.consumer's batch mode; the queues are single-active-consumer: another instance is a
standby). At stop (SIGTERM, Ctrl-C) it takes no new batch, finishes the one in hand, and
closes; a message it could not finish is redelivered, and its processed_events row makes that
harmless.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import structlog
from fastapi import FastAPI

from hiwallet.core import db
from hiwallet.core.broker import Broker, Topology, partition_queues, partitioned_topology
from hiwallet.core.consumer import Consumer, ConsumerMetrics
from hiwallet.core.http import ReadyCheck, create_app, serve, settle_heap_once_started
from hiwallet.core.logging import configure_logging
from hiwallet.core.settings import Settings, get_settings
from hiwallet.ledger import Fees, Ledger, LedgerStore, init_connection
from hiwallet.wallet_consumer.handler import CONSUMER_NAME, TopupHandler, is_transient
from hiwallet.wallet_consumer.metrics import TopupMetrics
from hiwallet.wallet_consumer.settings import WalletConsumerSettings, get_wallet_consumer_settings
from hiwallet.wallet_consumer.topups import count_unattributed

log = structlog.get_logger(__name__)


def topology_of(settings: WalletConsumerSettings) -> Topology:
    """What the consumer declares: core.broker.topups_topology() with the default settings."""
    return partitioned_topology(
        settings.exchange,
        partitions=settings.partitions,
        dead_letter_exchange=settings.dead_letter_exchange,
        dead_letter_key=settings.dead_letter_key,
        dead_letter_queue=settings.dead_letter_queue,
    )


async def _refresh_unattributed(pool: asyncpg.Pool, metrics: TopupMetrics, interval_s: float) -> None:
    while True:
        try:
            metrics.unattributed.set(await count_unattributed(pool))
        except Exception as exc:  # the next round tries again; /ready reports the database
            log.warning("unattributed count failed", error=type(exc).__name__)
        await asyncio.sleep(interval_s)


async def _started(consumer: Consumer, task: asyncio.Task[None], timeout_s: float) -> None:
    """Wait until the consumer consumes every queue; its failure to start is raised."""
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


def create_wallet_consumer_app(
    settings: WalletConsumerSettings | None = None,
    *,
    database: str | None = None,
    core_settings: Settings | None = None,
) -> FastAPI:
    """``database`` overrides hiwallet_wallet (tests use fresh ones)."""
    settings = settings or get_wallet_consumer_settings()
    core = core_settings or get_settings()
    checks: dict[str, ReadyCheck] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        registry = app.state.metrics_registry
        consumer_metrics = ConsumerMetrics(registry)
        topup_metrics = TopupMetrics(registry)
        name = database or settings.database or db.DATABASES["wallet"]
        pool = await db.create_pool(
            name,
            role=db.app_role("wallet"),
            settings=core,
            max_size=settings.db_pool_max_size,
            init=init_connection,
        )
        broker = Broker(core.amqp_url, client_name=settings.client_name)
        tasks: list[asyncio.Task[None]] = []
        consumer: Consumer | None = None
        try:
            await broker.start()
            await broker.declare(topology_of(settings))
            ledger = Ledger(LedgerStore.from_settings(pool, core), Fees.from_settings(core))
            handler = TopupHandler(ledger, topup_metrics)
            consumer = Consumer(
                broker=broker,
                pool=pool,
                queues=partition_queues(settings.exchange, settings.partitions),
                consumer_name=CONSUMER_NAME,
                handler=handler,
                dead_letter_exchange=settings.dead_letter_exchange,
                dead_letter_key=settings.dead_letter_key,
                max_attempts=settings.max_attempts,
                is_transient=is_transient,
                metrics=consumer_metrics,
                prefetch=settings.prefetch,
                batch_handler=handler.batch if settings.max_batch > 1 else None,
                max_batch=settings.max_batch,
                batch_turns=settings.batch_turns,
            )
            running = asyncio.create_task(consumer.run(), name="wallet-consumer")
            tasks.append(running)
            await _started(consumer, running, settings.start_timeout_s)
            tasks.append(
                asyncio.create_task(
                    _refresh_unattributed(pool, topup_metrics, settings.unattributed_refresh_s),
                    name="wallet-consumer-unattributed",
                )
            )

            async def database_ready() -> None:
                await pool.fetchval("SELECT 1")

            async def consuming() -> None:
                if running.done():
                    raise RuntimeError("the consumer stopped")

            checks.update({"database": database_ready, "broker": broker.check, "consumer": consuming})
            app.state.consumer = consumer
            app.state.pool = pool
            yield
        finally:
            checks.clear()
            if consumer is not None:
                await consumer.stop()
            for task in tasks:
                if task.get_name() == "wallet-consumer":
                    with contextlib.suppress(Exception, asyncio.CancelledError):
                        # the message in hand finishes; past the timeout it is given back
                        await asyncio.wait_for(task, settings.stop_timeout_s)
                else:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            await broker.close()
            await pool.close()
            log.info("wallet-consumer stopped")

    return create_app("wallet-consumer", ready_checks=checks, lifespan=lifespan)


def run_wallet_consumer(port: int | None, host: str) -> None:
    """Serve wallet-consumer (the process entry point): one process; more instances are
    standbys (single active consumer per partition)."""
    configure_logging("wallet-consumer")
    settings = get_wallet_consumer_settings()
    serve(
        settle_heap_once_started(create_wallet_consumer_app(settings)), host=host, port=port or settings.port
    )
